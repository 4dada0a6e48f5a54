// The `.braid` SQLite schema: DDL, version, and the checks a reader makes before trusting a file.
// docs/schema.md is the reference for users; keep the two in step.
#pragma once

#include <sqlite3.h>

#include <string>

namespace braid::schema {

inline constexpr int kMajor = 1;  // a reader refuses files of a newer major version
inline constexpr int kMinor = 1;  // newer minor versions only add tables/columns a reader ignores

// Creates every table of the current version in an empty database (indexes: see below).
void create_tables(sqlite3* db);
// Indexes for time-window queries and cross-rank matching. Idempotent: the writer creates them
// with the tables and again at commit, so files of older versions get them too.
void create_indexes(sqlite3* db);

struct Version {
  int major = 0, minor = 0;
};
// Reads meta.schema_version. Throws braid::Error naming `path` when the file is not SQLite, is
// not a .braid store, or has a newer major version.
Version check(sqlite3* db, const std::string& path);
// Brings a file of an older version up to the current one, in place (inside a transaction).
void migrate(sqlite3* db, const std::string& path);

// The two tables capture adds (nccl_calls, nccl_proxy_ops; docs/schema.md) and their index.
// Only files that hold such rows have them. Idempotent.
void create_capture_tables(sqlite3* db);

// Throws braid::Error (Unsupported) naming `path` when the file holds a table, or a column of a
// table, that this braid's schema (core, analysis and capture tables) does not define: a tool
// that copies whole files (braid merge) would otherwise drop it without a word. SQLite's own
// tables (sqlite_*) are ignored.
void check_known_layout(sqlite3* db, const std::string& path);

}  // namespace braid::schema

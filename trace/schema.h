// The `.braid` SQLite schema: DDL, version, and the checks a reader makes before trusting a file.
// docs/schema.md is the reference for users; keep the two in step.
#pragma once

#include <sqlite3.h>

#include <span>
#include <string>
#include <string_view>

namespace braid::schema {

inline constexpr int kMajor = 1;  // a reader refuses files of a newer major version
inline constexpr int kMinor = 2;  // newer minor versions only add tables/columns a reader ignores

// Creates the core tables of the current version in an empty database (indexes: see below). The
// capture tables and the owned families (below) come with their first rows.
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

// The two tables `braid import --et` adds (et_ops, et_tensors; docs/schema.md, "Execution trace
// tables"). Only files that hold such rows have them. Idempotent.
void create_et_tables(sqlite3* db);

// A table family that a module of a higher layer owns (docs/architecture.md): that module holds
// the family's DDL and creates its tables (CREATE TABLE IF NOT EXISTS) in the transaction of its
// first write, and it alone writes and reads their rows; a file has them once written, and the
// owner's readers take a missing table as empty. The schema registers the names only, so that
// the store tells them from tables it does not know; tests/fusion/schedule_store_test.cc checks
// that each owner creates exactly its registered tables.
struct OwnedFamily {
  std::string_view owner;  // the owning module, e.g. "analysis/store.cc"
  std::span<const std::string_view> tables;
};
// analysis_* (analysis/store.cc) and schedules, opportunities (fusion/schedule_store.cc).
std::span<const OwnedFamily> owned_families();
// The family `table` belongs to; nullptr for a core or capture table, or one braid does not know.
const OwnedFamily* owner_of(std::string_view table);
// Whether create_tables creates `table` (the core tables: meta, strings, ..., diagnostics).
bool is_core_table(std::string_view table);

// Throws braid::Error (Unsupported) naming `path` when the file holds a table, or a column of a
// table, that this braid's schema (core and capture tables, owned families) does not define: a
// tool that copies whole files (braid merge) would otherwise drop it without a word. The owned
// families' tables are accepted by name (merge leaves them out and says so). SQLite's own tables
// (sqlite_*) are ignored.
void check_known_layout(sqlite3* db, const std::string& path);

}  // namespace braid::schema

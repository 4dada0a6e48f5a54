// In-place, all-or-nothing updates of an existing `.braid` file: analysis results, schedules,
// opportunities. Everything between construction and commit() is one IMMEDIATE transaction, so
// a failure, an exception or a kill leaves the file exactly as it was (SQLite's journal), and
// concurrent readers (the GUI) see either the old or the new content.
//
// Bulk loads of events go through TraceWriter instead (its own temporary file and rename).
#pragma once

#include <sqlite3.h>

#include <string>

namespace braid {

class StoreUpdate {
 public:
  // Opens `path` read-write, checks it is a `.braid` store this build can read (migrating an
  // older version), and begins the transaction. Throws braid::Error (NotFound, BadFormat,
  // Unsupported, Store) naming the file.
  explicit StoreUpdate(const std::string& path);
  ~StoreUpdate();  // rolls back unless commit() succeeded
  StoreUpdate(const StoreUpdate&) = delete;
  StoreUpdate& operator=(const StoreUpdate&) = delete;

  sqlite3* db() const { return db_; }
  const std::string& path() const { return path_; }
  void commit();

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
  bool done_ = false;
};

}  // namespace braid

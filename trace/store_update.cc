#include "trace/store_update.h"

#include <filesystem>

#include "trace/error.h"
#include "trace/schema.h"
#include "trace/sqlite_util.h"

namespace braid {

StoreUpdate::StoreUpdate(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(ErrorCode::NotFound, path + ": no such .braid file");
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    std::string msg = path + ": cannot open for writing (" + sqlite3_errmsg(db_) + ")";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(ErrorCode::Io, msg);
  }
  try {
    // Wait for a concurrent writer instead of failing at once.
    sqlite3_busy_timeout(db_, 10000);
    schema::check(db_, path);
    schema::migrate(db_, path);
    sql::exec(db_, "BEGIN IMMEDIATE");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

StoreUpdate::~StoreUpdate() {
  if (!db_) return;
  if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db_);
}

void StoreUpdate::commit() {
  sql::exec(db_, "COMMIT");
  done_ = true;
}

}  // namespace braid

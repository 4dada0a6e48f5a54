#include "trace/sqlite_util.h"

namespace braid::sql {

void fail(sqlite3* db, std::string_view what) {
  throw Error(ErrorCode::Store,
              std::string(what) + ": " + (db ? sqlite3_errmsg(db) : "no database"));
}

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw Error(ErrorCode::Store, "SQL failed: " + msg);
  }
}

Stmt::Stmt(sqlite3* db, std::string_view sql) : db_(db) {
  if (sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                         &s_, nullptr) != SQLITE_OK)
    fail(db, "prepare");
}

Stmt& Stmt::operator=(Stmt&& o) noexcept {
  if (this != &o) {
    if (s_) sqlite3_finalize(s_);
    db_ = o.db_;
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}

Stmt::~Stmt() {
  if (s_) sqlite3_finalize(s_);
}

bool Stmt::step() {
  int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(db_, "step");
}

int64_t scalar(sqlite3* db, std::string_view sql, int64_t fallback) {
  Stmt s(db, sql);
  return s.step() ? s.i64(0) : fallback;
}

void Stmt::too_big(size_t bytes) {
  throw Error(ErrorCode::Store, "a value of " + std::to_string(bytes) +
                                    " bytes is more than one SQLite value holds (SQLITE_MAX_LENGTH:"
                                    " 1,000,000,000 bytes in Debian's build)");
}

}  // namespace braid::sql

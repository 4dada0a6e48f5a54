// Small RAII helpers over the SQLite C API, with errors turned into braid::Error.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "trace/error.h"

namespace braid::sql {

[[noreturn]] void fail(sqlite3* db, std::string_view what);
void exec(sqlite3* db, const char* sql);

class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, std::string_view sql);
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_) { o.s_ = nullptr; }
  Stmt& operator=(Stmt&& o) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt();

  sqlite3_stmt* get() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }
  // Binding is 1-based as in SQLite.
  void bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void bind(int i, int v) { sqlite3_bind_int64(s_, i, v); }
  void bind(int i, double v) { sqlite3_bind_double(s_, i, v); }
  // A text over what one SQLite value holds (SQLITE_MAX_LENGTH, 1 GB by default; 2 GiB at
  // most) throws braid::Error(Store) saying how large it is, instead of storing a NULL.
  void bind(int i, std::string_view v) {
    if (v.size() > 0x7fffffffu || sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()),
                                                    SQLITE_TRANSIENT) == SQLITE_TOOBIG)
      too_big(v.size());
  }
  void bind_null(int i) { sqlite3_bind_null(s_, i); }
  // Returns true while a row is available.
  bool step();
  void run() {
    step();
    reset();
  }
  void reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  int64_t i64(int col) const { return sqlite3_column_int64(s_, col); }
  double f64(int col) const { return sqlite3_column_double(s_, col); }
  bool is_null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  // A text column's bytes without a copy, valid until the statement steps on.
  std::string_view view(int col) const {
    auto p = sqlite3_column_text(s_, col);
    return p ? std::string_view(reinterpret_cast<const char*>(p),
                                static_cast<size_t>(sqlite3_column_bytes(s_, col)))
             : std::string_view();
  }
  std::string text(int col) const {
    auto p = sqlite3_column_text(s_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s_, col))
             : std::string();
  }

 private:
  [[noreturn]] static void too_big(size_t bytes);
  sqlite3* db_ = nullptr;
  sqlite3_stmt* s_ = nullptr;
};

// One query returning a single integer (or `fallback` when there is no row).
int64_t scalar(sqlite3* db, std::string_view sql, int64_t fallback = 0);

}  // namespace braid::sql

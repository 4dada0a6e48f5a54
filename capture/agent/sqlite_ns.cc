// SQLite for the agent, in a link namespace of its own. libbraid_capture.so is preloaded into jobs
// whose own libraries may use another SQLite (a conda or venv Python's _sqlite3 module, built
// against a newer libsqlite3.so.0 than the system's): had the agent needed the system's library,
// that copy would have been the process's libsqlite3.so.0 and the job's import would fail on a
// missing symbol. Here the agent defines (privately: the version script keeps them local) the
// SQLite calls its file sink makes, and forwards each to a libsqlite3.so.0 loaded with
// dlmopen(LM_ID_NEWLM), which the job's symbol lookup never sees. The agent needs no SQLite to
// load; without one on the machine, opening the output fails with a message saying so, and the
// job runs on uncaptured.
#include <dlfcn.h>
#include <sqlite3.h>

#include <cstdio>
#include <string>
#include <type_traits>

namespace {

struct Sqlite {
  decltype(&sqlite3_bind_int64) bind_int64;
  decltype(&sqlite3_bind_null) bind_null;
  decltype(&sqlite3_bind_text) bind_text;
  decltype(&sqlite3_clear_bindings) clear_bindings;
  decltype(&sqlite3_close) close;
  decltype(&sqlite3_close_v2) close_v2;
  decltype(&sqlite3_column_bytes) column_bytes;
  decltype(&sqlite3_column_int64) column_int64;
  decltype(&sqlite3_column_text) column_text;
  decltype(&sqlite3_errmsg) errmsg;
  decltype(&sqlite3_exec) exec;
  decltype(&sqlite3_finalize) finalize;
  decltype(&sqlite3_free) free;
  decltype(&sqlite3_open) open;
  decltype(&sqlite3_open_v2) open_v2;
  decltype(&sqlite3_prepare_v2) prepare_v2;
  decltype(&sqlite3_prepare_v3) prepare_v3;
  decltype(&sqlite3_reset) reset;
  decltype(&sqlite3_step) step;
};
static_assert(std::is_trivially_destructible_v<Sqlite>);

char g_error[512] = "";  // why there is no SQLite; read-only once set

// Loaded once, never unloaded (the agent's exit handler still writes).
const Sqlite* lib() {
  static const Sqlite* s = []() -> const Sqlite* {
    void* h = dlmopen(LM_ID_NEWLM, "libsqlite3.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      std::snprintf(g_error, sizeof g_error,
                    "libsqlite3.so.0 cannot be loaded in the agent's own link namespace (%s)",
                    e ? e : "unknown error");
      return nullptr;
    }
    auto* t = new Sqlite;
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && ok) {
        ok = false;
        std::snprintf(g_error, sizeof g_error, "libsqlite3.so.0 lacks %s", name);
      }
    };
    get(t->bind_int64, "sqlite3_bind_int64");
    get(t->bind_null, "sqlite3_bind_null");
    get(t->bind_text, "sqlite3_bind_text");
    get(t->clear_bindings, "sqlite3_clear_bindings");
    get(t->close, "sqlite3_close");
    get(t->close_v2, "sqlite3_close_v2");
    get(t->column_bytes, "sqlite3_column_bytes");
    get(t->column_int64, "sqlite3_column_int64");
    get(t->column_text, "sqlite3_column_text");
    get(t->errmsg, "sqlite3_errmsg");
    get(t->exec, "sqlite3_exec");
    get(t->finalize, "sqlite3_finalize");
    get(t->free, "sqlite3_free");
    get(t->open, "sqlite3_open");
    get(t->open_v2, "sqlite3_open_v2");
    get(t->prepare_v2, "sqlite3_prepare_v2");
    get(t->prepare_v3, "sqlite3_prepare_v3");
    get(t->reset, "sqlite3_reset");
    get(t->step, "sqlite3_step");
    if (!ok) {
      delete t;
      return nullptr;
    }
    return t;
  }();
  return s;
}

}  // namespace

// Without SQLite nothing opens (the sink reports g_error through sqlite3_errmsg); every other call
// needs an open database, so it is never reached then.
extern "C" {
int sqlite3_open_v2(const char* file, sqlite3** db, int flags, const char* vfs) {
  if (const Sqlite* s = lib()) return s->open_v2(file, db, flags, vfs);
  *db = nullptr;
  return SQLITE_CANTOPEN;
}
int sqlite3_open(const char* file, sqlite3** db) {
  if (const Sqlite* s = lib()) return s->open(file, db);
  *db = nullptr;
  return SQLITE_CANTOPEN;
}
const char* sqlite3_errmsg(sqlite3* db) {
  if (const Sqlite* s = lib()) return s->errmsg(db);
  return g_error;
}
int sqlite3_close(sqlite3* db) { return lib() ? lib()->close(db) : SQLITE_OK; }
int sqlite3_close_v2(sqlite3* db) { return lib() ? lib()->close_v2(db) : SQLITE_OK; }
void sqlite3_free(void* p) {
  if (const Sqlite* s = lib()) s->free(p);
}
int sqlite3_exec(sqlite3* db, const char* sql, int (*cb)(void*, int, char**, char**), void* arg,
                 char** err) {
  return lib()->exec(db, sql, cb, arg, err);
}
int sqlite3_prepare_v2(sqlite3* db, const char* sql, int n, sqlite3_stmt** stmt,
                       const char** tail) {
  return lib()->prepare_v2(db, sql, n, stmt, tail);
}
int sqlite3_prepare_v3(sqlite3* db, const char* sql, int n, unsigned int flags, sqlite3_stmt** stmt,
                       const char** tail) {
  return lib()->prepare_v3(db, sql, n, flags, stmt, tail);
}
int sqlite3_bind_int64(sqlite3_stmt* s, int i, sqlite3_int64 v) {
  return lib()->bind_int64(s, i, v);
}
int sqlite3_bind_null(sqlite3_stmt* s, int i) { return lib()->bind_null(s, i); }
int sqlite3_bind_text(sqlite3_stmt* s, int i, const char* v, int n, void (*destructor)(void*)) {
  return lib()->bind_text(s, i, v, n, destructor);
}
int sqlite3_clear_bindings(sqlite3_stmt* s) { return lib()->clear_bindings(s); }
int sqlite3_column_bytes(sqlite3_stmt* s, int i) { return lib()->column_bytes(s, i); }
sqlite3_int64 sqlite3_column_int64(sqlite3_stmt* s, int i) { return lib()->column_int64(s, i); }
const unsigned char* sqlite3_column_text(sqlite3_stmt* s, int i) {
  return lib()->column_text(s, i);
}
int sqlite3_finalize(sqlite3_stmt* s) { return lib() ? lib()->finalize(s) : SQLITE_OK; }
int sqlite3_reset(sqlite3_stmt* s) { return lib()->reset(s); }
int sqlite3_step(sqlite3_stmt* s) { return lib()->step(s); }
}

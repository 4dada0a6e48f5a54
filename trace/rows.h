// Writing rows into a `.braid` database: the one place that says which column of which table holds
// which field, how rows are inserted, how strings are interned and how the small tables are
// written. Both writers use it, TraceWriter (importers, merge: a temporary file renamed at the
// end) and capture::FileSink (a live capture: WAL, committed as it goes), so their files cannot
// drift apart; TraceReader reads the capture tables back with the same layout.
//
// Nothing here opens files, starts transactions or threads: the callers own durability.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trace/model.h"
#include "trace/sqlite_util.h"

namespace braid::rows {

// ---- event tables: name, column count, INSERT OR REPLACE (keyed tables) ----
template <typename T> struct Table;
template <> struct Table<Kernel> { static constexpr const char* name = "kernels"; static constexpr int cols = 9; static constexpr bool replace = false; };
template <> struct Table<Memcpy> { static constexpr const char* name = "memcpys"; static constexpr int cols = 9; static constexpr bool replace = false; };
template <> struct Table<ApiCall> { static constexpr const char* name = "api_calls"; static constexpr int cols = 9; static constexpr bool replace = false; };
template <> struct Table<Range> { static constexpr const char* name = "nvtx_ranges"; static constexpr int cols = 9; static constexpr bool replace = false; };
template <> struct Table<Collective> { static constexpr const char* name = "collectives"; static constexpr int cols = 20; static constexpr bool replace = false; };
template <> struct Table<Step> { static constexpr const char* name = "steps"; static constexpr int cols = 5; static constexpr bool replace = true; };
template <> struct Table<NcclCallRow> { static constexpr const char* name = "nccl_calls"; static constexpr int cols = 20; static constexpr bool replace = false; };
template <> struct Table<ProxyOpRow> { static constexpr const char* name = "nccl_proxy_ops"; static constexpr int cols = 13; static constexpr bool replace = false; };
template <>
struct Table<CaptureWindow> {
  static constexpr const char* name = "capture_windows";
  static constexpr int cols = 4;
  static constexpr bool replace = true;
};
template <>
struct Table<EtOp> {
  static constexpr const char* name = "et_ops";
  static constexpr int cols = 15;
  static constexpr bool replace = false;
};
template <>
struct Table<EtTensor> {
  static constexpr const char* name = "et_tensors";
  static constexpr int cols = 18;
  static constexpr bool replace = false;
};

// Binds one row's columns (run_id first, in the table's column order) from parameter `i` on;
// returns the next free parameter.
int bind(sql::Stmt& s, int i, int64_t run, const Kernel& k);
int bind(sql::Stmt& s, int i, int64_t run, const Memcpy& m);
int bind(sql::Stmt& s, int i, int64_t run, const ApiCall& a);
int bind(sql::Stmt& s, int i, int64_t run, const Range& r);
int bind(sql::Stmt& s, int i, int64_t run, const Collective& c);
int bind(sql::Stmt& s, int i, int64_t run, const Step& st);
int bind(sql::Stmt& s, int i, int64_t run, const NcclCallRow& c);
int bind(sql::Stmt& s, int i, int64_t run, const ProxyOpRow& p);
int bind(sql::Stmt& s, int i, int64_t run, const CaptureWindow& w);
int bind(sql::Stmt& s, int i, int64_t run, const EtOp& o);
int bind(sql::Stmt& s, int i, int64_t run, const EtTensor& t);

// The capture tables read back: all their columns, in table order, from `col` (run_id) on.
NcclCallRow read_nccl_call(const sql::Stmt& s, int col = 0);
ProxyOpRow read_proxy_op(const sql::Stmt& s, int col = 0);
EtOp read_et_op(const sql::Stmt& s, int col = 0);
EtTensor read_et_tensor(const sql::Stmt& s, int col = 0);

// "INSERT [OR REPLACE] INTO table VALUES (?,..),(?,..)" with `rows` rows of `cols` columns.
std::string insert_sql(const char* table, int cols, int rows, bool replace = false);

// Prepared inserts of one table on one connection: one row at a time (a live capture), or a
// batch with a multi-row statement, which SQLite executes several times faster per row.
// Creates the capture or execution-trace tables on first use when T is one of theirs.
template <typename T>
class Inserter {
 public:
  Inserter() = default;
  explicit Inserter(sqlite3* db);
  void add(int64_t run, const T& row);
  void add(int64_t run, const std::vector<T>& rows);
  void reset() { multi_ = sql::Stmt(), single_ = sql::Stmt(); }  // before the connection closes

  static constexpr int kMulti = Table<T>::cols > 10 ? 32 : 64;

 private:
  sqlite3* db_ = nullptr;
  sql::Stmt multi_, single_;
};

// String interning: ids from 1 (0 is "no string"); each new string is reported once by
// take_new(), for the caller to write when it suits it. Views returned by take_new() stay valid
// as long as the table lives (strings are kept in a deque that never moves them).
class StringTable {
 public:
  StrId intern(std::string_view s);
  // Continues the ids of a file that already has strings (appending).
  void load(sqlite3* db);
  std::vector<std::pair<StrId, std::string_view>> take_new();
  bool has_new() const { return !new_.empty(); }
  size_t new_count() const { return new_.size(); }

  static void write(sqlite3* db, const std::vector<std::pair<StrId, std::string_view>>& batch);

 private:
  std::unordered_map<std::string_view, StrId> ids_;
  std::deque<std::string> arena_;
  std::vector<std::pair<StrId, std::string_view>> new_;
  StrId next_ = 1;
};

// Strings written one at a time on a connection that stays open (a live capture writes each new
// string in the transaction of the first row that names it).
class StringInserter {
 public:
  StringInserter() = default;
  explicit StringInserter(sqlite3* db);
  void add(StrId id, std::string_view text);
  void reset() { s_ = sql::Stmt(); }  // before the connection closes

 private:
  sql::Stmt s_;
};

// The small tables, one row per call (a later row for the same key replaces the earlier one,
// except diagnostics, which have no key).
class SmallTables {
 public:
  explicit SmallTables(sqlite3* db) : db_(db) {}
  void run(int64_t run, RunKind kind, int64_t schedule_id, std::string_view backend,
           std::string_view source, std::string_view label, std::string_view created_at);
  void rank(int64_t run, const RankInfo& r);
  void stream(int64_t run, const StreamInfo& s);
  void communicator(int64_t run, const Communicator& c);
  void diagnostic(int64_t run, const Diagnostic& d);
  void meta(std::string_view key, std::string_view value);
  // Removes `run`'s diagnostics (a writer that keeps running totals replaces them all).
  void clear_diagnostics(int64_t run);
  // Sets a rank's solved clock offset and its error bound (ranks.clock_offset_ns,
  // offset_error_ns), keeping the rest of its row; nothing when the rank has no row.
  void clock_offset(int64_t run, int32_t rank, Ns offset, Ns error);

 private:
  sql::Stmt& stmt(sql::Stmt& s, const char* text);
  sqlite3* db_;
  sql::Stmt run_, rank_, stream_, comm_, diag_, meta_, clear_diag_, offset_;
};

// Rewrites rank `from` as `to` in every table of `run` that has a rank column (event, capture and
// small tables). The capture tables must exist.
void renumber_rank(sqlite3* db, int64_t run, int32_t from, int32_t to);

// Moves the host and device events of rank `from` (kernels, memcpys, api_calls, nvtx_ranges) to
// rank `to` and shifts their times by `shift` (an importer that learns the rank or the time base
// after writing them).
void move_events(sqlite3* db, int64_t run, int32_t from, int32_t to, Ns shift);

// Gives the kernels of (run, rank) that start at `start` on `stream` and have category `from`
// the category `to`, for each (stream, start, to) of `list`.
void recategorize_kernels(sqlite3* db, int64_t run, int32_t rank, Category from,
                          const std::vector<std::tuple<int64_t, Ns, int>>& list);

// Gives the collective of (run, rank) that starts at `start` under name `name` and has no size
// yet (in_count < 0) these element counts, bytes and dtype (an execution trace that knows the
// tensors of a host collective the trace did not size).
void fill_collective_size(sqlite3* db, int64_t run, int32_t rank, Ns start, StrId name,
                          int64_t in_count, int64_t out_count, int64_t bytes, StrId dtype);

// Now, UTC, as runs.created_at stores it.
std::string now_iso8601();

}  // namespace braid::rows

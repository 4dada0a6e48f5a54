// Reading `.braid` files: the small tables whole, the event tables streamed, with time-window
// queries per (run, rank, stream) served by the window indexes.
#pragma once

#include <sqlite3.h>

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trace/model.h"

namespace braid {

namespace sql {
class Stmt;
}

// The collectives table's columns in the order collective_from_row reads them, for code that runs
// its own query over the table (the GUI's loader).
extern const char* const kCollectiveColumns;
Collective collective_from_row(const sql::Stmt& s);

struct RunRow {
  int64_t run_id = 0;
  RunKind kind = RunKind::Imported;
  int64_t schedule_id = -1;
  std::string backend, source, label, created_at;
};

class TraceReader {
 public:
  // Opens read-only. Throws braid::Error (NotFound, BadFormat, Unsupported) naming the file.
  explicit TraceReader(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  sqlite3* db() const { return db_; }
  const std::string& path() const { return path_; }

  std::vector<RunRow> runs() const;
  std::vector<RankInfo> ranks(int64_t run) const;
  std::vector<StreamInfo> streams(int64_t run) const;
  std::vector<Communicator> communicators(int64_t run) const;
  std::vector<Diagnostic> diagnostics(int64_t run) const;
  std::vector<Step> steps(int64_t run) const;
  std::string meta(const std::string& key) const;  // "" if absent
  // Every meta row as (key, value), by key.
  std::vector<std::pair<std::string, std::string>> meta_rows() const;

  // Interned strings (loaded once, on first use).
  const std::string& str(StrId id) const;
  // All of them, indexed by id ("" for an id no string has); a copy of the loaded ones, else read
  // for the caller alone (not kept).
  std::vector<std::string> strings() const;

  // How many rows `run` has in each table (memcpys without the memsets, which are counted apart);
  // counted once per run (the file is open read-only), the same answer after.
  struct Counts {
    int64_t gpu_streams = 0, cpu_threads = 0;
    int64_t kernels = 0, memcpys = 0, memsets = 0, api_calls = 0, ranges = 0, steps = 0;
    int64_t collectives = 0, communicators = 0;
  };
  Counts counts(int64_t run) const;
  // The distinct names of `run`'s API calls, as (string id, text), in no particular order.
  std::vector<std::pair<StrId, std::string>> api_call_names(int64_t run) const;
  // `run`'s collectives that ran on a stream (stream >= 0, not host-side records), counted by op
  // name ("allreduce", ...).
  std::map<std::string, int64_t> stream_collectives_by_op(int64_t run) const;

  // Streaming queries. The window forms return the events that overlap [t0, t1) on one
  // (rank, stream), in start order; `fn` returns false to stop early.
  template <typename T>
  using Fn = std::function<bool(const T&)>;
  void kernels(int64_t run, const Fn<Kernel>& fn) const;
  void kernels(int64_t run, int32_t rank, int64_t stream, Ns t0, Ns t1,
               const Fn<Kernel>& fn) const;
  void memcpys(int64_t run, const Fn<Memcpy>& fn) const;
  void memcpys(int64_t run, int32_t rank, int64_t stream, Ns t0, Ns t1,
               const Fn<Memcpy>& fn) const;
  // The kernels and copies of one (rank, stream) that start at or after `t0`, in start order: a
  // range of the index however large the table (the window forms first look up the table's
  // longest event, which reads it whole). With `fn` stopping early: a stream's first events.
  void kernels_from(int64_t run, int32_t rank, int64_t stream, Ns t0, const Fn<Kernel>& fn) const;
  void memcpys_from(int64_t run, int32_t rank, int64_t stream, Ns t0, const Fn<Memcpy>& fn) const;
  void api_calls(int64_t run, const Fn<ApiCall>& fn) const;
  // The CUDA runtime and driver calls alone (launches, synchronizations), in api_calls' order.
  void runtime_calls(int64_t run, const Fn<ApiCall>& fn) const;
  // One rank's rows whole, in the order of the whole run's (kernels, copies and ranges by stream
  // then start, calls by thread then start, collectives by start then stream): an analysis that
  // holds one rank at a time. A rank whose rows lie together in the file (one written a rank at
  // a time) is read in the table's order, twice as fast as through the index.
  std::vector<Kernel> kernels(int64_t run, int32_t rank) const;
  std::vector<Memcpy> memcpys(int64_t run, int32_t rank) const;
  std::vector<ApiCall> runtime_calls(int64_t run, int32_t rank) const;
  std::vector<ApiCall> api_calls(int64_t run, int32_t rank) const;
  std::vector<Range> ranges(int64_t run, int32_t rank) const;
  std::vector<Collective> collectives(int64_t run, int32_t rank) const;
  // The ranks with at least one collective in `run`, ascending: one seek of the index a rank.
  std::vector<int32_t> collective_ranks(int64_t run) const;
  // Of the rows these per-rank reads gave, how many were read in the table's order (the rest
  // through the index).
  int64_t rows_read_in_table_order() const { return table_order_rows_; }
  // The runtime and driver calls of one thread of a rank that start in [t0, t1), by start.
  void runtime_calls(int64_t run, int32_t rank, int64_t tid, Ns t0, Ns t1,
                     const Fn<ApiCall>& fn) const;
  void ranges(int64_t run, const Fn<Range>& fn) const;
  void collectives(int64_t run, const Fn<Collective>& fn) const;
  void collectives(int64_t run, int32_t rank, int64_t stream, Ns t0, Ns t1,
                   const Fn<Collective>& fn) const;
  // The capture tables (docs/schema.md), in (rank, call_id) / (rank, start) order; nothing when
  // the file has no such table.
  void nccl_calls(int64_t run, const Fn<NcclCallRow>& fn) const;
  void proxy_ops(int64_t run, const Fn<ProxyOpRow>& fn) const;
  // The capture windows the agent recorded (a capture with a --window), in (rank, start) order;
  // empty for a capture of the whole run and for imported runs.
  std::vector<CaptureWindow> capture_windows(int64_t run) const;
  // The execution-trace tables (`braid import --et`; docs/schema.md), in (rank, node) order;
  // nothing when the file has no such table.
  void et_ops(int64_t run, const Fn<EtOp>& fn) const;
  void et_tensors(int64_t run, const Fn<EtTensor>& fn) const;

  bool has_table(const std::string& name) const;

  // Tables of results derived from this file alone (the owned families of trace/schema.h:
  // analysis_*, schedules, opportunities) that exist in it, by name, with their row counts (all
  // runs).
  std::vector<std::pair<std::string, int64_t>> derived_tables() const;

  // The tables beyond the core schema (schema::is_core_table; sqlite_* aside)
  // that have a run_id column, by name, each with up to `max_rows` of `run`'s rows as text
  // (NULL as "", reals as %.6g), so that tables of later stages are shown as they are.
  struct TableText {
    std::string name;
    std::vector<std::string> columns;  // without run_id
    std::vector<std::vector<std::string>> rows;
    bool truncated = false;  // the run has more than max_rows rows
  };
  std::vector<TableText> extra_tables(int64_t run, size_t max_rows) const;

 private:
  Ns max_duration(const char* table, int64_t run) const;

  std::string path_;
  sqlite3* db_ = nullptr;
  mutable std::vector<std::string> strings_;
  mutable bool strings_loaded_ = false;
  mutable std::unordered_map<std::string, Ns> max_dur_;
  mutable std::map<int64_t, Counts> counts_;
  mutable int64_t table_order_rows_ = 0;
};

}  // namespace braid

// Reading `.braid` files: the small tables whole, the event tables streamed, with time-window
// queries per (run, rank, stream) served by the window indexes.
#pragma once

#include <sqlite3.h>

#include <functional>
#include <string>
#include <unordered_map>
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

  // Interned strings (loaded once, on first use).
  const std::string& str(StrId id) const;

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
  void api_calls(int64_t run, const Fn<ApiCall>& fn) const;
  void ranges(int64_t run, const Fn<Range>& fn) const;
  void collectives(int64_t run, const Fn<Collective>& fn) const;
  void collectives(int64_t run, int32_t rank, int64_t stream, Ns t0, Ns t1,
                   const Fn<Collective>& fn) const;
  // The capture tables (docs/schema.md), in (rank, call_id) / (rank, start) order; nothing when
  // the file has no such table.
  void nccl_calls(int64_t run, const Fn<NcclCallRow>& fn) const;
  void proxy_ops(int64_t run, const Fn<ProxyOpRow>& fn) const;

  bool has_table(const std::string& name) const;

 private:
  Ns max_duration(const char* table, int64_t run) const;

  std::string path_;
  sqlite3* db_ = nullptr;
  mutable std::vector<std::string> strings_;
  mutable bool strings_loaded_ = false;
  mutable std::unordered_map<std::string, Ns> max_dur_;
};

}  // namespace braid

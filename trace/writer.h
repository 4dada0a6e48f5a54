// Batched writer of `.braid` files.
//
// Everything goes to a temporary file beside the target (a copy of it in Append mode) and is
// renamed over the target in commit(), so an interrupted import never leaves a half-written
// .braid and never damages an existing one. Event records are buffered per table on the
// caller's thread and handed in batches to a writer thread, which inserts them with prepared
// multi-row statements inside one transaction.
#pragma once

#include <sqlite3.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trace/model.h"
#include "trace/rows.h"
#include "trace/time_range.h"

namespace braid {

class TraceWriter {
 public:
  enum class Mode {
    Create,     // the target must not exist
    Overwrite,  // replace the target at commit
    Append,     // add runs to an existing target (created if missing)
  };

  TraceWriter(std::string path, Mode mode);
  ~TraceWriter();  // aborts unless commit() succeeded
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Starts a run and returns its id (ids continue after those already in the file).
  int64_t begin_run(RunKind kind, std::string_view source, std::string_view backend = "",
                    std::string_view label = "", int64_t schedule_id = -1);

  StrId intern(std::string_view s);

  void add_rank(int64_t run, const RankInfo& r);  // a later call for the same rank replaces it
  void add_stream(int64_t run, const StreamInfo& s);
  void add_communicator(int64_t run, const Communicator& c);
  void add_diagnostic(int64_t run, const Diagnostic& d);  // same (rank, code) add their counts
  void add_step(int64_t run, const Step& s);
  void set_meta(std::string key, std::string value);

  void add(int64_t run, const Kernel& k) { push(kernels_, run, k); }
  void add(int64_t run, const Memcpy& m) { push(memcpys_, run, m); }
  void add(int64_t run, const ApiCall& a) { push(apis_, run, a); }
  void add(int64_t run, const Range& r) { push(ranges_, run, r); }
  void add(int64_t run, const Collective& c) { push(colls_, run, c); }
  // Capture tables (nccl_calls, nccl_proxy_ops, capture_windows): created in the file on the first
  // row.
  void add(int64_t run, const NcclCallRow& c) { push(calls_, run, c); }
  void add(int64_t run, const ProxyOpRow& p) { push(proxy_, run, p); }
  void add(int64_t run, const CaptureWindow& w) { push(windows_, run, w); }
  // Execution-trace tables (et_ops, et_tensors): created in the file on the first row.
  void add(int64_t run, const EtOp& o) { push(et_ops_, run, o); }
  void add(int64_t run, const EtTensor& t) { push(et_tensors_, run, t); }

  // Runs `job` on the writer thread after everything queued before it; for importers that
  // fix up rows in SQL (e.g. a time base learnt at the end of a file).
  void submit(std::function<void(sqlite3*)> job);
  // Waits until every queued batch is in the database; rethrows a writer-thread error.
  void flush();

  // Writes the small tables, builds indexes, makes the file durable and renames it over the
  // target. Throws on failure, in which case the target is untouched.
  void commit();
  // Discards everything; the target is untouched. Idempotent.
  void abort();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  int64_t rows_written() const { return rows_; }

 private:
  template <typename T>
  struct Buffer {
    int64_t run = -1;
    std::vector<T> rows;
  };
  template <typename T>
  void push(Buffer<T>& b, int64_t run, const T& rec) {
    // The last line of defence of trace/time_range.h: a span that cannot be a time is counted
    // (diagnostic `store.bad_time`) and never stored.
    if constexpr (requires { rec.start + rec.end; }) {
      if (!valid_span(rec.start, rec.end)) {
        bad_time(run, rec.rank, rec.start, rec.end);
        return;
      }
    }
    if (b.run != run && !b.rows.empty()) ship(b);
    b.run = run;
    b.rows.push_back(rec);
    if (b.rows.size() >= kBatchRows) ship(b);
  }
  template <typename T>
  void ship(Buffer<T>& b);
  void ship_strings();
  void bad_time(int64_t run, int32_t rank, Ns start, Ns end);
  void enqueue(std::function<void(sqlite3*)> job);
  void worker();
  void check_worker_error();
  void stop_worker();

  static constexpr size_t kBatchRows = 8192;

  std::string path_, tmp_;
  Mode mode_;
  sqlite3* db_ = nullptr;
  bool done_ = false;
  int64_t next_run_ = 1;
  int64_t rows_ = 0;

  rows::StringTable strings_;

  Buffer<Kernel> kernels_;
  Buffer<Memcpy> memcpys_;
  Buffer<ApiCall> apis_;
  Buffer<Range> ranges_;
  Buffer<Collective> colls_;
  Buffer<NcclCallRow> calls_;
  Buffer<ProxyOpRow> proxy_;
  Buffer<CaptureWindow> windows_;
  Buffer<EtOp> et_ops_;
  Buffer<EtTensor> et_tensors_;

  struct Small;
  std::unique_ptr<Small> small_;
  // Prepared inserts, used by the writer thread (and by commit() once it has stopped).
  struct Inserters;
  std::unique_ptr<Inserters> ins_;

  // Writer thread and its bounded queue.
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void(sqlite3*)>> queue_;
  bool busy_ = false, stop_ = false;
  std::string error_;
};

}  // namespace braid

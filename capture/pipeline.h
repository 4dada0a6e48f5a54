// The agent's writer thread and the queue that feeds it. Application threads (NCCL calls,
// profiler-plugin events) and CUPTI's buffer-completed callback only append to a queue under a
// short lock; the writer thread parses buffers, assembles rows (Collector) and writes them to
// the sink, committing every `flush_ms`. SQLite is never touched on an application thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "capture/buffer_pool.h"
#include "capture/clock_fit.h"
#include "capture/collector.h"
#include "capture/nccl_event.h"
#include "capture/sink.h"

namespace braid::capture {

struct PipelineHooks {
  // Parses one completed CUPTI buffer into the handler (cupti_parse.h in the agent).
  std::function<void(const uint8_t*, size_t, ActivityHandler&)> parse;
  // Asks CUPTI to hand over its partly filled buffers; called with no lock held.
  std::function<void(bool forced)> request_flush;
  // The device clock for calibration; absent without CUPTI.
  std::function<int64_t()> device_clock;
  // Counters only the agent can read (CUPTI's dropped-record count, ...), set into diagnostics.
  std::function<void(Collector&)> update_counters;
  // Called by the writer thread every cycle, before draining (duration windows).
  std::function<void()> on_tick;
};

struct PipelineOptions {
  int flush_ms = 500;
  int recalibrate_ms = 2000;
  size_t max_queued = 1 << 20;  // events waiting for the writer beyond this are dropped
};

// Makes the sink; runs on the writer thread, so opening the output (SQLite, file creation)
// never happens on an application thread. Throws to say why there is no output.
using SinkFactory = std::function<std::unique_ptr<Sink>()>;

class Pipeline {
 public:
  Pipeline(SinkFactory make_sink, int32_t rank, uint32_t nccl_external_kind, PipelineHooks hooks,
           PipelineOptions opts, BufferPool* pool);
  Pipeline(std::unique_ptr<Sink> sink, int32_t rank, uint32_t nccl_external_kind,
           PipelineHooks hooks, PipelineOptions opts, BufferPool* pool);
  ~Pipeline();  // stop()

  // Any thread; never blocks on I/O.
  void post(NcclCall c);
  void post(NcclGraphLink l);
  void post(NcclCallDetail d);
  void post(NcclProxyOp p);
  void post(NcclCommEvent e);
  void post(RankInfo r);
  void post(Diagnostic d);  // added to the counter of its code
  // A completed CUPTI buffer; returned to the pool once parsed.
  void post_buffer(uint8_t* buf, size_t valid);
  // Runs `fn` on the writer thread once everything posted before it has been handed to the
  // collector, in order with the events (attach mode opens and closes capture windows so).
  using Control = std::function<void(Collector&)>;
  void post_control(Control fn);

  // Replaces the hooks (CUPTI attaches after the pipeline started for an NCCL call).
  void set_hooks(PipelineHooks hooks);
  // Asks the writer thread for a drain soon, without waiting (safe inside CUPTI callbacks);
  // `forced`: CUPTI hands over its partly filled buffers too.
  void request_flush(bool forced = false);
  // Drains everything queued so far (after asking CUPTI for its buffers) and commits it.
  void flush(bool forced = false);
  // Final flush, pending collectives written host-side, sink closed. Idempotent.
  void stop();

  const ClockFit& clock() const { return clock_; }
  int64_t dropped() const;

 private:
  struct Buffer {
    uint8_t* data;
    size_t valid;
  };
  using Item = std::variant<NcclCall, NcclGraphLink, NcclCallDetail, NcclProxyOp, NcclCommEvent,
                            RankInfo, Diagnostic, Buffer, Control>;
  void push(Item item);
  void run();
  void drain(bool final);
  void calibrate();
  PipelineHooks hooks();

  SinkFactory make_sink_;
  int32_t rank_;
  uint32_t ext_kind_;
  std::unique_ptr<Sink> sink_;  // made and used on the writer thread (then by stop())
  bool sink_failed_ = false;
  PipelineHooks hooks_;
  PipelineOptions opts_;
  BufferPool* pool_;
  ClockFit clock_;
  std::unique_ptr<Collector> collector_;

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<Item> queue_;
  std::vector<Item> spare_;  // the drained queue, kept for its capacity (no regrowth under mu_)
  int64_t dropped_ = 0;
  uint64_t flush_requests_ = 0, flushes_done_ = 0;
  bool forced_ = false, stopping_ = false, stopped_ = false;
  std::mutex hooks_mu_;  // guards hooks_ (copied out; never held across a call into CUPTI)
  std::thread thread_;
};

}  // namespace braid::capture

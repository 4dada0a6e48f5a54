// The agent inside a recorded process: one per process, started by the first of its entry
// points to run (CUDA's injection hook, an NCCL call, NCCL's profiler plugin) when `braid record`
// asked for a capture (BRAID_CAPTURE_OUTPUT) or attach mode (BRAID_CAPTURE_ATTACH). Processes
// that never touch CUDA or NCCL (the launcher, shells, data-loader workers) never start it and
// write nothing.
//
// Attach mode: the agent registers with the node daemon (daemon::AgentClient, retrying in the
// background while there is none) and captures only inside the windows the daemon opens; its
// pipeline writes to a daemon::WindowSink, which sends each window's records to that capture.
// Outside a window CUPTI activity is off and NCCL calls keep their sequence numbers unsent.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "capture/buffer_pool.h"
#include "capture/comm_book.h"
#include "capture/config.h"
#include "capture/graph_book.h"
#include "capture/pipeline.h"

namespace braid::daemon {
class AgentClient;
class WindowSink;
struct Open;
}  // namespace braid::daemon

namespace braid::capture::agent {

// How attach mode switches CUPTI's window (cupti_agent.cc registers them once CUPTI runs; they
// take its window lock, so never call them from inside a CUPTI callback).
struct WindowOps {
  void (*open_duration)();
  void (*open_steps)(int64_t steps);
  void (*close)();
};

// CUPTI external-correlation kind the interposer's ids travel under (CUPTI_EXTERNAL_CORRELATION_
// KIND_CUSTOM2; frameworks use CUSTOM0/1).
inline constexpr uint32_t kNcclExternalKind = 5;

class Agent {
 public:
  // The running agent, starting it on first use; nullptr when no capture was asked for, after
  // shutdown, in a forked child, or when the output cannot be created (said once on stderr).
  static Agent* get();
  // The agent if it already runs (no start).
  static Agent* running();

  const CaptureConfig& config() const { return config_; }
  Pipeline& pipeline() { return *pipeline_; }
  CommBook& comms() { return comms_; }
  GraphBook& graphs() { return graphs_; }
  BufferPool& buffers() { return *pool_; }
  int64_t next_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // Whether the capture window is open (records are kept).
  bool window_open() const { return window_open_.load(std::memory_order_relaxed); }
  void set_window_open(bool on) { window_open_.store(on, std::memory_order_relaxed); }

  // A communicator was made: recorded, and the rank taken from the largest one when the
  // launcher's environment did not give it.
  void on_comm(const CommRecord* c);
  // Names the calling thread in the capture (its name as the thread reads it, once per thread):
  // called on the application's threads (NCCL calls, NVTX callbacks), so a thread that ends
  // before the writer sees its records keeps its name. Never blocks on I/O.
  void name_this_thread();
  void set_nccl_version(int version);

  // CUPTI, when the process initialized CUDA: the pipeline's hooks and the external-correlation
  // functions the interposer calls around NCCL launches.
  // push_external says whether it pushed; call pop_external exactly when it did.
  void attach_cupti(PipelineHooks hooks, bool (*push_ext)(uint64_t), void (*pop_ext)());
  bool push_external(uint64_t id) {
    auto f = push_ext_.load(std::memory_order_acquire);
    return f && f(id);
  }
  void pop_external() {
    if (auto f = pop_ext_.load(std::memory_order_acquire)) f();
  }

  // Flushes and closes the output (at exit; also safe to call twice).
  void shutdown();

  // Attach mode. CUPTI registers its window switches; a steps window that ended by itself (its
  // last step ended) is reported with window_finished() from inside the CUPTI callback.
  void set_window_ops(const WindowOps* ops) { window_ops_.store(ops, std::memory_order_release); }
  void window_finished();
  // A forked child records nothing; in attach mode it also lets go of the daemon connection.
  void forked_child();

 private:
  Agent() = default;
  bool start();
  bool start_attach(const std::string& rank_source);
  void start_pipeline(SinkFactory make_sink);
  void on_daemon_open(const daemon::Open& o);
  // Ends capture `id` (when it is still the open one): switches CUPTI off unless it is already,
  // and has the sink finish the window once its last records are in.
  void end_window(uint64_t id, const std::string& reason, bool activity_already_off);

  CaptureConfig config_;
  RankIdentity env_rank_;
  int32_t rank_ = 0;
  int best_comm_size_ = 0;
  std::unique_ptr<BufferPool> pool_;
  std::unique_ptr<Pipeline> pipeline_;
  CommBook comms_;
  GraphBook graphs_;
  std::atomic<int64_t> next_id_{1};
  std::atomic<bool> window_open_{true};
  std::atomic<bool (*)(uint64_t)> push_ext_{nullptr};
  std::atomic<void (*)()> pop_ext_{nullptr};
  std::mutex mu_;
  RankInfo info_;
  // attach mode
  std::unique_ptr<daemon::AgentClient> client_;
  daemon::WindowSink* wsink_ = nullptr;  // owned by the pipeline; used on its writer thread
  std::atomic<uint64_t> capture_{0};     // the window open on the application side, 0: none
  std::atomic<bool> ready_{false}, stopping_{false};
  std::atomic<const WindowOps*> window_ops_{nullptr};
};

}  // namespace braid::capture::agent

#include "capture/agent/agent.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "capture/daemon/client.h"
#include "capture/daemon/window_sink.h"
#include "capture/file_sink.h"
#include "trace/diagnostics.h"

namespace braid::capture::agent {
namespace {

enum State : int { kUnstarted, kStarting, kRunning, kOff };
std::atomic<int> g_state{kUnstarted};
Agent* g_agent = nullptr;
std::mutex g_start_mu;

void at_exit() {
  if (Agent* a = Agent::running()) a->shutdown();
}

// A forked child (a data-loader worker) must not touch the parent's writer: it has no writer
// thread and shares the parent's file. It records nothing unless it execs.
void in_forked_child() {
  if (g_agent) g_agent->forked_child();
  g_state.store(kOff);
}

}  // namespace

Agent* Agent::running() { return g_state.load(std::memory_order_acquire) == kRunning ? g_agent : nullptr; }

Agent* Agent::get() {
  int s = g_state.load(std::memory_order_acquire);
  if (s == kRunning) return g_agent;
  if (s == kOff) return nullptr;
  std::lock_guard lk(g_start_mu);
  s = g_state.load();
  if (s == kRunning) return g_agent;
  if (s == kOff) return nullptr;
  auto* a = new Agent();
  if (!a->start()) {
    delete a;
    g_state.store(kOff);
    return nullptr;
  }
  g_agent = a;  // never freed: CUPTI and NCCL threads may still call in during exit
  g_state.store(kRunning, std::memory_order_release);
  std::atexit(at_exit);
  pthread_atfork(nullptr, nullptr, in_forked_child);
  return a;
}

bool Agent::start() {
  config_ = config_from_env([](const char* n) { return std::getenv(n); });
  if (!config_.enabled) return false;
  env_rank_ = rank_from_env([](const char* n) { return std::getenv(n); });
  rank_ = env_rank_.rank >= 0 ? env_rank_.rank : 0;
  std::string rank_source = env_rank_.source.empty() ? "largest communicator" : env_rank_.source;
  pool_ = std::make_unique<BufferPool>(config_.buffer_bytes, config_.prealloc_buffers,
                                       config_.max_buffers);
  if (config_.attach()) return start_attach(rank_source);
  std::string path = output_path_for(config_.output, env_rank_.rank, static_cast<long>(getpid()));
  // Two processes claiming one rank (a launcher that touched CUDA, say): the later one writes
  // beside it under its pid.
  std::error_code ec;
  if (std::filesystem::exists(path, ec))
    path = output_path_for(config_.output, -1, static_cast<long>(getpid()));
  FileSinkOptions so;
  so.source = config_.command;
  so.backend = "cupti+nccl";
  so.label = "braid record, window " + to_string(config_.window);
  std::string window = to_string(config_.window);
  // The file is created on the writer thread, not on the thread that started the agent.
  SinkFactory make_sink = [path, so, window, rank_source]() -> std::unique_ptr<Sink> {
    auto sink = std::make_unique<FileSink>(path, so);
    sink->set_meta("capture.window", window);
    sink->set_meta("capture.rank_source", rank_source);
    return sink;
  };
  start_pipeline(std::move(make_sink));
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  info_.rank = rank_;
  info_.world_size = env_rank_.world_size;
  info_.host = host;
  info_.pid = getpid();
  info_.source = path;
  pipeline_->post(info_);
  window_open_.store(config_.window.kind == WindowKind::All ||
                     (config_.window.kind == WindowKind::Duration && config_.window.delay_s <= 0));
  return true;
}

// The writer thread with its sink (made on that thread), told to open the output now.
void Agent::start_pipeline(SinkFactory make_sink) {
  PipelineOptions po;
  po.flush_ms = config_.flush_ms;
  po.recalibrate_ms = config_.recalibrate_ms;
  pipeline_ = std::make_unique<Pipeline>(std::move(make_sink), rank_, kNcclExternalKind,
                                         PipelineHooks{}, po, pool_.get());
  pipeline_->request_flush();
}

bool Agent::start_attach(const std::string& rank_source) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  daemon::AgentIdentity id;
  id.pid = getpid();
  id.rank = env_rank_.rank;
  id.local_rank = env_rank_.local_rank;
  id.world_size = env_rank_.world_size;
  id.job_id = config_.job;
  id.host = host;
  if (const char* d = std::getenv("CUDA_VISIBLE_DEVICES")) id.devices = d;
  daemon::AgentClient::Callbacks cb;
  cb.on_open = [this](const daemon::Open& o) { on_daemon_open(o); };
  cb.on_close = [this](uint64_t capture) { end_window(capture, "window closed", false); };
  window_open_.store(false);  // nothing is captured until the daemon opens a window
  try {
    client_ = std::make_unique<daemon::AgentClient>(config_.attach_socket, id, std::move(cb));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid capture: attach mode unavailable in this process: %s\n", e.what());
    return false;
  }
  // The sink is made on the writer thread; client_ exists by then.
  SinkFactory make_sink = [this, rank_source]() -> std::unique_ptr<Sink> {
    auto sink = std::make_unique<daemon::WindowSink>(*client_);
    sink->set_meta("capture.rank_source", rank_source);
    wsink_ = sink.get();
    return sink;
  };
  start_pipeline(std::move(make_sink));
  info_.rank = rank_;
  info_.world_size = env_rank_.world_size;
  info_.host = host;
  info_.pid = getpid();
  info_.source = "braid daemon " + config_.attach_socket + ", job " + config_.job;
  pipeline_->post(info_);
  ready_.store(true);
  return true;
}

void Agent::on_daemon_open(const daemon::Open& o) {
  // A daemon quick enough to open a window while start_attach is still running waits for it.
  for (int i = 0; i < 5000 && !ready_.load() && !stopping_.load(); ++i) usleep(1000);
  if (!ready_.load() || stopping_.load()) return;
  if (uint64_t prev = capture_.load(); prev && prev != o.capture_id)
    end_window(prev, "superseded by capture " + std::to_string(o.capture_id), false);
  capture_.store(o.capture_id);
  uint64_t id = o.capture_id;
  // The sink opens the window before any record made inside it reaches the writer thread.
  pipeline_->post_control([this, id](Collector& col) {
    if (!wsink_) return;
    wsink_->set_before_done([&col] { col.end_cycle(true); });  // pending collectives out
    wsink_->open_window(id);  // the daemon sets the file's capture.window and capture.job
  });
  const WindowOps* ops = window_ops_.load(std::memory_order_acquire);
  if (o.mode == daemon::WindowMode::Duration) {
    if (ops) ops->open_duration();  // CUPTI activity on; sets window_open_
    else window_open_.store(true);
  } else if (ops) {
    ops->open_steps(o.value);  // opens at the next step range
  } else {
    Diagnostic d;
    diag::set_code(d, diag::Code::capture_steps_unavailable);
    d.detail = "a steps window was asked for, but this process has no CUDA/CUPTI to see NVTX step "
               "ranges: nothing captured";
    pipeline_->post(d);
    end_window(id, "steps cannot be counted without CUDA", true);
  }
  pipeline_->request_flush();
}

void Agent::end_window(uint64_t id, const std::string& reason, bool activity_already_off) {
  uint64_t expect = id;
  if (id == 0 || !capture_.compare_exchange_strong(expect, 0)) return;  // not the open one
  if (!activity_already_off)
    if (const WindowOps* ops = window_ops_.load(std::memory_order_acquire)) ops->close();
  window_open_.store(false);
  pipeline_->post_control([this, id, reason](Collector&) {
    if (!wsink_) return;
    wsink_->close_window(id, reason);
    // Next cycles: CUPTI's buffers whose records are complete come in, then Done. Not forced: a
    // forced flush mid-run hands over records still in flight (no end), which are lost.
    pipeline_->request_flush();
  });
  pipeline_->request_flush();
}

void Agent::forked_child() {
  if (client_) client_->abandon_in_forked_child();
}

void Agent::window_finished() {
  if (config_.attach()) end_window(capture_.load(), "steps done", true);
}

void Agent::name_this_thread() {
  thread_local bool named = false;
  if (named || !pipeline_) return;
  named = true;
  char name[17] = {};  // TASK_COMM_LEN
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0 || !name[0]) return;
  auto tid = static_cast<int64_t>(syscall(SYS_gettid));
  pipeline_->post_control([tid, n = std::string(name)](Collector& c) { c.name_thread(tid, n); });
}

void Agent::on_comm(const CommRecord* c) {
  if (!c) return;
  pipeline_->post(NcclCommEvent{c, ""});
  if (env_rank_.rank >= 0 || c->rank < 0) return;
  std::lock_guard lk(mu_);
  if (c->nranks <= best_comm_size_) return;
  best_comm_size_ = c->nranks;
  info_.rank = c->rank;
  info_.world_size = c->nranks;
  pipeline_->post(info_);
  // Attach mode: the daemon learns it too (registration, and the rows of a capture in progress).
  // Told explicitly: a rank learnt equal to the placeholder (0) renumbers nothing.
  if (config_.attach()) {
    int32_t rank = c->rank, world = c->nranks;
    pipeline_->post_control([this, rank, world](Collector&) {
      if (wsink_) wsink_->rank_learnt(rank, world);
    });
  }
}

void Agent::set_nccl_version(int v) {
  std::lock_guard lk(mu_);
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch (>= 2.9)
  info_.backend = "nccl";
  info_.nccl_version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                       std::to_string(v % 100);
  pipeline_->post(info_);
}

void Agent::attach_cupti(PipelineHooks hooks, bool (*push_ext)(uint64_t), void (*pop_ext)()) {
  pipeline_->set_hooks(std::move(hooks));
  push_ext_.store(push_ext, std::memory_order_release);
  pop_ext_.store(pop_ext, std::memory_order_release);
}

void Agent::shutdown() {
  stopping_.store(true);
  if (config_.attach()) {
    capture_.store(0);
    window_open_.store(false);
  }
  // pop_ext_ stays: a thread between its push and its pop still pops.
  push_ext_.store(nullptr);
  // The job is exiting: a daemon that is not reading may hold it only briefly.
  if (client_) client_->set_send_patience_ms(daemon::AgentClient::kExitSendPatienceMs);
  if (pipeline_) pipeline_->stop();  // attach mode: the sink ends an open window, "job exiting"
  client_.reset();                   // after the last Done
}

}  // namespace braid::capture::agent

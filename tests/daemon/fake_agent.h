// A fake capture agent for the daemon tests: speaks the real protocol through the real
// AgentClient and DaemonSink, and produces synthetic records while a window is open, counting
// exactly what it sent so the tests can check the daemon lost nothing.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "capture/daemon/client.h"

namespace braid::daemon::testing {

class FakeAgent {
 public:
  FakeAgent(const std::string& socket, std::string job, int32_t rank, int kernels_per_tick = 20,
            int step_ms = 20)
      : kernels_per_tick_(kernels_per_tick), step_ms_(step_ms), rank_(rank) {
    AgentIdentity id;
    id.pid = getpid();
    id.rank = rank;
    id.local_rank = rank % 8;
    id.world_size = 64;
    id.job_id = std::move(job);
    id.host = "testhost";
    id.devices = "GPU" + std::to_string(rank % 8);
    client_ = std::make_unique<AgentClient>(
        socket, id,
        AgentClient::Callbacks{[this](const Open& o) { open(o); },
                               [this](uint64_t c) { close_window(c); }},
        50);
  }
  ~FakeAgent() {
    stop_window();
    client_.reset();
  }

  AgentClient& client() { return *client_; }
  int64_t rows_sent() const { return rows_sent_; }
  int64_t windows() const { return windows_; }
  int64_t steps_sent() const { return steps_sent_; }
  bool window_open() const { return running_; }

 private:
  void open(const Open& o) {
    stop_window();
    running_ = true;
    ++windows_;
    producer_ = std::thread([this, o] { produce(o); });
  }
  void close_window(uint64_t) { running_ = false; }
  void stop_window() {
    running_ = false;
    if (producer_.joinable()) producer_.join();
  }

  void produce(Open o) {
    DaemonSink sink(*client_, o.capture_id, 16 << 10);
    RankInfo ri;
    ri.rank = rank_;
    ri.world_size = 64;
    ri.host = "testhost";
    ri.pid = getpid();
    ri.device = rank_ % 8;
    sink.set_rank_info(ri);
    sink.add_stream({rank_, 7, true, "compute"});
    StrId gemm = sink.intern("sm90_xmma_gemm_bf16");
    StrId comm = sink.intern("tp");
    StrId nccl = sink.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
    int64_t t = 1'000'000, step = 0, seq = 0;
    auto next_step = std::chrono::steady_clock::now() + std::chrono::milliseconds(step_ms_);
    while (running_) {
      for (int i = 0; i < kernels_per_tick_; ++i) {
        sink.add(Kernel{rank_, 7, t, t + 500, gemm, Category::Gemm, t, 0});
        t += 600;
      }
      Collective c;
      c.rank = rank_;
      c.comm = comm;
      c.seq = seq++;
      c.op = CollOp::AllReduce;
      c.bytes = 1 << 20;
      c.stream = 7;
      c.start = t;
      c.end = t + 2000;
      c.name = nccl;
      sink.add(c);
      t += 2100;
      if (o.mode == WindowMode::Steps && std::chrono::steady_clock::now() >= next_step) {
        sink.add(Step{rank_, step, t - 100000, t});
        ++step;
        ++steps_sent_;
        next_step += std::chrono::milliseconds(step_ms_);
        if (step >= o.value) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    running_ = false;
    sink.close();
    rows_sent_ += sink.sent_rows();
  }

  std::unique_ptr<AgentClient> client_;
  int kernels_per_tick_, step_ms_;
  int32_t rank_;
  std::atomic<bool> running_{false};
  std::atomic<int64_t> rows_sent_{0}, windows_{0}, steps_sent_{0};
  std::thread producer_;
};

}  // namespace braid::daemon::testing

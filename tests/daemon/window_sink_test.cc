// The attach-mode agent's sink against a real daemon: records go nowhere outside a window; each
// window's file is complete on its own (strings and small tables interned before the window are
// replayed into it); records that arrive after the close but before the next cycle's end still
// reach the window; diagnostics count from the window's start.
// A renumber inside a window moves this process's rows only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <thread>

#include "capture/daemon/daemon.h"
#include "capture/daemon/window_sink.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::daemon {
namespace {

bool wait_for(const std::function<bool()>& pred, int ms = 5000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// Triggers a duration capture of job "train" and returns (in the future) its outcome.
std::future<CaptureDone> trigger(const std::string& socket, int64_t ns) {
  return std::async(std::launch::async, [socket, ns] {
    ClientConnection c(socket);
    c.send(encode(Trigger{"train", WindowMode::Duration, ns, ""}));
    for (;;) {
      auto f = c.read(20000);
      if (!f) throw std::runtime_error("no answer from the daemon");
      if (f->type == MsgType::Error) throw std::runtime_error(decode_text(f->payload));
      if (f->type == MsgType::CaptureDone) return decode_capture_done(f->payload);
    }
  });
}

std::vector<std::string> kernel_names(const std::string& path) {
  TraceReader r(path);
  sql::Stmt q(r.db(), "SELECT s.text FROM kernels k JOIN strings s ON s.id = k.name_id "
                      "ORDER BY k.start_ns");
  std::vector<std::string> out;
  while (q.step()) out.push_back(q.text(0));
  return out;
}

TEST(WindowSink, EachWindowIsSelfContainedAndOutsideNothingIsSent) {
  test::TempDir tmp;
  DaemonOptions o;
  o.socket_path = tmp.file("d.sock");
  o.out_dir = tmp.path();
  o.close_grace_ms = 5000;
  Daemon d(o);
  std::thread serve([&] { d.run(); });

  std::atomic<uint64_t> opened{0}, closed{0};
  AgentIdentity id;
  id.pid = getpid();
  id.rank = 0;
  id.world_size = 1;
  id.job_id = "train";
  id.host = "h";
  AgentClient client(o.socket_path, id,
                     {[&](const Open& op) { opened = op.capture_id; },
                      [&](uint64_t c) { closed = c; }},
                     50);
  ASSERT_TRUE(client.wait_registered(5000));

  // This test thread plays the agent's writer thread.
  WindowSink sink(client);
  int before_done = 0;
  sink.set_before_done([&] { ++before_done; });
  auto kernel = [&](const char* name, int64_t t) {
    Kernel k;
    k.rank = 0;
    k.stream = 7;
    k.start = t;
    k.end = t + 10;
    k.name = sink.intern(name);
    sink.add(k);
  };
  RankInfo ri;
  ri.rank = 0;
  ri.world_size = 1;
  ri.host = "h";
  ri.pid = getpid();
  sink.set_rank_info(ri);
  sink.add_communicator({"nccl:abc", 1, "[0]", "world", "nccl"});
  sink.set_diagnostic({0, Severity::Warning, "capture.queue_overflow", 5, "x"});
  kernel("before_window", 1);  // no window: not sent
  sink.checkpoint();

  auto first = trigger(o.socket_path, 200'000'000);
  ASSERT_TRUE(wait_for([&] { return opened.load() != 0; }));
  sink.open_window(opened);
  kernel("before_window", 2);  // a string interned before the window
  kernel("inside", 3);         // and one interned inside it
  sink.set_diagnostic({0, Severity::Warning, "capture.queue_overflow", 7, "x"});
  sink.checkpoint();
  ASSERT_TRUE(wait_for([&] { return closed.load() == opened.load(); }));
  sink.close_window(closed, "window closed");
  kernel("straggler", 4);  // made inside the window, arrived after the close
  sink.checkpoint();       // the cycle of the close: still open
  EXPECT_TRUE(sink.window_open());
  EXPECT_EQ(before_done, 0);
  sink.checkpoint();  // the next cycle: done
  EXPECT_FALSE(sink.window_open());
  EXPECT_EQ(before_done, 1);
  kernel("after_window", 5);
  sink.checkpoint();
  CaptureDone a = first.get();
  EXPECT_EQ(a.agents_lost, 0u);
  EXPECT_EQ(a.records, 3);
  // Two overflowed events during the window (7 - 5): counted as dropped with done.
  EXPECT_EQ(a.dropped, 2);
  EXPECT_EQ(kernel_names(a.path), (std::vector<std::string>{"before_window", "inside", "straggler"}));
  {
    TraceReader r(a.path);
    ASSERT_EQ(r.ranks(1).size(), 1u);
    ASSERT_EQ(r.communicators(1).size(), 1u);
    EXPECT_EQ(r.communicators(1)[0].comm, "nccl:abc");
    int64_t overflow = -1;
    for (auto& dg : r.diagnostics(1))
      if (dg.code == "capture.queue_overflow") overflow = dg.count;
    EXPECT_EQ(overflow, 2);
  }

  // A second window: everything it needs is replayed, nothing of the first is repeated.
  opened = 0;
  auto second = trigger(o.socket_path, 100'000'000);
  ASSERT_TRUE(wait_for([&] { return opened.load() != 0; }));
  sink.open_window(opened);
  kernel("inside", 6);
  ASSERT_TRUE(wait_for([&] { return closed.load() == opened.load(); }));
  sink.close_window(closed, "window closed");
  sink.close_window(closed, "window closed");  // a repeated close changes nothing
  sink.checkpoint();
  sink.checkpoint();
  CaptureDone b = second.get();
  EXPECT_EQ(b.records, 1);
  EXPECT_EQ(b.dropped, 0);
  EXPECT_EQ(kernel_names(b.path), (std::vector<std::string>{"inside"}));
  {
    TraceReader r(b.path);
    EXPECT_EQ(r.ranks(1).size(), 1u);
    EXPECT_EQ(r.communicators(1).size(), 1u);
  }
  EXPECT_EQ(sink.windows_done(), 2);

  // The process ends inside a window: Done says so.
  opened = 0;
  auto third = trigger(o.socket_path, 10'000'000'000);
  ASSERT_TRUE(wait_for([&] { return opened.load() != 0; }));
  sink.open_window(opened);
  kernel("last", 7);
  sink.close();
  CaptureDone c = third.get();
  EXPECT_EQ(c.records, 1);
  EXPECT_EQ(c.agents_lost, 0u);

  d.stop();
  serve.join();
}

// A process without a launcher rank learns it inside a window (its collector renumbers 0 -> 2):
// the sink forwards the renumber, and the daemon moves that process's rows only; the process of
// rank 0 beside it keeps its rows. Then rank_learnt updates the registration.
TEST(WindowSink, ARenumberInsideAWindowMovesOnlyThisProcesssRows) {
  test::TempDir tmp;
  DaemonOptions o;
  o.socket_path = tmp.file("d.sock");
  o.out_dir = tmp.path();
  Daemon d(o);
  std::thread serve([&] { d.run(); });
  {
    std::atomic<uint64_t> opened[2] = {0, 0};
    std::unique_ptr<AgentClient> clients[2];
    std::unique_ptr<WindowSink> sinks[2];
    for (int i = 0; i < 2; ++i) {
      AgentIdentity id;
      id.pid = 1000 + i;
      id.rank = i == 0 ? 0 : -1;  // process 1 has no launcher rank
      id.job_id = "train";
      clients[i] = std::make_unique<AgentClient>(
          o.socket_path, id,
          AgentClient::Callbacks{[&, i](const Open& op) { opened[i] = op.capture_id; }, {}}, 50);
      ASSERT_TRUE(clients[i]->wait_registered(5000));
      sinks[i] = std::make_unique<WindowSink>(*clients[i]);
    }
    auto kernels = [&](int i, int32_t rank, int n) {
      for (int k = 0; k < n; ++k)
        sinks[i]->add(Kernel{rank, 7, k, k + 1, sinks[i]->intern("g"), Category::Gemm, k, 0});
      sinks[i]->checkpoint();
    };
    auto capture = trigger(o.socket_path, 10'000'000'000);
    ASSERT_TRUE(wait_for([&] { return opened[0] && opened[1]; }));
    for (int i = 0; i < 2; ++i) {
      sinks[i]->open_window(opened[i]);
      sinks[i]->add_stream({0, 7, true, "compute"});
    }
    kernels(0, 0, 4);
    kernels(1, 0, 3);  // the placeholder rank, as process 0's
    sinks[1]->renumber_rank(0, 2);
    kernels(1, 2, 1);
    for (auto& s : sinks) s->close();
    CaptureDone c = capture.get();
    EXPECT_EQ(c.agents_lost, 0u);
    TraceReader r(c.path);
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels WHERE rank = 0", -1), 4);
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels WHERE rank = 2", -1), 4);
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM streams WHERE rank IN (0, 2)", -1), 2);

    sinks[1]->rank_learnt(2, 4);  // outside a window: the registration follows
    ClientConnection st(o.socket_path);
    EXPECT_TRUE(wait_for([&] {
      st.send(frame(MsgType::StatusRequest, ""));
      auto f = st.read(5000);
      return f && decode_text(f->payload).find("\"rank\": 2, \"local_rank\": -1, "
                                                "\"world_size\": 4, \"pid\": 1001") !=
                      std::string::npos;
    }));
  }
  d.stop();
  serve.join();
}

// Issue 32: a window's row grows to cover what the window kept (the step range that opened it
// starts before the opening): the agent's collector replaces the row it stored at the opening, and
// the daemon's file holds the moved row only (protocol item 17), not the first beside it.
TEST(WindowSink, AMovedWindowReplacesItsRowInTheCapture) {
  test::TempDir tmp;
  DaemonOptions o;
  o.socket_path = tmp.file("d.sock");
  o.out_dir = tmp.path();
  Daemon d(o);
  std::thread serve([&] { d.run(); });
  {
    std::atomic<uint64_t> opened{0};
    AgentIdentity id;
    id.pid = getpid();
    id.rank = 3;
    id.job_id = "train";
    AgentClient client(o.socket_path, id,
                       AgentClient::Callbacks{[&](const Open& op) { opened = op.capture_id; }, {}},
                       50);
    ASSERT_TRUE(client.wait_registered(5000));
    WindowSink sink(client);
    auto capture = trigger(o.socket_path, 10'000'000'000);
    ASSERT_TRUE(wait_for([&] { return opened.load() != 0; }));
    sink.open_window(opened);
    sink.add(CaptureWindow{3, 5000, 5000});  // stored at the opening
    sink.add(CaptureWindow{3, 5000, 6000});  // extended by a cycle
    sink.checkpoint();
    sink.replace_window(5000, CaptureWindow{3, 4000, 9000});
    sink.close();
    CaptureDone c = capture.get();
    EXPECT_EQ(c.agents_lost, 0u);
    TraceReader r(c.path);
    auto windows = r.capture_windows(1);
    ASSERT_EQ(windows.size(), 1u);
    EXPECT_EQ(windows[0].rank, 3);
    EXPECT_EQ(windows[0].start, 4000);
    EXPECT_EQ(windows[0].end, 9000);
  }
  d.stop();
  serve.join();
}

}  // namespace
}  // namespace braid::daemon

// CPU tests of the capture agent's CUDA-free core: buffer pool, clock fit, configuration and
// capture windows, communicator identities, the CUDA-graph book, and the launcher's environment.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "capture/buffer_pool.h"
#include "capture/clock_fit.h"
#include "capture/comm_book.h"
#include "capture/config.h"
#include "capture/graph_book.h"
#include "capture/launcher.h"
#include "capture/nvtx_log.h"
#include "capture/sink.h"
#include "trace/error.h"

namespace braid::capture {
namespace {

// Both sinks renumber their state through renumber_keys: a process that learnt its rank late
// moves every entry of its placeholder rank, keys and the ranks its values carry, and its entry
// wins over one already stored under the new rank.
TEST(SinkState, RenumberKeysMovesOneRanksEntriesAndTheirValues) {
  std::map<std::pair<int32_t, std::string>, Diagnostic> diags;
  diags[{0, "a"}] = Diagnostic{0, Severity::Warning, "a", 1, ""};
  diags[{7, "a"}] = Diagnostic{7, Severity::Warning, "a", 2, ""};
  diags[{7, "b"}] = Diagnostic{7, Severity::Warning, "b", 3, ""};
  diags[{9, "b"}] = Diagnostic{9, Severity::Warning, "b", 4, ""};
  renumber_keys(diags, 7, 0);
  ASSERT_EQ(diags.size(), 3u);
  EXPECT_EQ((diags.at({0, "a"}).count), 2);  // rank 7's entry replaced rank 0's
  EXPECT_EQ((diags.at({0, "b"}).count), 3);
  EXPECT_EQ((diags.at({0, "b"}).rank), 0);
  EXPECT_EQ((diags.at({9, "b"}).rank), 9);
  std::map<int32_t, RankInfo> ranks;
  ranks[5].rank = 5;
  ranks[5].world_size = 8;
  renumber_keys(ranks, 5, 2);
  ASSERT_EQ(ranks.count(2), 1u);
  EXPECT_EQ(ranks.at(2).rank, 2);
  EXPECT_EQ(ranks.at(2).world_size, 8);
  std::map<std::tuple<int32_t, int64_t, bool>, std::string> streams{{{5, 7, true}, "s"}};
  renumber_keys(streams, 5, 2);
  EXPECT_EQ(streams.begin()->first, std::make_tuple(2, int64_t{7}, true));
}

TEST(BufferPool, PreallocatesReusesAndRefusesAtTheCap) {
  BufferPool pool(1 << 20, 2, 3);
  EXPECT_EQ(pool.allocated(), 2u);
  uint8_t* a = pool.acquire();
  uint8_t* b = pool.acquire();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(pool.allocated(), 2u);  // both came from the preallocated ones
  uint8_t* c = pool.acquire();       // grows to the cap
  ASSERT_TRUE(c);
  EXPECT_EQ(pool.allocated(), 3u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % 8, 0u);
  EXPECT_EQ(pool.acquire(), nullptr);  // at the cap
  EXPECT_EQ(pool.acquire(), nullptr);
  EXPECT_EQ(pool.refused(), 2);
  EXPECT_EQ(pool.in_use(), 3u);
  pool.release(b);
  EXPECT_EQ(pool.acquire(), b);  // reused, not reallocated
  EXPECT_EQ(pool.allocated(), 3u);
  a[0] = 1;
  a[(1 << 20) - 1] = 2;  // the whole buffer is usable
  EXPECT_THROW(BufferPool(0, 0, 1), Error);
}

// host = base + rate * (device - d0) + offset, with noise.
struct Clocks {
  int64_t base = 1'763'800'000'000'000'000;
  int64_t d0 = 5'000'000'000;
  double rate = 1.0000125;
  int64_t truth(int64_t d, double r) const {
    return base + static_cast<int64_t>(std::llround(r * static_cast<double>(d - d0)));
  }
};

TEST(ClockFit, RecoversALinearRelationFromNoisySamples) {
  Clocks c;
  ClockFit fit(16);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> noise(-40, 40);
  for (int i = 0; i < 16; ++i) {
    int64_t d = c.d0 + i * 100'000'000;  // one sample each 100 ms
    fit.add({d, c.truth(d, c.rate) + noise(rng)});
  }
  ASSERT_TRUE(fit.refit());
  auto f = fit.fits().back();
  EXPECT_NEAR(f.slope, c.rate, 1e-7);
  EXPECT_LT(f.residual_ns, 60);
  for (int64_t d : {c.d0, c.d0 + 777'777'777, c.d0 + 1'500'000'000})
    EXPECT_NEAR(static_cast<double>(fit.to_host(d)), static_cast<double>(c.truth(d, c.rate)), 100);
}

TEST(ClockFit, RecalibrationFollowsAChangeOfRate) {
  // The device clock changes rate at T: a single fit drifts, refits keep both sides exact.
  Clocks c;
  const int64_t T = c.d0 + 10'000'000'000;
  double rate2 = 1.0001;
  auto truth = [&](int64_t d) {
    if (d <= T) return c.truth(d, c.rate);
    return c.truth(T, c.rate) + static_cast<int64_t>(std::llround(rate2 * static_cast<double>(d - T)));
  };
  ClockFit fit(4), single(64);
  for (int i = 0; i <= 40; ++i) {
    int64_t d = c.d0 + int64_t{i} * 500'000'000;  // every 0.5 s for 20 s
    fit.add({d, truth(d)});
    fit.refit();
    single.add({d, truth(d)});
  }
  single.refit();
  EXPECT_GT(fit.fits().size(), 10u);
  for (int64_t d : {c.d0 + 2'250'000'000, T - 250'000'000, T + 4'250'000'000, c.d0 + 19'750'000'000}) {
    EXPECT_NEAR(static_cast<double>(fit.to_host(d)), static_cast<double>(truth(d)), 1000) << d;
  }
  // The one-line fit is off by far more somewhere, which is why the agent refits.
  double worst = 0;
  for (int64_t d = c.d0; d <= c.d0 + 20'000'000'000; d += 250'000'000)
    worst = std::max(worst, std::abs(static_cast<double>(single.to_host(d) - truth(d))));
  EXPECT_GT(worst, 50'000);
}

TEST(ClockFit, MapsIdentityUntilCalibratedAndKeepsRateOnOneSample) {
  ClockFit fit;
  EXPECT_EQ(fit.to_host(1234), 1234);
  fit.add({1000, 5000});
  ASSERT_TRUE(fit.refit());
  EXPECT_EQ(fit.to_host(1500), 5500);
}

TEST(Config, ParsesWindows) {
  EXPECT_EQ(parse_window("all").kind, WindowKind::All);
  EXPECT_EQ(parse_window("cuda-profiler-api").kind, WindowKind::ProfilerApi);
  auto n = parse_window("nvtx:train step");
  EXPECT_EQ(n.kind, WindowKind::Nvtx);
  EXPECT_EQ(n.nvtx_name, "train step");
  auto s = parse_window("steps:10-20");
  EXPECT_EQ(s.first_step, 10);
  EXPECT_EQ(s.last_step, 20);
  EXPECT_EQ(parse_window("steps:7").last_step, 7);
  auto d = parse_window("duration:2.5@1");
  EXPECT_DOUBLE_EQ(d.duration_s, 2.5);
  EXPECT_DOUBLE_EQ(d.delay_s, 1);
  for (const char* bad : {"steps:20-10", "steps:x", "duration:0", "duration:-1", "nvtx:",
                          "sometimes", "bogus:1"})
    EXPECT_THROW(parse_window(bad), Error) << bad;
  for (const char* w : {"all", "cuda-profiler-api", "nvtx:fwd", "steps:3-9", "duration:2@0.5"})
    EXPECT_EQ(to_string(parse_window(w)), w);
}

TEST(Config, StepNumbersFromRangeNames) {
  EXPECT_EQ(step_from_range_name("ProfilerStep#12"), 12);
  EXPECT_EQ(step_from_range_name("step 3"), 3);
  EXPECT_EQ(step_from_range_name("Step_40"), 40);
  EXPECT_EQ(step_from_range_name("step#0"), 0);
  EXPECT_FALSE(step_from_range_name("forward"));
  EXPECT_FALSE(step_from_range_name("step"));
  EXPECT_FALSE(step_from_range_name("step 3a"));
}

TEST(Config, RankFromLaunchersEnvironments) {
  auto env = [](std::map<std::string, std::string> m) {
    return [m](const char* k) -> const char* {
      auto it = m.find(k);
      return it == m.end() ? nullptr : it->second.c_str();
    };
  };
  auto t = rank_from_env(env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                              {"OMPI_COMM_WORLD_RANK", "5"}}));
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.source, "RANK");
  auto o = rank_from_env(env({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "16"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "5"}}));
  EXPECT_EQ(o.rank, 5);
  EXPECT_EQ(o.world_size, 16);
  EXPECT_EQ(o.source, "OMPI_COMM_WORLD_RANK");
  auto s = rank_from_env(env({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "32"}, {"RANK", "x"}}));
  EXPECT_EQ(s.rank, 9);
  EXPECT_EQ(s.world_size, 32);
  EXPECT_EQ(s.source, "SLURM_PROCID");
  EXPECT_EQ(rank_from_env(env({})).rank, -1);
}

TEST(Config, RecordedApisAreLaunchesCopiesAndSynchronization) {
  for (const char* n : {"cudaLaunchKernel_v7000", "cudaLaunchKernelExC_v11060", "cudaMemcpyAsync_v3020",
                        "cudaMemsetAsync_ptsz_v7000", "cudaStreamSynchronize_v3020",
                        "cudaEventRecord_v3020", "cudaStreamWaitEvent_v3020", "cuLaunchKernelEx",
                        "cuMemcpyHtoDAsync_v2", "cuGraphLaunch", "cuCtxSynchronize"})
    EXPECT_TRUE(is_recorded_api(n)) << n;
  for (const char* n : {"cudaGetDevice_v3020", "cudaMalloc_v3020", "cudaGetLastError_v3020",
                        "cuCtxGetCurrent", "cuPointerGetAttribute", "cudaStreamCreate_v3020", ""})
    EXPECT_FALSE(is_recorded_api(n)) << n;
}

TEST(Config, PerProcessOutputNames) {
  EXPECT_EQ(output_path_for("/tmp/x/job.braid", 3, 99), "/tmp/x/job.rank3.braid");
  EXPECT_EQ(output_path_for("/tmp/x/job.braid", -1, 99), "/tmp/x/job.pid99.braid");
  EXPECT_EQ(output_path_for("/tmp/x/run", 0, 1), "/tmp/x/run.rank0.braid");
}

TEST(Config, ParsesTraceChoices) {
  EXPECT_EQ(parse_trace("all"), TraceSet{});
  EXPECT_EQ(parse_trace("api,nvtx,nccl,cuda"), TraceSet{});
  TraceSet t = parse_trace("nccl,cuda");
  EXPECT_TRUE(t.cuda && t.nccl && !t.nvtx && !t.api);
  EXPECT_EQ(to_string(t), "cuda,nccl");
  EXPECT_EQ(to_string(TraceSet{}), "cuda,nvtx,nccl,api");
  for (const char* bad : {"", ",", "cuda,", "gpu", "cuda,nvtx,mpi"})
    EXPECT_THROW(parse_trace(bad), Error) << bad;
  try {
    parse_trace("cuda,mpi");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown 'mpi'"), std::string::npos) << e.what();
  }
}

TEST(Config, ParsesCuptiPolicy) {
  EXPECT_EQ(parse_cupti_policy("yield"), CuptiPolicy::Yield);
  EXPECT_EQ(parse_cupti_policy("hold"), CuptiPolicy::Hold);
  EXPECT_STREQ(to_string(CuptiPolicy::Hold), "hold");
  for (const char* bad : {"", "share", "Hold"}) EXPECT_THROW(parse_cupti_policy(bad), Error) << bad;
  EXPECT_EQ(CaptureConfig{}.cupti, CuptiPolicy::Yield);  // the job's own profiler first
}

TEST(Config, FromEnvironmentWithBoundsOnBuffers) {
  std::map<std::string, std::string> m{{"BRAID_CAPTURE_OUTPUT", "/o/job.braid"},
                                       {"BRAID_CAPTURE_WINDOW", "steps:2-4"},
                                       {"BRAID_CAPTURE_BUFFER_MB", "64"},
                                       {"BRAID_CAPTURE_TRACE", "nvtx,api"},
                                       {"BRAID_CAPTURE_CUPTI", "hold"}};
  auto c = config_from_env([&](const char* k) -> const char* {
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second.c_str();
  });
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.window.kind, WindowKind::Steps);
  EXPECT_EQ(c.buffer_bytes, 10u << 20);  // clamped to CUPTI's useful 1-10 MB
  EXPECT_EQ(to_string(c.trace), "nvtx,api");
  EXPECT_EQ(c.cupti, CuptiPolicy::Hold);
  EXPECT_FALSE(config_from_env([](const char*) -> const char* { return nullptr; }).enabled);
}

TEST(Window, ProfilerApiOpensAndClosesRepeatedly) {
  WindowController w(parse_window("cuda-profiler-api"));
  EXPECT_FALSE(w.enabled());
  EXPECT_EQ(w.on_profiler_api(true), true);
  EXPECT_EQ(w.on_profiler_api(true), std::nullopt);  // already open
  EXPECT_EQ(w.on_profiler_api(false), false);
  EXPECT_EQ(w.on_profiler_api(true), true);
  EXPECT_EQ(w.on_range_start("anything"), std::nullopt);
}

TEST(Window, NvtxRangeNestedAndOtherRangesIgnored) {
  WindowController w(parse_window("nvtx:capture me"));
  EXPECT_FALSE(w.enabled());
  EXPECT_EQ(w.on_range_start("other"), std::nullopt);
  EXPECT_EQ(w.on_range_start("capture me"), true);
  EXPECT_EQ(w.on_range_start("capture me"), std::nullopt);  // nested
  EXPECT_EQ(w.on_range_end("other"), std::nullopt);
  EXPECT_EQ(w.on_range_end("capture me"), std::nullopt);
  EXPECT_EQ(w.on_range_end("capture me"), false);
  EXPECT_EQ(w.on_range_end("capture me"), std::nullopt);
}

TEST(Window, StepsFromFirstToLastThenFinished) {
  WindowController w(parse_window("steps:2-3"));
  EXPECT_EQ(w.on_range_start("ProfilerStep#1"), std::nullopt);
  EXPECT_EQ(w.on_range_end("ProfilerStep#1"), std::nullopt);
  EXPECT_EQ(w.on_range_start("ProfilerStep#2"), true);
  EXPECT_EQ(w.on_range_start("forward"), std::nullopt);
  EXPECT_EQ(w.on_range_start("ProfilerStep#3"), std::nullopt);
  EXPECT_EQ(w.on_range_end("ProfilerStep#3"), false);
  EXPECT_TRUE(w.finished());
  EXPECT_EQ(w.on_range_start("ProfilerStep#2"), std::nullopt);  // no reopening
  WindowController skip(parse_window("steps:2-3"));
  EXPECT_EQ(skip.on_range_start("step 5"), std::nullopt);  // jumped past: closed, never opened
  EXPECT_TRUE(skip.finished());
}

TEST(Window, DurationWithDelay) {
  WindowController w(parse_window("duration:2@1"));
  EXPECT_FALSE(w.enabled());
  EXPECT_EQ(w.on_tick(0.5), std::nullopt);
  EXPECT_EQ(w.on_tick(1.0), true);
  EXPECT_EQ(w.on_tick(2.9), std::nullopt);
  EXPECT_EQ(w.on_tick(3.0), false);
  EXPECT_TRUE(w.finished());
  EXPECT_TRUE(WindowController(parse_window("duration:1")).enabled());
  EXPECT_TRUE(WindowController(parse_window("all")).enabled());
}

TEST(CommBook, IdentitiesAgreeAcrossRanksAndDifferAcrossCommunicators) {
  unsigned char id_a[128], id_b[128];
  for (int i = 0; i < 128; ++i) id_a[i] = id_b[i] = static_cast<unsigned char>(i * 7);
  id_b[127] ^= 1;
  std::string a = CommBook::identity_from_unique_ids(id_a, sizeof id_a);
  EXPECT_EQ(a, CommBook::identity_from_unique_ids(id_a, sizeof id_a));
  EXPECT_NE(a, CommBook::identity_from_unique_ids(id_b, sizeof id_b));
  EXPECT_EQ(a.rfind("nccl:", 0), 0u);
  EXPECT_EQ(a.size(), 5u + 16u);

  // Two "ranks" (two books, different handles) split the same parent the same way.
  CommBook r0, r1;
  int h0 = 0, h1 = 0;
  r0.add(&h0, a, "uid", 0, 2);
  r1.add(&h1, a, "uid", 1, 2);
  std::string s0 = r0.child_identity(&h0, "split", 1);
  std::string s1 = r1.child_identity(&h1, "split", 1);
  EXPECT_EQ(s0, s1);
  EXPECT_EQ(s0, a + "/split0.1");
  EXPECT_NE(r0.child_identity(&h0, "split", 1), s0);  // the next split is another communicator
  EXPECT_NE(r0.child_identity(&h0, "split", 2), r1.child_identity(&h1, "split", 1));

  int small = 0;
  r0.add(&small, s0, "split", 0, 1, a);
  EXPECT_EQ(r0.largest()->nranks, 2);
  r0.destroyed(&h0);
  EXPECT_EQ(r0.largest()->nranks, 1);
  EXPECT_EQ(r0.find(&h0), nullptr);
  int unknown = 0;
  CommRecord* u = r0.find_or_add_unknown(&unknown);
  EXPECT_EQ(u->next_seq.fetch_add(1), 0);
  EXPECT_EQ(r0.find_or_add_unknown(&unknown), u);
  EXPECT_EQ(u->next_seq.load(), 1);
}

// What each launch of an executable graph replays, told in the order CUPTI 13 reports an
// instantiation (capture/graph_book.h): the copies cloned before the executable exists, in a
// graph whose id the executable then takes.
TEST(GraphBook, LaunchesFindTheExecutablesCopies) {
  auto replays = [](GraphBook& b, uint32_t exec) {
    std::map<int64_t, std::set<uint64_t>> out;  // call id -> node ids
    b.launched(exec, [&](const NcclCall& c, const std::vector<uint64_t>& nodes) {
      out[c.call_id].insert(nodes.begin(), nodes.end());
    });
    return out;
  };
  NcclCall allreduce, grouped_a, grouped_b;
  allreduce.call_id = 10;
  grouped_a.call_id = 11;
  grouped_b.call_id = 12;
  {
    GraphBook b;  // told which executable the copies belong to (GRAPHEXEC_CREATE_STARTING ...)
    b.captured(1, {101}, allreduce);
    b.captured(1, {103}, grouped_a);
    b.captured(1, {103}, grouped_b);  // a group's calls share its node
    EXPECT_TRUE(b.cloned(101, 201, 5, 0));
    EXPECT_FALSE(b.cloned(102, 202, 5, 0));  // the compute kernel: no NCCL call's node
    EXPECT_TRUE(b.cloned(103, 203, 5, 0));
    b.exec_created(5, 1);
    b.exec_holds(5, {201, 203});
    auto r = replays(b, 5);
    ASSERT_EQ(r.size(), 3u);
    EXPECT_EQ(r[10], (std::set<uint64_t>{101, 201}));  // the copy's id, and the original's
    EXPECT_EQ(r[11], (std::set<uint64_t>{103, 203}));
    EXPECT_EQ(r[12], (std::set<uint64_t>{103, 203}));
    EXPECT_TRUE(replays(b, 6).empty());  // another executable holds none of them
  }
  {
    GraphBook b;  // not told: the copies' graph shares the executable's id
    b.captured(1, {101}, allreduce);
    EXPECT_TRUE(b.cloned(101, 201, 5, 0));
    b.exec_created(5, 1);
    EXPECT_EQ(replays(b, 5)[10], (std::set<uint64_t>{101, 201}));
  }
  {
    GraphBook b;  // a CUPTI that names the executable in the clone callback
    b.captured(1, {101}, allreduce);
    EXPECT_TRUE(b.cloned(101, 201, 0, 7));
    EXPECT_EQ(replays(b, 7)[10], (std::set<uint64_t>{201}));
    b.exec_created(7, 1);  // and the originals once the executable's graph is known
    EXPECT_EQ(replays(b, 7)[10], (std::set<uint64_t>{101, 201}));
  }
  {
    GraphBook b;  // cudaGraphClone, then instantiation of the clone: a copy of a copy
    b.captured(1, {101}, allreduce);
    EXPECT_TRUE(b.cloned(101, 301, 3, 0));
    EXPECT_TRUE(b.cloned(301, 401, 8, 0));
    b.exec_created(8, 3);
    b.exec_holds(8, {401});
    EXPECT_EQ(replays(b, 8)[10], (std::set<uint64_t>{301, 401}));
  }
}

// The agent's NVTX log: threads append without a lock, the reader gets each thread's events in
// order, only up to its last freeze, and whole (names with them), across chunk boundaries.
TEST(NvtxLog, ThreadsAppendReaderGetsFrozenEventsInOrder) {
  constexpr int kThreads = 4, kEvents = 20000;  // several 64 KiB chunks each
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::map<int64_t, std::vector<std::pair<uint64_t, std::string>>> seen;  // tid -> (id, name)
  auto read = [&] {
    NvtxLog::read([&](const NvtxEvent& e) {
      seen[e.tid].emplace_back(e.id, std::string(e.name) + "/" + std::string(e.domain));
    });
  };
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kEvents; ++i)
        NvtxLog::add(NvtxEvent::Start, i, static_cast<uint64_t>(i),
                     "range " + std::to_string(t) + "." + std::to_string(i), i % 2 ? "d" : "");
    });
  go.store(true);
  // Read while they write: every read hands over a prefix of each thread's events.
  for (int round = 0; round < 50; ++round) {
    NvtxLog::freeze();
    read();
  }
  for (auto& th : threads) th.join();
  NvtxLog::freeze();
  read();
  ASSERT_EQ(seen.size(), static_cast<size_t>(kThreads));
  for (auto& [tid, events] : seen) {
    ASSERT_EQ(events.size(), static_cast<size_t>(kEvents)) << tid;
    const std::string prefix = events[0].second.substr(0, events[0].second.find('.') + 1);
    for (int i = 0; i < kEvents; ++i) {
      EXPECT_EQ(events[i].first, static_cast<uint64_t>(i));
      EXPECT_EQ(events[i].second, prefix + std::to_string(i) + "/" + (i % 2 ? "d" : ""));
    }
  }
  // Nothing written since the last freeze: nothing more to read.
  size_t before = 0;
  for (auto& [tid, events] : seen) before += events.size();
  NvtxLog::add(NvtxEvent::Push, 1, 0, "after", "");
  read();  // not frozen yet
  size_t after = 0;
  for (auto& [tid, events] : seen) after += events.size();
  EXPECT_EQ(after, before);
  NvtxLog::freeze();
  read();
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads) + 1);  // this thread's one event
  EXPECT_EQ(NvtxLog::dropped(), 0);
}

// A burst longer than the reader's period takes the reserve's touched chunks, not the heap's:
// 20 chunks' worth of events on a fresh thread, nothing read meanwhile, no chunk from the heap;
// the reserve is back to its size at the next freeze.
TEST(NvtxLog, ABurstTakesTheReserveNotTheHeap) {
  NvtxLog::reserve();
  const int64_t heap_before = NvtxLog::heap_chunks();
  const std::string name(40, 'r');  // 24 + 40 bytes a record: 1,024 records a chunk
  std::thread burst([&] {
    for (int i = 0; i < 20 * 1024; ++i) NvtxLog::add(NvtxEvent::Push, i, 0, name, "");
  });
  burst.join();
  EXPECT_EQ(NvtxLog::heap_chunks(), heap_before);
  int64_t read = 0;
  NvtxLog::freeze();
  NvtxLog::read([&](const NvtxEvent& e) { read += e.name == name; });
  EXPECT_EQ(read, 20 * 1024);
  // Refilled: another burst of the same size again needs no heap chunk.
  NvtxLog::freeze();
  std::thread again([&] {
    for (int i = 0; i < 20 * 1024; ++i) NvtxLog::add(NvtxEvent::Push, i, 0, name, "");
  });
  again.join();
  EXPECT_EQ(NvtxLog::heap_chunks(), heap_before);
  NvtxLog::freeze();
  NvtxLog::read([](const NvtxEvent&) {});
}

TEST(Launcher, EnvironmentInjectsTheAgentAndSettings) {
  RecordOptions o;
  o.output = "/tmp/out/job.braid";
  o.command = {"python", "train.py", "--lr", "1e-3 x"};
  o.window = parse_window("steps:1-2");
  auto env = capture_environment(o);
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_FALSE(m["CUDA_INJECTION64_PATH"].empty());
  EXPECT_EQ(m["LD_PRELOAD"].rfind(m["CUDA_INJECTION64_PATH"], 0), 0u);
  EXPECT_EQ(m["BRAID_CAPTURE_OUTPUT"], "/tmp/out/job.braid");
  EXPECT_EQ(m["BRAID_CAPTURE_WINDOW"], "steps:1-2");
  EXPECT_EQ(m["BRAID_CAPTURE_COMMAND"], "python train.py --lr '1e-3 x'");
  EXPECT_EQ(m["BRAID_CAPTURE_CUPTI"], "yield");  // --cupti's default
  o.cupti = CuptiPolicy::Hold;
  auto held = capture_environment(o);
  m = std::map<std::string, std::string>(held.begin(), held.end());
  EXPECT_EQ(m["BRAID_CAPTURE_CUPTI"], "hold");
}

TEST(Config, AttachModeFromEnvironment) {
  std::map<std::string, std::string> m{{"BRAID_CAPTURE_ATTACH", "/run/braid/daemon.sock"},
                                       {"BRAID_CAPTURE_OUTPUT", "/o/job.braid"},
                                       {"BRAID_CAPTURE_WINDOW", "steps:2-4"}};
  auto env = [&](const char* k) -> const char* {
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second.c_str();
  };
  auto c = config_from_env(env);
  EXPECT_TRUE(c.enabled);
  EXPECT_TRUE(c.attach());
  EXPECT_EQ(c.attach_socket, "/run/braid/daemon.sock");
  EXPECT_EQ(c.output, "");  // the daemon writes; the window is its to choose
  EXPECT_EQ(c.window.kind, WindowKind::Daemon);
  EXPECT_EQ(c.job, "job");
  m["BRAID_CAPTURE_JOB"] = "train";
  EXPECT_EQ(config_from_env(env).job, "train");
}

TEST(Config, AttachJobIdDefaults) {
  std::map<std::string, std::string> m;
  auto env = [&](const char* k) -> const char* {
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(default_job_id({"torchrun", "--nproc-per-node", "8", "/x/train.py", "--lr", "1"}, env),
            "train");
  EXPECT_EQ(default_job_id({"/usr/bin/my_app", "-n", "3"}, env), "my_app");
  m["TORCHELASTIC_RUN_ID"] = "rdzv42";
  EXPECT_EQ(default_job_id({"torchrun", "train.py"}, env), "rdzv42");
  m["SLURM_JOB_ID"] = "1234";
  EXPECT_EQ(default_job_id({"torchrun", "train.py"}, env), "slurm-1234");
  RecordOptions o;
  o.attach = true;
  o.socket = "/tmp/d.sock";
  o.job = "train";
  o.command = {"python", "train.py"};
  auto e = capture_environment(o);
  std::map<std::string, std::string> got(e.begin(), e.end());
  EXPECT_EQ(got["BRAID_CAPTURE_ATTACH"], "/tmp/d.sock");
  EXPECT_EQ(got["BRAID_CAPTURE_JOB"], "train");
  EXPECT_EQ(got.count("BRAID_CAPTURE_OUTPUT"), 0u);
  EXPECT_EQ(got.count("LD_PRELOAD"), 1u);
}

TEST(Window, DaemonDurationWindowsOpenAndCloseRepeatedly) {
  WindowSpec spec;
  spec.kind = WindowKind::Daemon;
  WindowController w(spec);
  EXPECT_FALSE(w.enabled());
  EXPECT_EQ(w.on_tick(100.0), std::nullopt);  // the daemon times its windows, not the agent
  EXPECT_EQ(w.on_range_start("ProfilerStep#3"), std::nullopt);
  EXPECT_EQ(w.on_profiler_api(true), std::nullopt);
  EXPECT_EQ(w.open_duration(), true);
  EXPECT_EQ(w.on_tick(1000.0), std::nullopt);
  EXPECT_EQ(w.close(), false);
  EXPECT_FALSE(w.finished());  // another window may come
  EXPECT_EQ(w.close(), std::nullopt);
  EXPECT_EQ(w.open_duration(), true);
  EXPECT_EQ(w.close(), false);
}

TEST(Window, DaemonStepsWindowCountsFromTheNextStep) {
  WindowSpec spec;
  spec.kind = WindowKind::Daemon;
  WindowController w(spec);
  w.open_steps(2);
  EXPECT_TRUE(w.steps_pending());
  EXPECT_FALSE(w.enabled());
  EXPECT_EQ(w.on_range_end("ProfilerStep#6"), std::nullopt);  // a step already running
  EXPECT_EQ(w.on_range_start("forward"), std::nullopt);
  EXPECT_EQ(w.on_range_start("ProfilerStep#7"), true);  // steps 7 and 8
  EXPECT_FALSE(w.steps_pending());
  EXPECT_EQ(w.on_range_end("ProfilerStep#7"), std::nullopt);
  EXPECT_EQ(w.on_range_start("ProfilerStep#8"), std::nullopt);
  EXPECT_EQ(w.on_range_end("ProfilerStep#8"), false);
  EXPECT_TRUE(w.finished());  // ended by itself: the agent sends done
  EXPECT_EQ(w.on_range_start("ProfilerStep#9"), std::nullopt);
  EXPECT_EQ(w.close(), std::nullopt);
  EXPECT_FALSE(w.finished());
  // The daemon closes a steps window that is still waiting or running.
  w.open_steps(5);
  EXPECT_EQ(w.on_range_start("step 20"), true);
  EXPECT_EQ(w.close(), false);
  EXPECT_EQ(w.on_range_start("step 21"), std::nullopt);
  w.open_steps(1);
  EXPECT_EQ(w.close(), std::nullopt);
  EXPECT_FALSE(w.steps_pending());
}

TEST(Window, StartEndRangesKeyedById) {
  // nvtxRangeStartA/End: overlapping, not nested, ended by id (possibly on another thread).
  WindowController w(parse_window("nvtx:capture me"));
  EXPECT_EQ(w.on_range_end_id(99), std::nullopt);  // started before the callbacks: ignored
  EXPECT_EQ(w.on_range_start_id(1, "capture me"), true);
  EXPECT_EQ(w.on_range_start_id(2, "other"), std::nullopt);
  EXPECT_EQ(w.on_range_start_id(3, "capture me"), std::nullopt);  // overlapping
  EXPECT_EQ(w.on_range_end_id(1), std::nullopt);                   // 3 still open
  EXPECT_EQ(w.on_range_end_id(2), std::nullopt);
  EXPECT_EQ(w.on_range_end_id(3), false);
  EXPECT_EQ(w.on_range_end_id(3), std::nullopt);  // ended twice: ignored
  // Steps from start/end ranges, here interleaved with the next step's start.
  WindowController s(parse_window("steps:1-2"));
  EXPECT_EQ(s.on_range_start_id(10, "ProfilerStep#0"), std::nullopt);
  EXPECT_EQ(s.on_range_start_id(11, "ProfilerStep#1"), true);
  EXPECT_EQ(s.on_range_end_id(10), std::nullopt);
  EXPECT_EQ(s.on_range_end_id(11), std::nullopt);
  EXPECT_EQ(s.on_range_start_id(12, "ProfilerStep#2"), std::nullopt);
  EXPECT_EQ(s.on_range_end_id(12), false);
  EXPECT_TRUE(s.finished());
  // The daemon's steps window counts start/end step ranges too.
  WindowSpec spec;
  spec.kind = WindowKind::Daemon;
  WindowController d(spec);
  d.open_steps(1);
  EXPECT_EQ(d.on_range_start_id(20, "step 4"), true);
  EXPECT_EQ(d.on_range_end_id(20), false);
  EXPECT_TRUE(d.finished());
}

}  // namespace
}  // namespace braid::capture

// The writer side of the agent on synthetic input: activity and NCCL events through the
// Collector into a FileSink, read back with TraceReader. Covers linking a collective to its
// kernel through CUPTI external correlation in either arrival order, grouped calls sharing one
// launch, profiler-plugin details, host-only fallbacks counted in diagnostics, NVTX ranges and
// steps (CUPTI's markers and the agent's own NVTX log), clock mapping, late rank renumbering, and
// the gap a hand-over of CUPTI leaves (--cupti yield).
#include "capture/collector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "capture/file_sink.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::capture {
namespace {

constexpr uint32_t kExt = 5;

struct Fixture {
  test::TempDir tmp;
  std::string path = tmp.file("c.braid");
  std::unique_ptr<FileSink> sink = std::make_unique<FileSink>(path, FileSinkOptions{"unit", "cupti", "t"});
  ClockFit clock;
  CommBook book;
  std::unique_ptr<Collector> col;
  CommRecord* world = nullptr;
  Fixture() {
    // host = device + 1'000'000 (a pure offset), from two exact samples.
    clock.add({10'000'000, 11'000'000});
    clock.add({20'000'000, 21'000'000});
    clock.refit();
    col = std::make_unique<Collector>(*sink, clock, 0, kExt);
    static int h = 0;
    world = book.add(&h, "nccl:00000000000000aa", "uid", 0, 4);
  }
  NcclCall call(int64_t id, CollOp op, uint64_t ext, int64_t count = 1024) {
    NcclCall c;
    c.call_id = id;
    c.external_id = ext;
    c.comm = world;
    c.seq = world->next_seq++;
    c.op = op;
    c.dtype = "float32";
    c.dtype_bytes = 4;
    c.redop = op == CollOp::AllReduce ? "sum" : "";
    c.count = count;
    c.enqueue = 12'000'000 + id * 1000;
    c.ret = c.enqueue + 500;
    c.tid = 77;
    return c;
  }
  void close() {
    col->end_cycle(true);
    sink->close();
  }
};

std::vector<Collective> collectives(const TraceReader& r) {
  std::vector<Collective> out;
  r.collectives(1, [&](const Collective& c) {
    out.push_back(c);
    return true;
  });
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
  return out;
}

TEST(Collector, LinksCollectivesToKernelsInEitherOrder) {
  Fixture f;
  // Call 1: external correlation, then kernel, then the call record (the usual order).
  f.col->on_external_correlation({kExt, 1, 501});
  f.col->on_kernel({0, 1, 7, 501, 13'000'000, 13'400'000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"});
  f.col->on_nccl_call(f.call(1, CollOp::AllReduce, 1));
  // Call 2: the kernel arrives before its external correlation record.
  f.col->on_nccl_call(f.call(2, CollOp::AllGather, 2, 256));
  f.col->on_kernel({0, 1, 7, 502, 14'000'000, 14'100'000, "ncclDevKernel_AllGather_RING_LL(x)"});
  f.col->end_cycle(false);
  f.col->on_external_correlation({kExt, 2, 502});
  // An external id of another kind (a framework's) is not ours.
  f.col->on_external_correlation({3, 3, 503});
  f.col->on_kernel({0, 1, 8, 503, 15'000'000, 15'000'100, "_Z11gemm_kernelIfEvPT_i"});
  f.col->end_cycle(false);
  f.col->end_cycle(false);
  EXPECT_EQ(f.col->pending_calls(), 0u);
  f.close();

  TraceReader r(f.path);
  auto cs = collectives(r);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(r.str(cs[0].comm), "nccl:00000000000000aa");
  EXPECT_EQ(cs[0].seq, 0);
  EXPECT_EQ(cs[0].op, CollOp::AllReduce);
  EXPECT_EQ(cs[0].stream, 7);
  EXPECT_EQ(cs[0].start, 14'000'000);  // device 13'000'000 on the host clock
  EXPECT_EQ(cs[0].end, 14'400'000);
  EXPECT_EQ(cs[0].kernel_ref, 501);
  EXPECT_EQ(cs[0].enqueue, 12'001'000);
  EXPECT_EQ(cs[0].bytes, 4096);
  EXPECT_EQ(cs[0].group_size, 1);
  EXPECT_EQ(r.str(cs[0].dtype), "float32");
  EXPECT_EQ(cs[1].op, CollOp::AllGather);
  EXPECT_EQ(cs[1].kernel_ref, 502);
  EXPECT_EQ(cs[1].in_count, 256);
  EXPECT_EQ(cs[1].out_count, 1024);  // 4 ranks
  EXPECT_EQ(cs[1].bytes, 4096);
  std::map<int64_t, Kernel> ks;
  r.kernels(1, [&](const Kernel& k) {
    ks[k.correlation] = k;
    return true;
  });
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(ks[501].external_id, 1);
  EXPECT_EQ(ks[503].external_id, 0);
  EXPECT_EQ(ks[501].category, Category::CommAllReduce);
  EXPECT_EQ(ks[503].category, Category::Gemm);
  EXPECT_EQ(r.str(ks[503].name), "void gemm_kernel<float>(float*, int)");  // demangled
  EXPECT_EQ(r.streams(1).size(), 2u);
  auto ranks = r.ranks(1);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].device, 0);
  EXPECT_TRUE(r.diagnostics(1).empty() ||
              std::none_of(r.diagnostics(1).begin(), r.diagnostics(1).end(), [](auto& d) {
                return d.code == "capture.collective_without_kernel";
              }));
}

TEST(Collector, GroupedCallsShareTheGroupsKernelAndGetDetails) {
  Fixture f;
  const uint64_t group = 100;
  auto send = f.call(101, CollOp::Send, group, 64);
  send.group_id = group;
  send.group_size = 2;
  send.peer_or_root = 1;
  auto recv = f.call(102, CollOp::Recv, group, 64);
  recv.group_id = group;
  recv.group_size = 2;
  recv.peer_or_root = 3;
  NcclCallDetail d;
  d.call_id = 101;
  d.channels = 2;
  f.col->on_nccl_detail(d);  // the plugin's event precedes the call record
  f.col->on_nccl_call(send);
  f.col->on_nccl_call(recv);
  f.col->on_external_correlation({kExt, group, 900});
  f.col->on_kernel({0, 1, 9, 900, 30'000'000, 30'050'000, "ncclDevKernel_SendRecv(x)"});
  f.col->on_nccl_proxy_op({101, 0, 1, 8, 65536, true, 555, 29'500'000, 29'600'000});
  // A collective detailed by the plugin, whose kernel was never seen.
  auto ar = f.call(103, CollOp::AllReduce, 103);
  NcclCallDetail d2;
  d2.call_id = 103;
  d2.algo = "RING";
  d2.proto = "LL128";
  d2.channels = 4;
  f.col->on_nccl_detail(d2);
  f.col->on_nccl_call(ar);
  f.close();

  TraceReader r(f.path);
  auto cs = collectives(r);
  ASSERT_EQ(cs.size(), 3u);
  EXPECT_EQ(cs[0].op, CollOp::Send);
  EXPECT_EQ(cs[0].peer_or_root, 1);
  EXPECT_EQ(cs[0].group_size, 2);
  EXPECT_EQ(cs[0].kernel_ref, 900);
  EXPECT_EQ(cs[0].channels, 2);
  EXPECT_EQ(cs[1].op, CollOp::Recv);
  EXPECT_EQ(cs[1].peer_or_root, 3);
  EXPECT_EQ(cs[1].kernel_ref, 900);
  EXPECT_EQ(cs[1].start, cs[0].start);
  EXPECT_EQ(cs[2].stream, -1);  // host-side only
  EXPECT_EQ(cs[2].start, ar.enqueue);
  EXPECT_EQ(cs[2].end, ar.ret);
  EXPECT_EQ(r.str(cs[2].algo), "RING");
  EXPECT_EQ(r.str(cs[2].proto), "LL128");
  EXPECT_EQ(cs[2].channels, 4);
  bool counted = false;
  for (auto& dg : r.diagnostics(1))
    if (dg.code == "capture.collective_without_kernel") counted = dg.count == 1;
  EXPECT_TRUE(counted);
  sql::Stmt q(r.db(), "SELECT call_id, group_id, op, peer_or_root, tid FROM nccl_calls ORDER BY call_id");
  std::vector<std::tuple<int64_t, int64_t, std::string, int64_t, int64_t>> rows;
  while (q.step()) rows.emplace_back(q.i64(0), q.i64(1), q.text(2), q.i64(3), q.i64(4));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], std::make_tuple(int64_t{101}, int64_t{100}, std::string("send"), int64_t{1}, int64_t{77}));
  EXPECT_EQ(std::get<1>(rows[2]), 0);
  sql::Stmt p(r.db(), "SELECT call_id, seq, channel, steps, is_send, end_ns - start_ns FROM nccl_proxy_ops");
  ASSERT_TRUE(p.step());
  EXPECT_EQ(p.i64(0), 101);
  EXPECT_EQ(p.i64(1), send.seq);
  EXPECT_EQ(p.i64(2), 0);
  EXPECT_EQ(p.i64(3), 8);
  EXPECT_EQ(p.i64(4), 1);
  EXPECT_EQ(p.i64(5), 100'000);
  auto comms = r.communicators(1);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].nranks, 4);
}

TEST(Collector, MemcpysApisSyncsMarkersStepsAndRenumbering) {
  Fixture f;
  f.col->on_api({ApiKind::Runtime, 211, "cudaMemcpyAsync", 16'000'000, 16'000'900, 1, 4242, 700, 0});
  f.col->on_mem({MemKind::HtoD, 1 << 20, 0, 1, 3, 700, 16'100'000, 16'200'000});
  f.col->on_mem({MemKind::Memset, 4096, 0, 1, 3, 701, 16'300'000, 16'300'100});
  f.col->on_api({ApiKind::Runtime, 131, "cudaStreamSynchronize", 16'400'000, 16'900'000, 1, 4242, 702, 0});
  f.col->on_sync({"stream", 1, 3, 702, 16'400'100, 16'899'000});
  MarkerActivity m;
  m.phase = MarkerActivity::Start;
  m.id = 1;
  m.timestamp = 17'000'000;
  m.name = "ProfilerStep#4";
  m.domain = "";
  m.tid = 4242;
  f.col->on_marker(m);
  m.id = 2;
  m.timestamp = 17'100'000;
  m.name = "forward";
  f.col->on_marker(m);
  MarkerActivity e;
  e.phase = MarkerActivity::End;
  e.id = 2;
  e.timestamp = 17'500'000;
  f.col->on_marker(e);
  e.id = 1;
  e.timestamp = 18'000'000;
  f.col->on_marker(e);
  e.id = 99;  // its start came before the window
  f.col->on_marker(e);
  f.col->end_cycle(false);
  // The process learns it is rank 5 (from its largest communicator).
  RankInfo ri;
  ri.rank = 5;
  ri.world_size = 8;
  ri.host = "n1";
  f.col->set_rank_info(ri);
  f.col->on_mem({MemKind::DtoH, 64, 0, 1, 3, 703, 19'000'000, 19'000'500});
  f.close();

  TraceReader r(f.path);
  std::vector<Memcpy> ms;
  r.memcpys(1, [&](const Memcpy& x) {
    ms.push_back(x);
    return true;
  });
  ASSERT_EQ(ms.size(), 3u);
  for (auto& x : ms) EXPECT_EQ(x.rank, 5);
  EXPECT_EQ(ms[0].kind, MemKind::HtoD);
  EXPECT_EQ(ms[0].bytes, 1 << 20);
  EXPECT_EQ(ms[0].start, 17'100'000);
  std::map<std::string, ApiCall> apis;
  r.api_calls(1, [&](const ApiCall& a) {
    apis[r.str(a.name)] = a;
    return true;
  });
  ASSERT_EQ(apis.size(), 3u);
  EXPECT_EQ(apis["sync:stream"].tid, 4242);  // the thread of the API call it belongs to
  EXPECT_EQ(apis["sync:stream"].kind, ApiKind::Other);
  EXPECT_EQ(apis["cudaMemcpyAsync"].kind, ApiKind::Runtime);
  std::vector<Range> rs;
  r.ranges(1, [&](const Range& x) {
    rs.push_back(x);
    return true;
  });
  ASSERT_EQ(rs.size(), 2u);
  auto steps = r.steps(1);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].step, 4);
  EXPECT_EQ(steps[0].rank, 5);
  EXPECT_EQ(steps[0].end - steps[0].start, 1'000'000);
  auto ranks = r.ranks(1);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 5);
  EXPECT_EQ(ranks[0].world_size, 8);
  for (auto& s : r.streams(1)) EXPECT_EQ(s.rank, 5);
  bool unmatched = false;
  for (auto& d : r.diagnostics(1)) unmatched |= d.code == "capture.unmatched_marker_end" && d.rank == 5;
  EXPECT_TRUE(unmatched);
}

// Issue 32, item 2: a window's stored row covers every row the window kept. A steps window keeps
// the range that opened it (its start record precedes the callback that opens the window), and a
// record made inside the window but mapped onto the host clock by a fit made after the opening
// can land before the opening as the opening's fit mapped it (AgentWindow saw 29 of 30 kernels
// inside the row, and braid-view opened on a window that cut off step 10's first kernel). The row
// then starts at the earliest kept row, and stays one row.
TEST(Collector, AWindowsRowCoversEveryRowTheWindowKept) {
  test::TempDir tmp;
  const std::string path = tmp.file("w.braid");
  {
    FileSink sink(path, {"unit", "cupti", "t"});
    ClockFit clock(2);
    clock.add({1000, 1'000'000'000});
    clock.add({2000, 1'000'001'000});
    ASSERT_TRUE(clock.refit());  // host = device + 999'999'000
    Collector col(sink, clock, 0, kExt);
    col.window_edge(false, 500, "", true);  // a steps window: closed until its first step
    MarkerActivity m;
    m.phase = MarkerActivity::Start;
    m.id = 1;
    m.timestamp = 2400;  // the range's start record, before the callback that opens the window
    m.name = "step 10";
    m.domain = "";
    m.tid = 9;
    col.on_marker(m);
    col.window_edge(true, 2500, "step 10", true);  // stored from host 1'000'001'500
    col.end_cycle(false);
    // A later sample moves the line; it takes over from device time 2000, before the opening.
    clock.add({3000, 1'000'001'300});
    ASSERT_TRUE(clock.refit());
    ASSERT_LT(clock.to_host(2600), 1'000'001'500);  // the premise: inside, yet mapped before
    col.on_api({ApiKind::Runtime, 211, "cudaLaunchKernel", 2550, 2590, 1, 9, 801, 0});
    col.on_kernel({0, 1, 7, 801, 2600, 2700, "gemm_kernel"});
    col.end_cycle(false);
    MarkerActivity e;
    e.phase = MarkerActivity::End;
    e.id = 1;
    e.timestamp = 2900;
    col.on_marker(e);
    col.window_edge(false, 2950, "", true);
    // A copy of the window that runs past its closing, and arrives after it.
    col.on_mem({MemKind::DtoD, 1024, 0, 1, 7, 802, 2800, 4000});
    col.end_cycle(true);
    sink.close();
  }
  TraceReader r(path);
  auto windows = r.capture_windows(1);
  ASSERT_EQ(windows.size(), 1u);  // the moved row replaced the first, it was not added beside it
  ASSERT_EQ(r.steps(1).size(), 1u);
  const std::string span = "MIN(start_ns), MAX(end_ns)";
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const char* table : {"kernels", "memcpys", "api_calls", "nvtx_ranges", "steps"}) {
    sql::Stmt q(r.db(), "SELECT COUNT(*), " + span + " FROM " + table);
    ASSERT_TRUE(q.step());
    ASSERT_EQ(q.i64(0), 1) << table;
    first = std::min(first, q.i64(1));
    last = std::max(last, q.i64(2));
    EXPECT_GE(q.i64(1), windows[0].start) << table << " starts before the stored window";
    EXPECT_LE(q.i64(2), windows[0].end) << table << " ends after the stored window";
  }
  EXPECT_EQ(windows[0].start, first);  // no wider than what it kept
  EXPECT_LT(windows[0].start, 1'000'001'500);
  EXPECT_EQ(windows[0].end, last);  // the copy, past the closing edge
}

// Issue 32, item 5: braid hands CUPTI to the job's profiler and takes it back. A whole-run
// capture's window (not stored until then) is stored up to the hand-over, and a second window
// starts when braid has CUPTI again: the gap is the hole between them.
TEST(Collector, ACuptiGapSplitsTheWholeRunIntoStoredWindows) {
  Fixture f;                                        // host = device + 1'000'000
  f.col->window_edge(true, 11'000'000, "", false);  // the whole run: not stored
  f.col->on_kernel({0, 1, 7, 601, 12'000'000, 12'100'000, "gemm_kernel"});
  f.col->end_cycle(false);
  f.col->cupti_gap(true, 13'500'000, false);
  // The agent's diagnostic, as it posts it at the hand-over and again when it takes CUPTI back.
  f.col->count(diag::make(diag::Code::capture_cupti_yielded, 1,
                          "braid handed CUPTI to X (its cuptiSubscribe) at 1.000 s; not handed "
                          "back by the end of the capture"));
  f.col->end_cycle(false);
  f.col->cupti_gap(false, 15'000'000, true);
  f.col->count(diag::make(diag::Code::capture_cupti_yielded, 0,
                          "braid handed CUPTI to X (its cuptiSubscribe) at 1.000 s; took it back "
                          "at 2.000 s (its client finalized CUPTI)"));
  f.col->on_kernel({0, 1, 7, 602, 15'100'000, 15'200'000, "gemm_kernel"});
  f.col->window_edge(false, 15'300'000, "", true);
  f.close();
  TraceReader r(f.path);
  auto w = r.capture_windows(1);
  ASSERT_EQ(w.size(), 2u);
  std::sort(w.begin(), w.end(), [](auto& a, auto& b) { return a.start < b.start; });
  // The first from the run's opening (host 12'000'000) to the hand-over (host 14'500'000), the
  // second from the take-back to its closing.
  EXPECT_EQ(w[0].start, 12'000'000);
  EXPECT_EQ(w[0].end, 14'500'000);
  EXPECT_EQ(w[1].start, 16'000'000);
  EXPECT_EQ(w[1].end, 16'300'000);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels"), 2);
  // One hand-over, said as a warning, with the take-back's detail.
  auto diags = r.diagnostics(1);
  auto yielded = std::find_if(diags.begin(), diags.end(),
                              [](auto& d) { return d.code == "capture.cupti_yielded"; });
  ASSERT_NE(yielded, diags.end());
  EXPECT_EQ(yielded->count, 1);
  EXPECT_EQ(yielded->severity, Severity::Warning);
  EXPECT_NE(yielded->detail.find("took it back at 2.000 s"), std::string::npos) << yielded->detail;
  // A stored window (a steps window inside a step) open at the hand-over ends there and opens
  // again at the take-back.
  Fixture s;
  s.col->window_edge(true, 11'000'000, "step 1", true);
  s.col->on_kernel({0, 1, 7, 601, 11'100'000, 11'200'000, "gemm_kernel"});
  s.col->cupti_gap(true, 12'000'000, false);
  s.col->cupti_gap(false, 14'000'000, true);
  s.col->on_kernel({0, 1, 7, 602, 14'100'000, 14'200'000, "gemm_kernel"});
  s.col->window_edge(false, 14'500'000, "", true);
  s.close();
  auto sw = TraceReader(s.path).capture_windows(1);
  ASSERT_EQ(sw.size(), 2u);
  std::sort(sw.begin(), sw.end(), [](auto& a, auto& b) { return a.start < b.start; });
  EXPECT_EQ(sw[0].start, 12'000'000);
  EXPECT_EQ(sw[0].end, 13'000'000);
  EXPECT_EQ(sw[1].start, 15'000'000);
  EXPECT_EQ(sw[1].end, 15'500'000);
  // A gap taken while no window is open (a steps window between steps) reopens nothing.
  Fixture g;
  g.col->window_edge(false, 11'000'000, "", true);
  g.col->cupti_gap(true, 12'000'000, false);
  g.col->cupti_gap(false, 13'000'000, false);
  g.close();
  EXPECT_EQ(TraceReader(g.path).capture_windows(1).size(), 0u);
}

// The agent's own NVTX events (host clock): pushes pair with the next pop of their thread and
// domain, starts with the end of their range id; a window opened by a step range keeps it.
TEST(Collector, NvtxLogEventsBecomeRangesAndSteps) {
  Fixture f;
  f.col->window_edge(false, 10'000'000, "", true);  // a steps window, closed
  auto ev = [](NvtxEvent::Kind k, int64_t ts, int64_t tid, std::string_view name = {},
               std::string_view domain = {}, uint64_t id = 0) {
    NvtxEvent e;
    e.kind = k;
    e.ts = ts;
    e.tid = tid;
    e.name = name;
    e.domain = domain;
    e.id = id;
    return e;
  };
  f.col->on_nvtx(ev(NvtxEvent::Push, 20'000'000, 5, "step 3"));  // before the opening edge
  f.col->window_edge(true, 20'000'100, "step 3", true);
  f.col->on_nvtx(ev(NvtxEvent::Push, 20'100'000, 5, "inner"));
  f.col->on_nvtx(ev(NvtxEvent::Push, 20'150'000, 6, "other thread"));
  f.col->on_nvtx(ev(NvtxEvent::Push, 20'160'000, 5, "in a domain", "dom"));
  f.col->on_nvtx(ev(NvtxEvent::Start, 20'170'000, 6, "async", {}, 77));
  f.col->on_nvtx(ev(NvtxEvent::Pop, 20'180'000, 5, {}, "dom"));
  f.col->on_nvtx(ev(NvtxEvent::Pop, 20'200'000, 5));              // "inner", not the domain's range
  f.col->on_nvtx(ev(NvtxEvent::End, 20'250'000, 5, {}, {}, 77));  // ended on another thread
  f.col->on_nvtx(ev(NvtxEvent::Pop, 20'300'000, 6));
  f.col->on_nvtx(ev(NvtxEvent::Pop, 20'900'000, 5));  // "step 3"
  f.col->window_edge(false, 20'900'100, "", true);
  f.col->on_nvtx(ev(NvtxEvent::Pop, 21'000'000, 9));  // pushed before the capture
  f.close();
  TraceReader r(f.path);
  std::map<std::string, std::pair<int64_t, int64_t>> ranges;
  sql::Stmt q(r.db(),
              "SELECT s.text, n.start_ns, n.end_ns FROM nvtx_ranges n JOIN strings s ON "
              "s.id = n.name_id");
  while (q.step()) ranges[q.text(0)] = {q.i64(1), q.i64(2)};
  ASSERT_EQ(ranges.size(), 5u);
  // Host times as logged: no clock mapping.
  EXPECT_EQ(ranges["step 3"], std::make_pair(int64_t{20'000'000}, int64_t{20'900'000}));
  EXPECT_EQ(ranges["inner"], std::make_pair(int64_t{20'100'000}, int64_t{20'200'000}));
  EXPECT_EQ(ranges["in a domain"], std::make_pair(int64_t{20'160'000}, int64_t{20'180'000}));
  EXPECT_EQ(ranges["async"], std::make_pair(int64_t{20'170'000}, int64_t{20'250'000}));
  EXPECT_EQ(ranges["other thread"], std::make_pair(int64_t{20'150'000}, int64_t{20'300'000}));
  auto steps = r.steps(1);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].step, 3);
  std::map<std::string, int64_t> d;
  for (auto& x : r.diagnostics(1)) d[x.code] = x.count;
  EXPECT_EQ(d["capture.unmatched_marker_end"], 1);
}

}  // namespace
}  // namespace braid::capture

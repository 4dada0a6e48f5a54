// The analyses on synthetic jobs with planted answers (analysis/synthetic.h: clock skews, a
// straggler, known overlap and critical path) and on real traces.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "analysis/analyze.h"
#include "analysis/merge.h"
#include "analysis/store.h"
#include "analysis/synthetic.h"
#include "analysis/trace_calibration.h"
#include "trace/error.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"
#include "trace/writer.h"

namespace braid::analysis {
namespace {

const Ns us = 1000;
const std::vector<Ns> kSkew = {0, 5'500'000, 37'123, -250};  // rank 2: clock 37.123 µs ahead

struct Loaded {
  test::TempDir tmp;
  std::unique_ptr<TraceReader> reader;
  RunData run;
  MatchResult match;
};

std::unique_ptr<Loaded> load(const SyntheticJob& job) {
  auto l = std::make_unique<Loaded>();
  int64_t id = write_synthetic_job(l->tmp.file("j.braid"), job);
  l->reader = std::make_unique<TraceReader>(l->tmp.file("j.braid"));
  l->run = load_run(*l->reader, id);
  l->match = match_trace_collectives(l->run);
  return l;
}

// A run larger than the memory the process may take is refused before a row is read, with a
// one-line error naming the file and the sizes (issue 33: never the OOM killer), under an
// address-space limit (`ulimit -v`) and under BRAID_MEMORY_LIMIT_MB; with room it loads.
TEST(LoadRun, SaysHowMuchItNeedsBeforeItAllocates) {
  test::TempDir tmp;
  SyntheticJob job;
  job.nranks = 8;
  job.steps = 3000;
  const std::string file = tmp.file("big.braid");
  const int64_t id = write_synthetic_job(file, job);
  TraceReader reader(file);
  const int64_t need = load_bytes(reader, id);
  ASSERT_GT(need, int64_t{8} << 20);
  auto refused = [&](const char* how) {
    SCOPED_TRACE(how);
    try {
      load_run(reader, id);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported);
      const std::string m = e.what();
      EXPECT_EQ(m.rfind(file + ": run " + std::to_string(id) + " has ", 0), 0u) << m;
      EXPECT_NE(m.find("needs about " + std::to_string((need + (1 << 20) - 1) >> 20) + " MiB"),
                std::string::npos)
          << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  {
    rlimit old{};
    ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
    long long pages = 0;
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fscanf(f, "%lld", &pages), 1);
    std::fclose(f);
    rlimit lim = old;
    lim.rlim_cur = static_cast<rlim_t>(pages * sysconf(_SC_PAGESIZE) + need / 2);
    ASSERT_EQ(setrlimit(RLIMIT_AS, &lim), 0);
    EXPECT_LT(memory_left(), need);
    refused("ulimit -v");
    ASSERT_EQ(setrlimit(RLIMIT_AS, &old), 0);
  }
  ASSERT_EQ(setenv("BRAID_MEMORY_LIMIT_MB", "1", 1), 0);
  refused("BRAID_MEMORY_LIMIT_MB=1");
  ASSERT_EQ(unsetenv("BRAID_MEMORY_LIMIT_MB"), 0);
  const RunData run = load_run(reader, id);
  EXPECT_EQ(run.ranks.size(), 8u);
}

TEST(Clock, PlantedOffsetsRecoveredWithinOneMicrosecond) {
  SyntheticJob job;
  job.clock_skew = kSkew;
  job.end_jitter = 300;  // collective ends scatter by up to ±300 ns per rank
  job.steps = 8;
  auto l = load(job);
  ClockFit fit = align_clocks(l->run, l->match);
  EXPECT_EQ(fit.reference, 0);
  EXPECT_EQ(fit.anchors_used, 16);
  for (int r = 0; r < 4; ++r) {
    const RankClock* c = fit.rank(r);
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->aligned);
    EXPECT_FALSE(c->flagged);
    EXPECT_LE(std::llabs(c->offset + kSkew[r]), 1000) << "rank " << r << " offset " << c->offset;
    EXPECT_GE(c->error, 0);
    EXPECT_LT(c->error, 1000);
  }
  // No jitter: exact.
  job.end_jitter = 0;
  auto e = load(job);
  ClockFit exact = align_clocks(e->run, e->match);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(exact.offset(r), -kSkew[r]);
}

TEST(Clock, NoisyRankIsFlagged) {
  SyntheticJob job;
  job.nranks = 6;
  job.steps = 6;
  job.straggler = -1;
  job.clock_skew = {0, 1000, 2000, 3000, 4000, 5000};
  job.end_jitter = 200;
  test::TempDir tmp;
  // Rank 4's collective ends wander by ±60 µs: a drifting clock.
  SyntheticJob noisy = job;
  noisy.only_ranks = {4};
  noisy.end_jitter = 60'000;
  SyntheticJob rest = job;
  rest.only_ranks = {0, 1, 2, 3, 5};
  write_synthetic_job(tmp.file("a.braid"), rest);
  write_synthetic_job(tmp.file("b.braid"), noisy);
  merge_files({tmp.file("a.braid"), tmp.file("b.braid")}, tmp.file("m.braid"));
  TraceReader r(tmp.file("m.braid"));
  RunData run = load_run(r, default_run(r));
  ClockFit fit = align_clocks(run, match_trace_collectives(run));
  for (const RankClock& c : fit.ranks) EXPECT_EQ(c.flagged, c.rank == 4) << c.rank;
  bool diag = false;
  for (const Diagnostic& d : fit.diagnostics) diag = diag || (d.code == "analysis.clock_residual" && d.rank == 4);
  EXPECT_TRUE(diag);
}

TEST(Matching, BySeqAndByOrder) {
  SyntheticJob job;
  auto l = load(job);
  ASSERT_EQ(l->match.groups.size(), 6u);
  for (const CollGroup& g : l->match.groups) {
    EXPECT_EQ(g.method, MatchMethod::Seq);
    EXPECT_TRUE(g.complete());
    EXPECT_EQ(g.members.size(), 4u);
    EXPECT_EQ(g.bytes, 4 << 20);
  }
  job.record_seq = false;
  auto o = load(job);
  ASSERT_EQ(o->match.groups.size(), 6u);
  for (const CollGroup& g : o->match.groups) EXPECT_EQ(g.method, MatchMethod::Order);
  EXPECT_EQ(o->match.unmatched, 0);
}

TEST(Matching, DroppedCollectiveIsAlignedAndReported) {
  SyntheticJob job;
  job.record_seq = false;
  job.clock_skew = kSkew;
  job.drop_rank = 1;
  job.drop_step = 1;
  auto l = load(job);
  ASSERT_EQ(l->match.groups.size(), 6u);
  int incomplete = 0;
  for (const CollGroup& g : l->match.groups) {
    EXPECT_EQ(g.method, MatchMethod::Aligned);
    if (!g.complete()) {
      ++incomplete;
      ASSERT_EQ(g.members.size(), 3u);
      EXPECT_EQ(g.members[0].rank, 0);
      EXPECT_EQ(g.members[1].rank, 2);
      EXPECT_EQ(g.members[2].rank, 3);
      EXPECT_EQ(g.seq, 2);  // all-reduce A of step 1
    }
  }
  EXPECT_EQ(incomplete, 1);
  EXPECT_EQ(l->match.unmatched, 3);
  bool unmatched = false, aligned = false;
  for (const Diagnostic& d : l->match.diagnostics) {
    unmatched = unmatched || (d.code == "analysis.unmatched_collective" && d.count == 3);
    aligned = aligned || d.code == "analysis.order_aligned";
  }
  EXPECT_TRUE(unmatched);
  EXPECT_TRUE(aligned);
}

// Point-to-point messages pair by their per-channel sequence numbers (braid's capture numbers a
// communicator's sends and receives per peer and direction): rank 1's trace starts one message
// later than rank 0's, and every complete pair still joins a send and a receive of the same
// message (pairing by position would shift every pair by one).
TEST(Matching, PointToPointBySeqWhereTracesStartApart) {
  test::TempDir tmp;
  {
    TraceWriter w(tmp.file("p.braid"), TraceWriter::Mode::Create);
    int64_t run = w.begin_run(RunKind::Captured, "test");
    StrId comm = w.intern("nccl:pp"), f32 = w.intern("float32");
    for (int32_t r = 0; r < 2; ++r) {
      RankInfo info;
      info.rank = r;
      w.add_rank(run, info);
    }
    for (int k = 0; k < 5; ++k) {
      Collective s;
      s.comm = comm;
      s.dtype = f32;
      s.in_count = s.out_count = 1024;
      s.bytes = 4096;
      s.stream = 7;
      s.rank = 0;
      s.op = CollOp::Send;
      s.peer_or_root = 1;
      s.seq = 10 + k;
      s.start = 1'000'000 * (k + 1);
      s.end = s.start + 1000;
      w.add(run, s);
      Collective v = s;
      v.rank = 1;
      v.op = CollOp::Recv;
      v.peer_or_root = 0;
      v.seq = 11 + k;
      v.start = s.start + 1'000'000 + 50;
      v.end = v.start + 1000;
      w.add(run, v);
    }
    w.commit();
  }
  TraceReader reader(tmp.file("p.braid"));
  RunData run = load_run(reader, 1);
  MatchResult m = match_trace_collectives(run);
  ASSERT_EQ(m.groups.size(), 6u);
  int complete = 0;
  for (const CollGroup& g : m.groups) {
    EXPECT_EQ(g.method, MatchMethod::PointToPoint);
    if (!g.complete()) continue;
    ++complete;
    ASSERT_EQ(g.members.size(), 2u);
    EXPECT_EQ(run.rank(g.members[0].rank)->collectives[g.members[0].index].seq,
              run.rank(g.members[1].rank)->collectives[g.members[1].index].seq);
  }
  EXPECT_EQ(complete, 4);
}

TEST(Matching, MismatchedSizeIsReported) {
  // Rank 1 of a second job runs the same all-reduces with another size.
  test::TempDir tmp;
  SyntheticJob a;
  a.nranks = 2;
  a.straggler = -1;
  a.only_ranks = {0};
  SyntheticJob b = a;
  b.only_ranks = {1};
  b.count = 1000;
  write_synthetic_job(tmp.file("a.braid"), a);
  write_synthetic_job(tmp.file("b.braid"), b);
  merge_files({tmp.file("a.braid"), tmp.file("b.braid")}, tmp.file("m.braid"));
  TraceReader r(tmp.file("m.braid"));
  RunData run = load_run(r, default_run(r));
  MatchResult m = match_trace_collectives(run);
  EXPECT_EQ(m.mismatched, 6);
  ASSERT_FALSE(m.groups.empty());
  EXPECT_NE(m.groups[0].problem.find("moves 4000 bytes"), std::string::npos) << m.groups[0].problem;
}

// Busy time is the union of every class's activity: computation on two streams overlapping,
// communication overlapping computation and copies, copies that touch, and gaps (idle).
TEST(Metrics, BusyIsTheUnionOfEveryClassAndIdleTheRest) {
  RunData run;
  run.strings = {""};
  RankTrace& t = run.ranks[0];
  auto kernel = [&](int64_t stream, Ns a, Ns b, Category c) {
    Kernel k;
    k.stream = stream, k.start = a * us, k.end = b * us, k.category = c;
    t.kernels.push_back(k);
  };
  auto copy = [&](Ns a, Ns b) {
    Memcpy m;
    m.stream = 4, m.start = a * us, m.end = b * us, m.bytes = 64;
    t.memcpys.push_back(m);
  };
  kernel(1, 0, 10, Category::Gemm);
  kernel(1, 20, 30, Category::Gemm);
  kernel(2, 25, 40, Category::Elementwise);
  kernel(3, 35, 50, Category::CommAllReduce);
  kernel(3, 60, 70, Category::CommAllReduce);
  kernel(3, 75, 75, Category::CommAllReduce);  // empty: no time
  copy(68, 80);
  copy(90, 95);
  copy(95, 100);
  Metrics m = compute_metrics(run, MatchResult{}, ClockFit{});
  ASSERT_EQ(m.ranks.size(), 1u);
  const RankMetrics& r = m.ranks[0];
  EXPECT_EQ(r.span(), 100 * us);
  EXPECT_EQ(r.compute_ns, 30 * us);  // [0,10] [20,40]
  EXPECT_EQ(r.comm_ns, 25 * us);     // [35,50] [60,70]
  EXPECT_EQ(r.memory_ns, 22 * us);   // [68,80] [90,100]
  EXPECT_EQ(r.busy_ns, 70 * us);     // [0,10] [20,50] [60,80] [90,100]
  EXPECT_EQ(r.idle_ns, 30 * us);
  EXPECT_EQ(r.overlap_ns, 5 * us);  // [35,40]
}

TEST(Metrics, OverlapExposedCommAndStraggler) {
  SyntheticJob job;
  job.clock_skew = kSkew;
  auto l = load(job);
  ClockFit fit = align_clocks(l->run, l->match);
  MetricsOptions mo;
  mo.step = 1;
  Metrics m = compute_metrics(l->run, l->match, fit, mo);
  ASSERT_EQ(m.ranks.size(), 4u);
  for (const RankMetrics& r : m.ranks) {
    EXPECT_EQ(r.step, 1);
    EXPECT_EQ(r.span(), 450 * us);
    EXPECT_EQ(r.idle_ns, 0);
    if (r.rank == 3) {  // the straggler: gemm1 takes 50 µs longer
      EXPECT_EQ(r.compute_ns, 370 * us);
      EXPECT_EQ(r.comm_ns, 160 * us);
      EXPECT_EQ(r.overlap_ns, 80 * us);
      EXPECT_EQ(r.exposed_comm_ns, 80 * us);
      EXPECT_DOUBLE_EQ(r.overlap_pct, 50.0);
    } else {
      EXPECT_EQ(r.compute_ns, 320 * us);
      EXPECT_EQ(r.comm_ns, 230 * us);  // A waits 50 µs for rank 3
      EXPECT_EQ(r.overlap_ns, 100 * us);
      EXPECT_EQ(r.exposed_comm_ns, 130 * us);
      EXPECT_DOUBLE_EQ(r.overlap_pct, 100.0 * 100 / 230);
    }
    EXPECT_EQ(r.non_compute_ns, r.span() - r.compute_ns - r.idle_ns);
  }
  ASSERT_EQ(m.collectives.size(), 2u);
  const CollectiveMetrics &a = m.collectives[0], &b = m.collectives[1];
  EXPECT_EQ(a.late_rank, 3);
  EXPECT_EQ(a.wait_ns, 50 * us);
  EXPECT_EQ(a.transfer_ns, 80 * us);
  EXPECT_EQ(b.late_rank, 3);
  EXPECT_EQ(b.wait_ns, 20 * us);  // the others' B started when their A ended, at 330 µs
  EXPECT_EQ(b.transfer_ns, 80 * us);
  EXPECT_NEAR(a.algbw_gbps, 4194304.0 / 80000, 1e-9);
  EXPECT_NEAR(a.busbw_gbps, 4194304.0 / 80000 * 2 * 3 / 4, 1e-9);
  for (const MemberTiming& mt : a.members) EXPECT_EQ(mt.wait_ns, mt.rank == 3 ? 0 : 50 * us);
  // Each member's exposed time (its interval not under computation on its rank): the step's
  // collectives are the rank's communication, so their exposed parts add up to the rank's.
  std::map<int32_t, Ns> exposed;
  for (const CollectiveMetrics& c : m.collectives) {
    Ns sum = 0;
    for (const MemberTiming& mt : c.members) {
      exposed[mt.rank] += mt.exposed_ns;
      sum += mt.exposed_ns;
    }
    EXPECT_EQ(c.exposed_ns, sum);
  }
  for (const RankMetrics& r : m.ranks) EXPECT_EQ(exposed[r.rank], r.exposed_comm_ns) << r.rank;
}

TEST(CriticalPath, ThroughTheStragglerAndTheCollective) {
  SyntheticJob job;
  job.clock_skew = kSkew;
  auto l = load(job);
  ClockFit fit = align_clocks(l->run, l->match);
  std::map<int32_t, RankTimeline> tls;
  for (const auto& [r, t] : l->run.ranks) tls[r] = build_timeline(t);
  CriticalPathOptions co;
  co.step = 1;
  CriticalPath p = critical_path(l->run, l->match, fit, tls, co);
  EXPECT_EQ(p.length(), 450 * us);
  ASSERT_EQ(p.chain.size(), 5u);
  struct Want {
    SegmentKind kind;
    int rank;
    Ns dur;
    std::string category;
  } want[] = {{SegmentKind::Kernel, 3, 100 * us, "gemm"},
              {SegmentKind::Kernel, 3, 150 * us, "gemm"},
              {SegmentKind::Kernel, 3, 100 * us, "gemm"},
              {SegmentKind::Collective, 0, 80 * us, "comm.allreduce"},
              {SegmentKind::Kernel, 0, 20 * us, "elementwise"}};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(p.chain[i].kind, want[i].kind) << i;
    EXPECT_EQ(p.chain[i].rank, want[i].rank) << i;
    EXPECT_EQ(p.chain[i].duration(), want[i].dur) << i;
    EXPECT_EQ(p.chain[i].category, want[i].category) << i;
  }
  EXPECT_EQ(p.chain[3].comm, "dp");
  EXPECT_EQ(p.chain[3].late_rank, 3);
  EXPECT_EQ(p.by_category["gemm"], 350 * us);
  EXPECT_EQ(p.by_category["comm.allreduce"], 80 * us);
  EXPECT_EQ(p.by_category["elementwise"], 20 * us);
  EXPECT_EQ(p.by_comm["dp"], 80 * us);
}

TEST(Calibration, RecoversAlphaBetaAndReportsCrossValidatedError) {
  // Ring all-reduce on 8 ranks: T = 14 α + (2·7/8) n β with α = 5 µs, 100 GB/s.
  std::vector<CalibrationSample> v;
  for (int64_t n = 1 << 16; n <= (1 << 28); n *= 2) {
    double t = 14 * 5000.0 + 1.75 * static_cast<double>(n) / 100.0;
    v.push_back({CollOp::AllReduce, n, 8, Algorithm::Ring, static_cast<Ns>(std::llround(t))});
  }
  CommCost c = fit_comm(v, LinkCost{1000, 0.1});
  EXPECT_NEAR(c.link.alpha_ns, 5000, 1);
  EXPECT_NEAR(1.0 / c.link.ns_per_byte, 100, 0.01);
  EXPECT_EQ(c.samples, static_cast<int>(v.size()));
  EXPECT_GE(c.cv_error, 0);
  EXPECT_LT(c.cv_error, 1e-4);
  // ±10% alternating noise: the cross-validated error says so.
  for (size_t i = 0; i < v.size(); ++i) v[i].transfer_ns = v[i].transfer_ns * (i % 2 ? 11 : 9) / 10;
  CommCost noisy = fit_comm(v, LinkCost{1000, 0.1});
  EXPECT_GT(noisy.cv_error, 0.05);
  EXPECT_LT(noisy.cv_error, 0.2);
  // One size: α cannot be separated and is kept from the base link.
  std::vector<CalibrationSample> one(4, {CollOp::AllReduce, 1 << 20, 8, Algorithm::Ring, 90'000});
  CommCost o = fit_comm(one, LinkCost{1000, 0.1});
  EXPECT_DOUBLE_EQ(o.link.alpha_ns, 1000);
  EXPECT_NE(o.source.find("alpha kept"), std::string::npos);
}

TEST(Calibration, OnTheTraceTransferTimes) {
  SyntheticJob job;
  job.clock_skew = kSkew;
  auto l = load(job);
  ClockFit fit = align_clocks(l->run, l->match);
  auto samples = calibration_samples(l->run, l->match, fit);
  ASSERT_EQ(samples["dp"].size(), 6u);
  for (const auto& s : samples["dp"]) EXPECT_EQ(s.transfer_ns, 80 * us);  // not the wait
  CostModel model;
  auto costs = calibrate(l->run, l->match, fit, model);
  ASSERT_TRUE(costs.count("dp"));
  // One size only: α from the profile, β such that the model gives the measured 80 µs.
  EXPECT_NEAR(static_cast<double>(model.collective_ns(CollOp::AllReduce, 4 << 20, 4, "dp", {0, 1, 2, 3},
                                                      Algorithm::Ring)),
              80'000, 2);
  EXPECT_NEAR(costs["dp"].cv_error, 0, 1e-6);
}

TEST(Parallelism, LabelsWithEvidence) {
  SyntheticJob job;
  auto l = load(job);
  auto labels = infer_parallelism(l->run, l->match);
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_EQ(labels[0].dim, "DP");  // named "dp"
  EXPECT_NE(labels[0].evidence.find("named 'dp'"), std::string::npos);
  job.comm = "group7";  // no name hint: the whole world running all-reduce
  auto g = load(job);
  labels = infer_parallelism(g->run, g->match);
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_EQ(labels[0].dim, "DP");
  EXPECT_NE(labels[0].evidence.find("spans the whole world"), std::string::npos) << labels[0].evidence;
}

TEST(Analyze, StoresResultsForTheGui) {
  test::TempDir tmp;
  SyntheticJob job;
  job.clock_skew = kSkew;
  write_synthetic_job(tmp.file("j.braid"), job);
  Analysis a;
  {
    TraceReader r(tmp.file("j.braid"));
    a = analyze(r);
  }
  store_analysis(tmp.file("j.braid"), a);
  store_analysis(tmp.file("j.braid"), a);  // re-analysis replaces, never duplicates
  TraceReader r(tmp.file("j.braid"));
  EXPECT_EQ(r.meta("schema_version"), "1.2");
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM analysis_ranks"), 4 * 4);  // whole run + 3 steps
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM analysis_collectives"), 6);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM analysis_collective_members"), 24);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(DISTINCT late_rank) FROM analysis_collectives"), 1);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT late_rank FROM analysis_collectives LIMIT 1"), 3);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM analysis_critical_path WHERE step=1"), 5);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT parallel_dim='DP' FROM analysis_communicators"), 1);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM analysis_reports"), 1);
  for (const RankInfo& ri : r.ranks(1)) EXPECT_EQ(ri.clock_offset, -kSkew[ri.rank]) << ri.rank;
  std::string text = report_text(a);
  EXPECT_NE(text.find("rank 3 6x"), std::string::npos) << text;  // the straggler, named
  std::string json = report_json(a);
  EXPECT_NE(json.find("\"late_rank\":3"), std::string::npos);
  // A step the run does not have is a usage error naming the steps it has.
  AnalyzeOptions opt;
  opt.step = 9;
  try {
    analyze(r, opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Usage);
    EXPECT_NE(std::string(e.what()).find("steps: 0, 1, 2"), std::string::npos) << e.what();
  }
}

TEST(Merge, PerRankFilesBecomeOneJobWithAlignedClocks) {
  test::TempDir tmp;
  SyntheticJob job;
  job.clock_skew = kSkew;
  job.end_jitter = 300;
  std::vector<std::string> files;
  for (int r = 0; r < 4; ++r) {
    SyntheticJob one = job;
    one.only_ranks = {r};
    files.push_back(tmp.file("rank" + std::to_string(r) + ".braid"));
    write_synthetic_job(files.back(), one);
  }
  MergeResult m = merge_files(files, tmp.file("job.braid"));
  EXPECT_EQ(m.ranks, (std::vector<int32_t>{0, 1, 2, 3}));
  TraceReader r(tmp.file("job.braid"));
  ASSERT_EQ(r.runs().size(), 1u);
  auto ranks = r.ranks(m.run_id);
  ASSERT_EQ(ranks.size(), 4u);
  for (const RankInfo& ri : ranks) {
    EXPECT_LE(std::llabs(ri.clock_offset + kSkew[ri.rank]), 1000) << ri.rank;
    EXPECT_GE(ri.offset_error, 0);
  }
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels"), 4 * 3 * 6);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM collectives"), 4 * 3 * 2);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM steps"), 4 * 3);

  // A rank in two inputs is refused and the existing output is left alone.
  auto before = std::filesystem::file_size(tmp.file("job.braid"));
  try {
    merge_files({files[0], files[1], files[1]}, tmp.file("job.braid"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Usage);
    EXPECT_NE(std::string(e.what()).find("rank 1 is in both"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::filesystem::file_size(tmp.file("job.braid")), before);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("job.braid.merge-tmp")));
}

TEST(Merge, RanksWithoutSharedCollectivesKeepTheirClocks) {
  test::TempDir tmp;
  SyntheticJob a;
  a.nranks = 2;
  a.only_ranks = {0};
  a.comm = "x";
  SyntheticJob b = a;
  b.only_ranks = {1};
  b.comm = "y";  // a different communicator: nothing to anchor on
  write_synthetic_job(tmp.file("a.braid"), a);
  write_synthetic_job(tmp.file("b.braid"), b);
  MergeResult m = merge_files({tmp.file("a.braid"), tmp.file("b.braid")}, tmp.file("m.braid"));
  TraceReader r(tmp.file("m.braid"));
  bool diag = false;
  for (const Diagnostic& d : r.diagnostics(m.run_id)) diag = diag || d.code == "merge.clock_unanchored";
  EXPECT_TRUE(diag);
  EXPECT_FALSE(m.clocks.rank(1)->aligned);
  EXPECT_EQ(r.ranks(m.run_id)[1].clock_offset, 0);
}

// The two trace_filter ranks (MANIFEST.md: one job, rank 0 and 1 of 128, sampled traces):
// imported separately, merged, matched, aligned.
TEST(RealTraces, TraceFilterRanksMergedAndMatched) {
  test::TempDir tmp;
  std::string f0 = test::traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz"),
              f1 = test::traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz");
  test::import_files({f0}, tmp.file("r0.braid"));
  test::import_files({f1}, tmp.file("r1.braid"));
  // Each file alone says rank 0 / rank 1 (distributedInfo), so they merge.
  MergeResult m = merge_files({tmp.file("r0.braid"), tmp.file("r1.braid")}, tmp.file("job.braid"));
  EXPECT_EQ(m.ranks, (std::vector<int32_t>{0, 1}));
  TraceReader r(tmp.file("job.braid"));
  auto k0 = test::count_kineto(f0), k1 = test::count_kineto(f1);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels WHERE rank=0"), k0.kernels);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels WHERE rank=1"), k1.kernels);

  RunData run = load_run(r, m.run_id);
  MatchResult match = match_trace_collectives(run);
  // The sampled traces keep 10 collectives per rank but not the same ones, and record no
  // sequence numbers: order disagrees (rank 0: a2a a2a ar ar ag a2a a2a ar ar ag, rank 1:
  // a2a a2a ar ar ag a2a ar a2a ar ag), so the ranks are aligned. Five pairs overlap in time
  // (ends in µs after 1682725898 s: a2a 187835 / 187835, ar 307389 / 307334, ag 627817 /
  // 628149, ar 1182485 / 1182493, ag 1249534 / 1249345); the other ten are unmatched.
  int complete = 0;
  for (const CollGroup& g : match.groups) {
    EXPECT_FALSE(g.mismatched);
    if (g.complete()) {
      ++complete;
      EXPECT_EQ(g.method, MatchMethod::Aligned);
      const Collective& a = run.ranks.at(0).collectives[g.members[0].index];
      const Collective& b = run.ranks.at(1).collectives[g.members[1].index];
      EXPECT_EQ(a.op, b.op);
      EXPECT_LT(std::llabs(a.end - b.end), 400'000);
    }
  }
  EXPECT_EQ(complete, 5);
  EXPECT_EQ(match.unmatched, 10);
  // The ranks' clocks agree to within the spread of those ends (same cluster, NTP-synced).
  const RankClock* c1 = m.clocks.rank(1);
  ASSERT_NE(c1, nullptr);
  EXPECT_TRUE(c1->aligned);
  EXPECT_LT(std::llabs(c1->offset), 400'000);
  EXPECT_EQ(r.ranks(m.run_id)[1].clock_offset, c1->offset);

  // The whole analysis runs and is stored.
  Analysis a = analyze(r);
  EXPECT_EQ(a.paths.size(), 2u);  // ProfilerStep#551 and #552
  for (const CriticalPath& p : a.paths) {
    EXPECT_FALSE(p.chain.empty());
    Ns sum = 0;
    for (const PathSegment& s : p.chain) sum += s.duration();
    EXPECT_LE(sum, p.length());
  }
}

}  // namespace
}  // namespace braid::analysis

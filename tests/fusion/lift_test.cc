// fusion::lift_run on synthetic jobs with known structure and on real traces.
#include <gtest/gtest.h>

#include <map>

#include "analysis/synthetic.h"
#include "fusion/lift.h"
#include "fusion/pipeline.h"
#include "fusion/validate.h"
#include "trace/import/importer.h"
#include "trace/error.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::fusion {
namespace {

struct Counts {
  int collectives = 0, computes = 0, delays = 0, records = 0, waits = 0, opaque_colls = 0;
  Ns delay_ns = 0;
};

Counts count(const Schedule& s, int rank) {
  Counts c;
  for (const Stream& st : s.ranks[rank].streams)
    for (const Op& op : st.ops) {
      switch (op.kind()) {
        case OpKind::Collective: ++c.collectives; break;
        case OpKind::Compute:
          ++c.computes;
          if (op.compute()->label.rfind("opaque ", 0) == 0) ++c.opaque_colls;
          break;
        case OpKind::Delay: ++c.delays, c.delay_ns += op.delay()->duration_ns; break;
        case OpKind::Record: ++c.records; break;
        case OpKind::Wait: ++c.waits; break;
      }
    }
  return c;
}

TEST(Lift, SyntheticJobIsValidWithInferredDependencies) {
  test::TempDir tmp;
  analysis::SyntheticJob job;
  job.clock_skew = {0, 5'500'000, 37'123, -250};
  int64_t run = analysis::write_synthetic_job(tmp.file("j.braid"), job);
  TraceReader r(tmp.file("j.braid"));
  Schedule s = lift_run(r, run);
  EXPECT_EQ(validate(s), std::vector<std::string>{});
  ASSERT_EQ(s.ranks.size(), 4u);
  ASSERT_EQ(s.comms.size(), 1u);
  EXPECT_EQ(s.comms[0].id, "dp");
  EXPECT_EQ(s.comms[0].ranks, (std::vector<int32_t>{0, 1, 2, 3}));
  for (int rank = 0; rank < 4; ++rank) {
    Counts c = count(s, rank);
    EXPECT_EQ(c.collectives, 6) << rank;  // 2 all-reduces x 3 steps
    EXPECT_EQ(c.computes, 12) << rank;    // 4 kernels x 3 steps
    // A waits for gemm1 and the optimizer for B on every rank; the straggler's B also waits
    // for its gemm2 (its stream was free when A ended at 330 µs, gemm2 ended at 350 µs).
    EXPECT_EQ(c.waits, rank == 3 ? 9 : 6) << rank;
    EXPECT_EQ(c.records, c.waits) << rank;
    // Host gaps: steps 1 and 2 start 1000 µs after the previous step, whose optimizer ended at
    // 450 µs: 550 µs each.
    EXPECT_EQ(c.delays, 2) << rank;
    EXPECT_EQ(c.delay_ns, 2 * 550'000) << rank;
  }
  // The all-reduce carries the trace's count and dtype, with in/out buffers of that size.
  const Op* ar = nullptr;
  for (const Stream& st : s.ranks[2].streams)
    for (const Op& op : st.ops)
      if (op.collective() && !ar) ar = &op;
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->collective()->op, CollOp::AllReduce);
  EXPECT_EQ(ar->collective()->count, 1 << 20);
  EXPECT_EQ(ar->collective()->dtype, "float32");
  // Every assumption is written down.
  std::string prov;
  for (const auto& p : s.provenance) prov += p + "\n";
  EXPECT_NE(prov.find("27 cross-stream dependencies inferred"), std::string::npos) << prov;
  EXPECT_NE(prov.find("cudaStreamWaitEvent"), std::string::npos);
  EXPECT_NE(prov.find("opaque"), std::string::npos);
  // JSON round trip.
  EXPECT_EQ(parse_schedule(to_json(s)), s);
}

TEST(Lift, OneStep) {
  test::TempDir tmp;
  analysis::SyntheticJob job;
  int64_t run = analysis::write_synthetic_job(tmp.file("j.braid"), job);
  TraceReader r(tmp.file("j.braid"));
  LiftOptions opt;
  opt.step = 1;
  Schedule s = lift_run(r, run, opt);
  EXPECT_EQ(validate(s), std::vector<std::string>{});
  EXPECT_EQ(s.lifted, (LiftSource{run, 1}));  // what replay finds its original by
  EXPECT_EQ(parse_schedule(to_json(s)).lifted, s.lifted);
  for (int rank = 0; rank < 4; ++rank) {
    Counts c = count(s, rank);
    EXPECT_EQ(c.collectives, 2);
    EXPECT_EQ(c.computes, 4);
    EXPECT_EQ(c.delays, 0);  // the step starts with its first kernel
  }
  opt.step = 7;
  EXPECT_THROW(lift_run(r, run, opt), Error);
}

TEST(Lift, AMemberWithoutADtypeTakesTheOtherMembersSize) {
  // A trace that lost the dtype of one rank's calls (counts known, dtype ''), as a real 8-rank
  // job's all-to-all parts did: the group's other members say it, so nothing stays opaque.
  test::TempDir tmp;
  analysis::SyntheticJob job;
  job.untyped_rank = 0;
  const std::string f = tmp.file("u.braid");
  const int64_t run = analysis::write_synthetic_job(f, job);
  TraceReader r(f);
  LiftReport rep;
  Schedule s = lift_run(r, run, {}, &rep);
  EXPECT_EQ(rep.opaque_collectives, 0);
  for (const std::string& p : s.provenance)
    EXPECT_EQ(p.find("without a known dtype"), std::string::npos) << p;
  int64_t lifted = 0;
  for (const RankSchedule& rs : s.ranks)
    for (const Stream& st : rs.streams)
      for (const Op& op : st.ops)
        if (const Collective* c = op.collective()) {
          ++lifted;
          EXPECT_EQ(c->dtype, "float32");
          EXPECT_EQ(c->count, job.count);
        }
  EXPECT_EQ(lifted, int64_t(job.nranks) * job.steps * 2);
}

TEST(Lift, UnmatchedCollectiveStaysOpaque) {
  test::TempDir tmp;
  analysis::SyntheticJob job;
  job.record_seq = false;  // matched by order, which the drop breaks: aligned
  job.drop_rank = 1;
  job.drop_step = 1;
  int64_t run = analysis::write_synthetic_job(tmp.file("j.braid"), job);
  TraceReader r(tmp.file("j.braid"));
  Schedule s = lift_run(r, run);
  EXPECT_EQ(validate(s), std::vector<std::string>{});
  EXPECT_EQ(count(s, 1).collectives, 5);
  for (int rank : {0, 2, 3}) {
    EXPECT_EQ(count(s, rank).collectives, 5) << rank;
    EXPECT_EQ(count(s, rank).opaque_colls, 1) << rank;
  }
  std::string prov;
  for (const auto& p : s.provenance) prov += p + "\n";
  EXPECT_NE(prov.find("3 collective parts left as opaque compute: unmatched"), std::string::npos)
      << prov;
}

TEST(Lift, RealTwoRankTrace) {
  test::TempDir tmp;
  int64_t run = test::import_files(
      {test::traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz"),
       test::traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz")},
      tmp.file("tf.braid"));
  TraceReader r(tmp.file("tf.braid"));
  Schedule s = lift_run(r, run);
  EXPECT_EQ(validate(s), std::vector<std::string>{});
  ASSERT_EQ(s.ranks.size(), 2u);
  // Every GPU kernel and memcpy of a rank is one op (collective or compute).
  for (int rank = 0; rank < 2; ++rank) {
    Counts c = count(s, rank);
    int64_t gpu = sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels WHERE rank=" +
                                          std::to_string(rank)) +
                  sql::scalar(r.db(), "SELECT COUNT(*) FROM memcpys WHERE rank=" +
                                          std::to_string(rank));
    EXPECT_EQ(c.collectives + c.computes, gpu) << rank;
    EXPECT_EQ(count(s, 0).collectives, c.collectives);
  }
}

// ---------------------------------------------------------------------------------------------
// The passes on a lifted real trace: opaque compute, so advice only.

TEST(LiftThenFuse, RealTraceGivesAdviceWithSavingAndAssumptionAndAppliesNothingUnproven) {
  // HTA's rank-0 trace of a 2-rank A100 job (15 All-Reduces and 6 Broadcasts of the default
  // process group [0, 1], sizes in the trace). The job's rank-1 file is not public: the same file
  // relabelled as rank 1 stands in for it (distributedInfo.rank is its only "rank" field), so
  // every collective has its partner and is lifted as a collective on a 2-rank communicator.
  test::TempDir tmp;
  const std::string text =
      test::gunzip_file(test::traces("hta/tests/data/nccl_parser_config/nccl_data.json.gz"));
  ASSERT_FALSE(text.empty());
  const std::string key = "\"rank\": 0";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(text.find(key, at + 1), std::string::npos);
  std::string rank1 = text;
  rank1.replace(at, key.size(), "\"rank\": 1");
  test::write_file(tmp.file("rank0.json"), text);
  test::write_file(tmp.file("rank1.json"), rank1);
  int64_t run = test::import_files({tmp.file("rank0.json"), tmp.file("rank1.json")},
                                   tmp.file("nccl.braid"));
  TraceReader r(tmp.file("nccl.braid"));
  Schedule s = lift_run(r, run);
  ASSERT_EQ(validate(s), std::vector<std::string>{});
  ASSERT_EQ(s.ranks.size(), 2u);
  int all_reduces = 0;
  for (const Stream& st : s.ranks[0].streams)
    for (const Op& op : st.ops)
      if (op.collective() && op.collective()->op == CollOp::AllReduce) ++all_reduces;
  EXPECT_EQ(all_reduces, 15);

  PipelineResult res = run_pipeline(s, analysis::CostModel());
  // Compute lifted from a trace is opaque: nothing the passes cannot prove is applied. Whatever
  // is applied is legal and keeps the schedule valid (here: nothing).
  for (const Finding& f : res.applied) EXPECT_TRUE(f.legal) << f.pass << ": " << f.summary;
  EXPECT_EQ(validate(res.schedule), std::vector<std::string>{});
  EXPECT_TRUE(res.applied.empty());
  EXPECT_EQ(res.schedule, s);
  // tp-sp advice on every All-Reduce: the opaque kernels after it might read only the rank's
  // half, then it would be a Reduce-Scatter saving (t-1)/t of the bytes: M / 2 on 2 ranks
  // (float32, 4 bytes per element).
  std::map<int64_t, int> counts;  // saving -> findings
  int tp_sp = 0;
  for (const Finding& f : res.advice) {
    EXPECT_FALSE(f.legal && f.saving_ns > 0 && !f.enabling) << f.pass << ": " << f.summary;
    // Advice that --assume could apply comes only from the passes that say their advice has
    // a rewrite (braid fuse names the others).
    if (f.can_assume) {
      EXPECT_TRUE(find_pass(f.pass)->rewrites_advice()) << f.pass;
    }
    if (f.pass != "tp-sp") continue;
    ++tp_sp;
    EXPECT_FALSE(f.legal);
    EXPECT_GT(f.saving_ns, 0);
    EXPECT_GT(f.saving_bytes, 0);
    EXPECT_NE(f.assumption.find("read only the rank's own 1/2 shard"), std::string::npos)
        << f.assumption;
    ++counts[f.saving_bytes];
  }
  EXPECT_EQ(tp_sp, 15);
  for (int64_t n : {2049000, 2431040, 6563840, 6637568, 7875584})
    EXPECT_EQ(counts[n * 4 / 2], 3) << n;
}

}  // namespace
}  // namespace braid::fusion

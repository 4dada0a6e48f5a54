// fusion::lift_run on synthetic jobs with known structure and on real traces.
#include <gtest/gtest.h>

#include <map>

#include "analysis/synthetic.h"
#include "fusion/lift.h"
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
  for (int rank = 0; rank < 4; ++rank) {
    Counts c = count(s, rank);
    EXPECT_EQ(c.collectives, 2);
    EXPECT_EQ(c.computes, 4);
    EXPECT_EQ(c.delays, 0);  // the step starts with its first kernel
  }
  opt.step = 7;
  EXPECT_THROW(lift_run(r, run, opt), Error);
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

}  // namespace
}  // namespace braid::fusion

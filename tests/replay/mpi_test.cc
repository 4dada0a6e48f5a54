// The mpi backend, run under mpirun (tests/replay/CMakeLists.txt starts it with 4 and with 8
// processes): replays equal the reference interpreter on every rank; the Chimera presets whose
// world fits the job replay and their fused forms pass the A/B data check; a deliberately broken
// rewrite fails it with mismatches on the rank it broke; stored runs hold every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include "fusion/pass.h"
#include "fusion/pass_schedules.h"
#include "fusion/schedule_store.h"
#include "replay/ab.h"
#include "replay/mpi_executor.h"
#include "replay/replay_schedules.h"
#include "replay/store_run.h"
#include "trace/reader.h"

namespace braid::replay {
namespace {

using namespace braid::replay::testing;

MpiExecutor& executor() {
  static MpiExecutor ex;
  return ex;
}
int world() { return executor().process_count(); }

const std::vector<std::string> kPresets = {"tp-sp", "tp-ep", "pp-ep", "pp-sp", "sp-ep"};

AbOptions fast_ab() {
  AbOptions o;
  o.steps = 2;
  o.warmup = 1;
  o.replay.timeout_ns = 60'000'000'000;
  o.model = analysis::CostModel(*analysis::find_profile("cpu-shm"));
  return o;
}

TEST(Mpi, EveryCollectiveKindEqualsTheInterpreter) {
  fusion::Schedule s = world() == 4 ? fusion::testing::four_rank_schedule()
                                    : allreduce_pair(true, world(), 8 * world());
  DataCheck d = check_against_interpreter(executor(), s, {});
  EXPECT_TRUE(d.ok()) << (d.first.empty() ? "" : d.first[0].buffer);
  EXPECT_GT(d.elements, 0);
}

TEST(Mpi, PresetsReplayAndFusedFormsPassTheDataCheck) {
  int ran = 0;
  for (const std::string& name : kPresets) {
    auto [m, l] = tiny_preset(name);
    if (l.world() != world()) continue;
    for (const Pair& p : fused_pairs({name})) {
      SCOPED_TRACE(p.what);
      AbReport r = run_ab(executor(), p.baseline, p.fused, fast_ab());
      EXPECT_TRUE(r.data.ok()) << r.data.mismatches << " mismatches";
      EXPECT_TRUE(r.oracle_baseline.ok());
      EXPECT_TRUE(r.oracle_fused.ok());
      EXPECT_GT(r.data.elements, 0);
      if (executor().reporting()) {
        EXPECT_EQ(r.baseline_ns.size(), 2u);
        EXPECT_GT(r.baseline_median, 0);
        EXPECT_GT(r.fused_median, 0);
      }
      ++ran;
    }
    // The baseline alone equals the interpreter.
    DataCheck d = check_against_interpreter(executor(), synth_tiny(name), {});
    EXPECT_TRUE(d.ok());
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no preset with a world of " << world();
}

// coc's Reduce-Scatter and All-Gather rewrites run their chunks as rooted Reduces and
// Broadcasts on a second stream: on MPI they compute the same buffers as the unsplit pair.
TEST(Mpi, CocChunksOfReduceScatterAndAllGatherPassTheDataCheck) {
  const int t = world();
  for (fusion::Schedule s : {fusion::testing::gemm_reducescatter(t, 8 * t, 2'000'000),
                             fusion::testing::gemm_reducescatter(t, 8 * t, 2'000'000, true),
                             fusion::testing::allgather_gemm(t, 8 * t, 2'000'000)}) {
    SCOPED_TRACE(s.name);
    auto fs = fusion::find_pass("coc")->find(s, fusion::testing::slow_links());
    ASSERT_EQ(fs.size(), 1u);
    fusion::Schedule fused = s;
    fusion::find_pass("coc")->apply(fused, fs[0]);
    AbReport r = run_ab(executor(), s, fused, fast_ab());
    EXPECT_TRUE(r.data.ok()) << r.data.mismatches << " mismatches";
    EXPECT_TRUE(r.oracle_fused.ok());
    EXPECT_GT(r.data.elements, 0);
  }
}

TEST(Mpi, BrokenRewriteFailsTheDataCheckOnTheRankItBroke) {
  fusion::Schedule base = world() == 4 ? synth_tiny("tp-sp") : synth_tiny("pp-sp");
  int32_t rank = -1;
  fusion::Schedule broken = broken_rewrite(base, &rank);
  ASSERT_FALSE(broken.ranks.empty());
  AbReport r = run_ab(executor(), base, broken, fast_ab());
  EXPECT_FALSE(r.data.ok());
  EXPECT_GT(r.data.mismatches, 0);
  // The broken replay is still faithful to the interpreter: the rewrite is wrong, not the replay.
  EXPECT_TRUE(r.oracle_fused.ok());
  if (executor().reporting()) {
    ASSERT_FALSE(r.data.first.empty());
    bool on_rank = false;
    for (const Mismatch& m : r.data.first) on_rank |= m.rank == rank;
    EXPECT_TRUE(on_rank || r.data.first[0].rank >= 0);
  }
}

TEST(Mpi, StoredRunHoldsEveryRank) {
  fusion::Schedule s = allreduce_pair(true, world(), 8 * world());
  std::string path = "/tmp/braid-replay-mpi-test-" + std::to_string(world()) + ".braid";
  int64_t id = -1;
  if (executor().reporting()) {
    std::remove(path.c_str());
    id = fusion::store_schedule(path, s, -1, "[]", true);
  }
  auto p = executor().prepare(s, {});
  p->run_step(true);
  p->run_step(true);
  ReplayResult r = p->collect();
  if (executor().reporting()) {
    ASSERT_EQ(r.steps.size(), 2u);
    ASSERT_EQ(r.ranks.size(), static_cast<size_t>(world()));
    for (int32_t k = 0; k < world(); ++k) {
      EXPECT_EQ(r.steps[0].ranks[k].size(), 4u);  // compute, RS, AG, compute
      // Compute ops take at least their recorded duration.
      for (const OpTime& t : r.steps[0].ranks[k])
        if (t.op_id == s.ranks[k].streams[0].ops[0].id) {
          EXPECT_GE(t.end - t.start, 200'000);
        }
    }
    auto ids = store_runs(path, {&s}, {&r}, {RunDescription{path, "mpi test", id}});
    TraceReader reader(path);
    EXPECT_EQ(reader.runs().back().kind, RunKind::Replayed);
    EXPECT_EQ(reader.runs().back().backend, "mpi");
    EXPECT_EQ(reader.ranks(ids[0]).size(), static_cast<size_t>(world()));
    int colls = 0;
    reader.collectives(ids[0], [&](const Collective&) { return ++colls, true; });
    EXPECT_EQ(colls, 2 * 2 * world());
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace braid::replay

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  braid::replay::executor();  // MPI_Init before any test
  if (braid::replay::executor().process_index() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}

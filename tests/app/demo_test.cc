// `braid demo`: the whole pipeline on its built-in default, checked through what it leaves in
// the file: the synthesized and the fused schedule, the passes' findings, the simulated runs of
// both, the analysis of the baseline (with the TP communicator recognized), and no temporary
// file left behind. The mpi stage and the picture have their own tests (tests/replay,
// tests/view); here they are switched off to keep the suite fast.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

TEST(Demo, WholePipelineLandsInOneFile) {
  test::TempDir tmp;
  std::string out = tmp.file("demo.braid");
  test::CliResult run = test::run_braid(tmp, "demo --no-mpi --no-picture -o " + out);
  const std::string& text = run.out;
  ASSERT_EQ(run.code, 0) << text << run.err;
  EXPECT_THAT(text, HasSubstr("== 1. synthesize"));
  EXPECT_THAT(text, HasSubstr("== 3. A/B on the simulator"));
  EXPECT_THAT(text, HasSubstr("everything is in " + out));

  TraceReader r(out);
  auto q = [&](const char* sql) { return sql::scalar(r.db(), sql, -1); };
  // The synthesized step and the two real jobs' lifted steps, each with its fused schedule.
  EXPECT_EQ(q("SELECT COUNT(*) FROM schedules WHERE parent_id IS NULL"), 3);
  EXPECT_EQ(q("SELECT COUNT(*) FROM schedules WHERE parent_id IS NOT NULL"), 3);
  // The TP+SP rewrite fired and predicts a saving.
  EXPECT_GT(q("SELECT COUNT(*) FROM opportunities WHERE pass = 'tp-sp'"), 0);
  EXPECT_GT(q("SELECT SUM(predicted_saving_ns) FROM opportunities"), 0);
  // Baseline and fused simulated, each run tied to its schedule.
  EXPECT_EQ(q("SELECT COUNT(DISTINCT schedule_id) FROM runs WHERE kind = 'simulated'"), 6);
  // The real 2-rank trace (assets/traces/hta-dlrm): imported, lifted from its step 552, fused and
  // A/B'd on the sim with the baseline's fidelity printed; and the real 4-rank job with its
  // execution traces (assets/traces/et-tp): tp-sp applied as a fact, its fused pair's data checked.
  EXPECT_EQ(q("SELECT COUNT(*) FROM runs WHERE kind = 'imported'"), 2);
  EXPECT_GT(q("SELECT COUNT(*) FROM et_ops WHERE joined_by != 'none'"), 600);
  EXPECT_THAT(text, HasSubstr("== 14. lift it with the data flow of its execution traces"));
  EXPECT_THAT(text, ::testing::ContainsRegex("tp-sp +ranks 0,1,2,3 +applied"));
  EXPECT_THAT(text, HasSubstr("aten::add reads elements"));
  EXPECT_THAT(text, HasSubstr("== 9. lift its profiler step 552"));
  EXPECT_THAT(text, HasSubstr("baseline fidelity vs run"));
  EXPECT_THAT(text, HasSubstr("median replayed/original over ranks: "));
  EXPECT_GT(q("SELECT COUNT(*) FROM kernels k JOIN runs USING (run_id) WHERE runs.kind = 'simulated'"), 0);
  // The analysis of the simulated baseline is stored, and its TP communicator recognized.
  EXPECT_GT(q("SELECT COUNT(*) FROM analysis_ranks"), 0);
  EXPECT_GT(q("SELECT COUNT(*) FROM analysis_communicators WHERE parallel_dim = 'TP'"), 0);
  // Built in a temporary file, renamed at the end.
  for (auto& e : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".tmp-")));
}

}  // namespace
}  // namespace braid

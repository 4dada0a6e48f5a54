// `braid analyze` rank by rank and a batch of steps at a time (analysis/stream.h) gives what the
// analysis of the whole run in memory gives, to the nanosecond (the JSON report, every field),
// on real traces (HTA's GPU traces with NCCL, one whose GPU runs far behind the host; gloo's
// host-only collectives) and synthetic jobs, with batches of one step, a few, and all; and a run
// larger than the memory this process may use is analyzed streamed instead of refused.
#include "analysis/stream.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/synthetic.h"
#include "trace/error.h"
#include "trace/test_util.h"
#include "trace/writer.h"

namespace braid::analysis {
namespace {

struct Input {
  const char* name;
  std::vector<std::string> files;  // imported together; empty: a synthetic job
};

std::string hta(const std::string& rel) { return test::traces("hta/tests/data/" + rel); }
std::string gloo(int r) {
  return std::string(BRAID_TEST_DATA_DIR) + "/gloo_straggler/rank-" + std::to_string(r) +
         ".json.gz";
}

const std::vector<Input>& inputs() {
  static const std::vector<Input> v = {
      {"nccl_data", {hta("nccl_parser_config/nccl_data.json.gz")}},
      {"trace_diff_control", {hta("trace_diff/control/control.json.gz")}},
      {"trace_filter",
       {hta("trace_filter/sampled_rank-0.json.gz"), hta("trace_filter/sampled_rank-1.json.gz")}},
      {"negative_queue", {hta("negative_queue_length_values_check/rank0.json.gz")}},
      {"gloo_straggler", {gloo(0), gloo(1), gloo(2), gloo(3)}},
      {"synthetic", {}},
  };
  return v;
}

std::string file_of(const Input& in, test::TempDir& tmp) {
  const std::string f = tmp.file("t.braid");
  if (in.files.empty()) {
    SyntheticJob job;
    job.nranks = 4;
    job.steps = 12;
    job.clock_skew = {0, 5'500'000, 37'123, -250};
    job.end_jitter = 300;
    write_synthetic_job(f, job);
  } else {
    test::import_files(in.files, f);
  }
  return f;
}

class Streamed : public ::testing::TestWithParam<Input> {};

TEST_P(Streamed, GivesWhatTheWholeRunInMemoryGives) {
  test::TempDir tmp;
  TraceReader reader(file_of(GetParam(), tmp));
  AnalyzeOptions whole;
  whole.stream = 0;
  const Analysis a = analyze(reader, whole);
  const std::string expected = report_json(a);
  ASSERT_FALSE(a.paths.empty());
  for (int64_t batch : {int64_t{1}, int64_t{5'000}, int64_t{1} << 40}) {
    SCOPED_TRACE("batch_ops " + std::to_string(batch));
    AnalyzeOptions opt;
    opt.stream = 1;
    opt.batch_ops = batch;
    // What it says as it goes: every rank, then the steps, up to all of them.
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> told;
    opt.progress = [&](std::string_view what, int64_t done, int64_t total) {
      told[std::string(what)].push_back({done, total});
    };
    EXPECT_EQ(report_json(analyze(reader, opt)), expected);
    ASSERT_EQ(told.size(), 2u);
    EXPECT_EQ(told["ranks"].back(),
              std::make_pair(int64_t(a.ranks.size()), int64_t(a.ranks.size())));
    EXPECT_EQ(told["ranks"].size(), a.ranks.size() + 1);
    EXPECT_EQ(told["steps"].back(),
              std::make_pair(int64_t(a.paths.size()), int64_t(a.paths.size())));
    if (batch == 1) {
      EXPECT_EQ(told["steps"].size(), a.paths.size() + 1);  // one step a batch
    } else if (batch == int64_t{1} << 40) {
      EXPECT_EQ(told["steps"].size(), 2u);  // all in one
    }
  }
  // One step, and HTA's window.
  const int64_t step = a.paths.size() > 1 ? a.paths[a.paths.size() / 2].step : -1;
  for (bool hta_compat : {false, true}) {
    AnalyzeOptions one = whole;
    one.step = hta_compat ? -1 : step;
    one.hta_compat = hta_compat;
    const std::string want = report_json(analyze(reader, one));
    one.stream = 1;
    one.batch_ops = 1;
    EXPECT_EQ(report_json(analyze(reader, one)), want) << "step " << one.step;
  }
}

INSTANTIATE_TEST_SUITE_P(Traces, Streamed, ::testing::ValuesIn(inputs()),
                         [](const ::testing::TestParamInfo<Input>& i) {
                           return std::string(i.param.name);
                         });

// A step whose GPU work has no correlation ids and no launch call in its window, on a rank that has
// launch calls elsewhere: work there whose launch the trace lacks is in no step (the rank's
// launch index is not empty: strip_rank keeps its mark), in a window as in the whole rank.
TEST(StreamedWindows, ARankWithLaunchesElsewhereKeepsUnlaunchedWorkOutOfTheStep) {
  test::TempDir tmp;
  const std::string f = tmp.file("w.braid");
  const Ns us = 1000;
  {
    TraceWriter w(f, TraceWriter::Mode::Create);
    const int64_t run = w.begin_run(RunKind::Imported, "test");
    const StrId gemm = w.intern("sm90_gemm"), launch = w.intern("cudaLaunchKernel");
    for (int32_t r = 0; r < 2; ++r) {
      RankInfo info;
      info.rank = r;
      info.world_size = 2;
      w.add_rank(run, info);
      w.add_stream(run, {r, 7, true, ""});
      for (int64_t s = 0; s < 2; ++s) w.add_step(run, {r, s, s * 1000 * us, (s + 1) * 1000 * us});
      // Step 0: launched kernels (correlation ids and their calls).
      for (int k = 0; k < 3; ++k) {
        const Ns at = (100 + 200 * k) * us;
        w.add(run, ApiCall{r, 1, at, at + 5 * us, launch, ApiKind::Runtime, 10 + k, 0});
        w.add(run, Kernel{r, 7, at + 20 * us, at + 120 * us, gemm, Category::Gemm, 10 + k, 0});
      }
      // Step 1: kernels with no correlation id (their own starts place them) around one whose
      // launch the trace lacks (in no step).
      w.add(run, Kernel{r, 7, 1100 * us, 1300 * us, gemm, Category::Gemm, 0, 0});
      w.add(run, Kernel{r, 7, 1310 * us, 1330 * us, gemm, Category::Gemm, 99, 0});
      w.add(run, Kernel{r, 7, 1331 * us, 1500 * us, gemm, Category::Gemm, 0, 0});
    }
    w.commit();
  }
  TraceReader reader(f);
  AnalyzeOptions whole;
  whole.stream = 0;
  const std::string expected = report_json(analyze(reader, whole));
  AnalyzeOptions opt;
  opt.stream = 1;
  opt.batch_ops = 1;
  EXPECT_EQ(report_json(analyze(reader, opt)), expected);
}

// A batch of steps holds one step of every rank at least: the estimate of what streaming holds
// counts a run's longest steps, so that a run of a few long steps (100 M events in 10 steps a
// rank) is not streamed under a budget one step of every rank breaks.
TEST(StreamedMemory, TheEstimateHoldsOneStepOfEveryRank) {
  test::TempDir tmp;
  const Ns us = 1000;
  constexpr int kRanks = 4, kOps = 40'000;  // a rank's kernels, in `steps` steps
  auto write = [&](const std::string& f, int steps) {
    TraceWriter w(f, TraceWriter::Mode::Create);
    const int64_t run = w.begin_run(RunKind::Imported, "test");
    const StrId gemm = w.intern("sm90_gemm");
    for (int32_t r = 0; r < kRanks; ++r) {
      RankInfo info;
      info.rank = r;
      info.world_size = kRanks;
      w.add_rank(run, info);
      w.add_stream(run, {r, 7, true, ""});
      const Ns step_ns = Ns{kOps} * us / steps;
      for (int64_t s = 0; s < steps; ++s) w.add_step(run, {r, s, s * step_ns, (s + 1) * step_ns});
      for (int k = 0; k < kOps; ++k)
        w.add(run, Kernel{r, 7, k * us, k * us + us / 2, gemm, Category::Gemm, 0, 0});
    }
    w.commit();
    return run;
  };
  const std::string few = tmp.file("few.braid"), many = tmp.file("many.braid");
  const int64_t run_few = write(few, 2), run_many = write(many, 400);
  TraceReader rf(few), rm(many);
  AnalyzeOptions opt;
  opt.batch_ops = 1'000;
  // One step of every rank: half the run's kernels, each in a window and a timeline.
  const int64_t one_step = int64_t{kRanks} * kOps / 2 * static_cast<int64_t>(sizeof(Kernel));
  // The two runs differ only in their steps' length: the estimate by one step of every rank.
  EXPECT_GE(streamed_bytes(rf, run_few, opt) - streamed_bytes(rm, run_many, opt), one_step);
  // Both stream to the whole run's result.
  for (auto [reader, run] : {std::pair{&rf, run_few}, std::pair{&rm, run_many}}) {
    AnalyzeOptions whole;
    whole.stream = 0;
    AnalyzeOptions streamed = opt;
    streamed.stream = 1;
    EXPECT_EQ(report_json(analyze(*reader, streamed)), report_json(analyze(*reader, whole)));
  }
}

// A run whose whole load is over the memory budget (BRAID_MEMORY_LIMIT_MB) but whose collectives,
// one rank and one batch are under it: analyze() streams it (by itself) and gives what a
// process with room gives; under a budget too small even for that, one line says how much.
TEST(StreamedMemory, ARunLargerThanTheBudgetIsStreamedNotRefused) {
  test::TempDir tmp;
  SyntheticJob job;
  job.nranks = 16;
  job.steps = 2000;
  const std::string f = tmp.file("big.braid");
  const int64_t run = write_synthetic_job(f, job);
  TraceReader reader(f);
  const int64_t whole_mib = load_bytes(reader, run) >> 20;
  ASSERT_GE(whole_mib, 8);
  AnalyzeOptions opt;
  opt.stream = 0;
  const std::string expected = report_json(analyze(reader, opt));

  AnalyzeOptions automatic;
  automatic.batch_ops = 10'000;
  const int64_t streamed_mib = streamed_bytes(reader, run, automatic) >> 20;
  ASSERT_LT(streamed_mib + 2, whole_mib);
  const std::string budget = std::to_string((streamed_mib + whole_mib) / 2);
  ASSERT_EQ(setenv("BRAID_MEMORY_LIMIT_MB", budget.c_str(), 1), 0);
  try {
    analyze(reader, opt);
    ADD_FAILURE() << "the whole run loaded under " << budget << " MiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
  EXPECT_TRUE(streams(reader, run, automatic));
  EXPECT_EQ(report_json(analyze(reader, automatic)), expected);

  ASSERT_EQ(setenv("BRAID_MEMORY_LIMIT_MB", "1", 1), 0);
  try {
    analyze(reader, automatic);
    ADD_FAILURE() << "analyzed under 1 MiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(f + ": run " + std::to_string(run) + " has ", 0), 0u) << m;
    EXPECT_NE(m.find("rank by rank needs about"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  ASSERT_EQ(unsetenv("BRAID_MEMORY_LIMIT_MB"), 0);
}

}  // namespace
}  // namespace braid::analysis

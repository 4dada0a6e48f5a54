// braid-view's explorer and replay runner, without a display: explore() on a preset gives the
// pipeline's and the sim's numbers for a choice of findings and writes them as runs; the
// Explorer runs in the background and can be cancelled; ChildProcess runs, reports and ends
// whole process groups; `braid ab`'s output is read back.
#include "app/view/core/explore.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "app/view/core/child.h"
#include "app/view/core/loader.h"
#include "fusion/pass_schedules.h"
#include "fusion/schedule_store.h"
#include "replay/host_calibration.h"
#include "replay/sim.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/test_util.h"
#include "trace/writer.h"
#include "view/process_group.h"

namespace braid::view {
namespace {

std::string preset_file(const test::TempDir& dir, const std::string& preset) {
  const std::string path = dir.file(preset + ".braid");
  fusion::store_schedule(path, fusion::testing::preset_at_test_shape(preset), -1, "[]", true);
  return path;
}

// Starts `ex` on a new file of `preset` in `dir`; returns its request.
ExploreRequest start_on_preset(Explorer& ex, const test::TempDir& dir, const std::string& preset) {
  ExploreRequest req;
  req.path = preset_file(dir, preset);
  ex.start(req);
  return req;
}

Ns sim_step(const fusion::Schedule& s, const std::string& profile) {
  const replay::SimProfile sp = replay::load_sim_profile(profile);
  return replay::simulate(s, analysis::CostModel(sp.profile), sp.sim_options()).step_ns();
}

TEST(ViewExplore, APresetsFindingsAndTheirSimulatedSteps) {
  test::TempDir dir;
  const std::string path = preset_file(dir, "tp-sp");
  ExploreRequest req;
  req.path = path;
  const ExploreResult r = explore(req, dir.file("scratch.braid"));
  EXPECT_EQ(r.schedule_id, default_root_schedule(path));
  EXPECT_EQ(r.profile, "h100-nvlink");
  ASSERT_FALSE(r.pipeline.applied.empty());
  // Applied findings first, ticked; the rest unticked.
  size_t applied = 0;
  for (const ExploreFinding& f : r.findings) {
    applied += f.status == ExploreFinding::Status::Applied;
    EXPECT_EQ(f.ticked, f.status == ExploreFinding::Status::Applied);
  }
  EXPECT_EQ(applied, r.pipeline.applied.size());
  // The numbers are the sim's for the baseline and for the fused schedule.
  const fusion::Schedule base = fusion::load_stored_schedule(path, r.schedule_id);
  EXPECT_EQ(r.baseline_step_ns(), sim_step(base, "h100-nvlink"));
  EXPECT_EQ(r.fused_step_ns(), sim_step(r.pipeline.schedule, "h100-nvlink"));
  EXPECT_LT(r.fused_step_ns(), r.baseline_step_ns());
  // The scratch file holds both schedules (fused: parent the baseline) and a simulated run of
  // each, which the loader reads with the sim's step.
  const auto sch = fusion::list_schedules(r.scratch);
  ASSERT_EQ(sch.size(), 2u);
  EXPECT_EQ(sch[1].parent_id, sch[0].id);
  auto b = load_view_run(r.scratch, r.baseline_run);
  auto f = load_view_run(r.scratch, r.fused_run);
  EXPECT_EQ(b->run.kind, RunKind::Simulated);
  EXPECT_EQ(f->run.schedule_id, sch[1].id);
  EXPECT_GT(b->end - b->start, f->end - f->start);
  // The open file is untouched.
  EXPECT_EQ(fusion::list_schedules(path).size(), 1u);
}

TEST(ViewExplore, DeselectingAFindingChangesTheFusedStepAndSaveStoresTheChoice) {
  test::TempDir dir;
  Explorer ex;
  const std::string path = start_on_preset(ex, dir, "tp-sp").path;
  ex.wait();
  ASSERT_TRUE(ex.result()) << ex.error();
  const Ns all = ex.result()->fused_step_ns();
  std::vector<ExploreFinding> fs = ex.result()->findings;
  ASSERT_FALSE(fs.empty());
  ASSERT_EQ(fs[0].status, ExploreFinding::Status::Applied);
  const fusion::FindingKey key = fs[0].key;
  fs[0].ticked = false;
  ex.choose(fs);
  EXPECT_TRUE(ex.busy());
  ex.wait();
  ASSERT_TRUE(ex.result()) << ex.error();
  EXPECT_EQ(ex.request().skip.count(key), 1u);
  const ExploreResult& r = *ex.result();
  EXPECT_GT(r.fused_step_ns(), all);  // one rewrite fewer: a longer step
  bool listed = false;
  for (const ExploreFinding& f : r.findings)
    if (f.key == key) {
      listed = true;
      EXPECT_EQ(f.status, ExploreFinding::Status::Deselected);
      EXPECT_FALSE(f.ticked);
    }
  EXPECT_TRUE(listed);
  // Save: the fused schedule of this choice, parent the root, with its opportunities.
  const int64_t id = ex.save();
  const fusion::Schedule saved = fusion::load_stored_schedule(path, id);
  EXPECT_EQ(sim_step(saved, "h100-nvlink"), r.fused_step_ns());
  bool parent_ok = false;
  for (const auto& st : fusion::list_schedules(path))
    if (st.id == id) parent_ok = st.parent_id == r.schedule_id;
  EXPECT_TRUE(parent_ok);
  size_t deselected = 0, pipeline = 0;
  for (const auto& o : fusion::list_opportunities(path, id)) {
    deselected += o.detail.find("deselected") != std::string::npos;
    pipeline += o.pass == "pipeline";
  }
  EXPECT_EQ(deselected, 1u);
  EXPECT_EQ(pipeline, 1u);
  // Ticking it again gives the first result back.
  std::vector<ExploreFinding> again = r.findings;
  for (ExploreFinding& f : again)
    if (f.key == key) f.ticked = true;
  ex.choose(again);
  ex.wait();
  ASSERT_TRUE(ex.result());
  EXPECT_EQ(ex.result()->fused_step_ns(), all);
  EXPECT_TRUE(ex.request().skip.empty());
}

TEST(ViewExplore, ANewChoiceCancelsTheRunInFlightAndAFileWithoutScheduleSaysSo) {
  test::TempDir dir;
  Explorer ex;
  const ExploreRequest req = start_on_preset(ex, dir, "tp-pp");
  ex.start(req);  // the first is cancelled, never shown
  ex.wait();
  ASSERT_TRUE(ex.result()) << ex.error();
  // Cancelled before its first round: an error, the last result stays.
  std::atomic<bool> cancel{true};
  EXPECT_THROW(explore(req, dir.file("c.braid"), &cancel), Error);

  // A run and no schedule.
  ExploreRequest none;
  none.path = dir.file("empty.braid");
  {
    TraceWriter w(none.path, TraceWriter::Mode::Create);
    w.commit();
  }
  try {
    explore(none, dir.file("x.braid"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("braid lift"), std::string::npos) << e.what();
  }
}

TEST(ViewExplore, TickedAdviceIsAppliedUnderItsAssumption) {
  // A real trace lifted (HTA's DLRM job): compute is opaque, tp-sp's findings are
  // advice the pass can rewrite.
  test::TempDir dir;
  const std::string job = dir.file("job.braid");
  const std::string assets = std::string(BRAID_TESTS_DATA_ROOT) + "/assets/traces/hta-dlrm";
  const std::string cli = std::string(BRAID_CLI) + " ";
  ASSERT_EQ(
      std::system((cli + "import " + assets + "/rank-0.json.gz " + assets + "/rank-1.json.gz -o " +
                   job + " > /dev/null && " + cli + "lift " + job + " > /dev/null")
                      .c_str()),
      0);
  Explorer ex;
  ExploreRequest req;
  req.path = job;
  ex.start(req);
  ex.wait();
  ASSERT_TRUE(ex.result()) << ex.error();
  std::vector<ExploreFinding> fs = ex.result()->findings;
  size_t advice = 0, pick = fs.size();
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i].status == ExploreFinding::Status::Advice && fs[i].can_assume) {
      ++advice;
      if (pick == fs.size() && fs[i].local_saving_ns > 0) pick = i;
    }
  ASSERT_GE(advice, 1u);
  ASSERT_LT(pick, fs.size());
  const fusion::FindingKey key = fs[pick].key;
  fs[pick].ticked = true;
  ex.choose(fs);
  ex.wait();
  ASSERT_TRUE(ex.result()) << ex.error();
  // That one finding applied (assumed), the rest of the pass's advice not.
  size_t applied = 0;
  for (const ExploreFinding& f : ex.result()->findings) {
    if (f.status != ExploreFinding::Status::Applied) continue;
    ++applied;
    EXPECT_EQ(f.key, key);
    EXPECT_TRUE(f.assumed);
  }
  EXPECT_EQ(applied, 1u);
  // Saved, the fused schedule names its assumption, as braid fuse --assume stores it.
  const int64_t id = ex.save();
  EXPECT_EQ(fusion::assumed_rewrites(fusion::load_stored_schedule(job, id)).size(), 1u);
}

TEST(ViewChild, ExitStatusLogAndAProgramThatDoesNotExist) {
  ChildProcess ok({"sh", "-c", "echo out; echo err >&2; exit 3"});
  while (!ok.finished()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(ok.exit_status(), 3);
  EXPECT_NE(ok.log().find("out\n"), std::string::npos);
  EXPECT_NE(ok.log().find("err\n"), std::string::npos);
  ChildProcess missing({"/nonexistent/braid", "ab"});
  while (!missing.finished()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(missing.exit_status(), 127);
  EXPECT_NE(missing.log().find("cannot run /nonexistent/braid"), std::string::npos);
}

TEST(ViewChild, CancelEndsTheWholeProcessGroup) {
  // A shell with a child of its own in the background, as mpirun has its ranks.
  ChildProcess c({"sh", "-c", "sleep 100 & echo started; wait"});
  while (c.log().find("started") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const pid_t group = c.pid();
  EXPECT_EQ(kill(-group, 0), 0);
  c.cancel();
  const auto t0 = std::chrono::steady_clock::now();
  while (!c.finished()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  EXPECT_TRUE(c.cancelled());
  EXPECT_EQ(c.exit_status(), 128 + SIGTERM);
  // Nothing of the group runs any more (the background sleep included).
  for (int i = 0; i < 100 && braid::test::live_in_group(group) > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(braid::test::live_in_group(group), 0);
}

TEST(ViewChild, AbCommandAndItsOutput) {
  AbRequest r;
  r.braid = "/b/braid";
  r.file = "job.braid";
  EXPECT_EQ(shell_line(ab_command(r)), "/b/braid ab job.braid --backend sim --steps 10 --json");
  r.backend = AbBackend::Mpi;
  r.ranks = 4;
  r.fused = 3;
  EXPECT_EQ(shell_line(ab_command(r)),
            "mpirun --oversubscribe --allow-run-as-root -np 4 /b/braid ab job.braid --fused 3 "
            "--backend mpi --steps 10 --json");
  // What `braid ab --json` prints (an mpirun warning before it).
  const AbOutcome o = parse_ab_output(
      "mpirun: a warning\n"
      "{\n  \"baseline_schedule\": 1,\n  \"fused_schedule\": 2,\n  \"speedup\": 1.2500,\n"
      "  \"speedup_p25\": 1.2000,\n  \"speedup_p75\": 1.3000,\n"
      "  \"data_check\": {\"status\": \"passed\", \"fused_vs_baseline\": {\"ok\": true, "
      "\"buffers\": 2, \"elements\": 10, \"mismatches\": 0}},\n"
      "  \"stored_runs\": [3, 4]\n}\n");
  EXPECT_EQ(o.baseline_run, 3);
  EXPECT_EQ(o.fused_run, 4);
  EXPECT_EQ(o.speedup.rfind("speedup 1.250x", 0), 0u);
  EXPECT_EQ(o.data_check.rfind("data check passed", 0), 0u);
  EXPECT_TRUE(o.first_error.empty());
  const AbOutcome bad =
      parse_ab_output("braid: error: job.braid: no schedule 9 (schedules: 1, 2)\n");
  EXPECT_EQ(bad.fused_run, -1);
  EXPECT_EQ(bad.first_error, "braid: error: job.braid: no schedule 9 (schedules: 1, 2)");
}

}  // namespace
}  // namespace braid::view

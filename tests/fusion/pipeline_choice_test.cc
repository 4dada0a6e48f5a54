// A choice of rewrites (PipelineOptions::skip / force, braid-view's explorer): a skipped finding
// is not applied and is reported as deselected, a forced legal one is applied though the
// pipeline would not apply it by itself, the same choice gives the same schedule, and a cancel
// stops the run.
#include <gtest/gtest.h>

#include "fusion/pass_schedules.h"
#include "fusion/pipeline.h"
#include "fusion/synth.h"
#include "replay/fuse.h"
#include "replay/sim.h"
#include "trace/error.h"

namespace braid::fusion {
namespace {

const replay::SimProfile& profile() {
  static const replay::SimProfile sp = replay::load_sim_profile("h100-nvlink");
  return sp;
}

Ns step(const Schedule& s) {
  return replay::simulate(s, analysis::CostModel(profile().profile), profile().sim_options())
      .step_ns();
}

bool has(const std::vector<Finding>& v, const FindingKey& k) {
  for (const Finding& f : v)
    if (key_of(f) == k) return true;
  return false;
}

TEST(PipelineChoice, ASkippedFindingIsNotAppliedAndIsReportedDeselected) {
  const Schedule s = testing::preset_at_test_shape("tp-sp");
  const PipelineResult all = replay::fuse_simulated(s, profile());
  ASSERT_GE(all.applied.size(), 2u);
  EXPECT_EQ(all.fused_step_ns, step(all.schedule));
  const FindingKey k = key_of(all.applied.front());
  PipelineOptions o;
  o.skip = {k};
  const PipelineResult some = replay::fuse_simulated(s, profile(), o);
  EXPECT_FALSE(has(some.applied, k));
  EXPECT_EQ(some.applied.size() + 1, all.applied.size());
  bool reported = false;
  for (const Finding& f : some.advice)
    if (key_of(f) == k) reported = f.summary.find("not applied: deselected") != std::string::npos;
  EXPECT_TRUE(reported);
  EXPECT_EQ(some.fused_step_ns, step(some.schedule));
  EXPECT_GT(some.fused_step_ns, all.fused_step_ns);
  EXPECT_EQ(some.baseline_step_ns, all.baseline_step_ns);
  // The same choice, the same schedule.
  const PipelineResult again = replay::fuse_simulated(s, profile(), o);
  EXPECT_EQ(again.fused_step_ns, some.fused_step_ns);
  EXPECT_EQ(again.applied.size(), some.applied.size());
  // Skipping every applied finding leaves the schedule as it was.
  PipelineOptions none;
  for (const Finding& f : all.applied) none.skip.insert(key_of(f));
  const PipelineResult nothing = replay::fuse_simulated(s, profile(), none);
  EXPECT_TRUE(nothing.applied.empty());
  EXPECT_EQ(nothing.fused_step_ns, nothing.baseline_step_ns);
}

TEST(PipelineChoice, AForcedLegalFindingIsAppliedThoughItDoesNotPay) {
  // Presets with a legal finding the pipeline leaves (no positive saving, or coc not shortening
  // the simulated step): forcing it applies it.
  int forced = 0;
  for (const std::string& name : preset_names()) {
    const Schedule s = testing::preset_at_test_shape(name);
    const PipelineResult r = replay::fuse_simulated(s, profile());
    for (const Finding& f : r.advice) {
      if (!f.legal) continue;
      PipelineOptions o;
      o.force = {key_of(f)};
      const PipelineResult g = replay::fuse_simulated(s, profile(), o);
      EXPECT_TRUE(has(g.applied, key_of(f))) << name << ": " << f.summary;
      EXPECT_EQ(g.fused_step_ns, step(g.schedule));
      ++forced;
      break;
    }
  }
  EXPECT_GT(forced, 0);
}

TEST(PipelineChoice, ACancelStopsTheRun) {
  const Schedule s = testing::preset_at_test_shape("tp-sp");
  std::atomic<bool> cancel{true};
  std::vector<size_t> passes;
  PipelineOptions o;
  o.cancel = &cancel;
  o.progress = [&](size_t i, size_t) { passes.push_back(i); };
  EXPECT_THROW(replay::fuse_simulated(s, profile(), o), Error);
  EXPECT_EQ(passes.size(), 1u);  // told of the first pass, stopped before its first round
}

}  // namespace
}  // namespace braid::fusion

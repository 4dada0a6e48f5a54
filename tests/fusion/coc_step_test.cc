// coc judged by the simulated step, and the pipeline's prediction (issue 22): at the TP+PP
// shape of Chimera's experiments on 8 RTX 4080s over PCIe, coc chunks each GEMM-collective pair
// at most once, only where the simulated step gets shorter, and the pipeline stops at a fixed
// point; the prediction is the simulated difference of the input and the fused schedule.
#include <gtest/gtest.h>

#include "analysis/hardware.h"
#include "fusion/pass_schedules.h"
#include "fusion/pipeline.h"
#include "fusion/synth.h"
#include "replay/sim.h"

namespace braid::fusion {
namespace {

analysis::CostModel rtx4080() {
  return analysis::CostModel(
      analysis::load_profile(std::string(BRAID_PROFILES_DIR) + "/rtx4080-pcie4.json"));
}

PipelineOptions with_sim(const analysis::CostModel& cm) {
  PipelineOptions o;
  o.step_ns = [&cm](const Schedule& x) { return replay::simulate(x, cm).step_ns(); };
  return o;
}

size_t applied(const PipelineResult& r, const std::string& pass) {
  size_t n = 0;
  for (const Finding& f : r.applied) n += f.pass == pass;
  return n;
}

TEST(CocByStep, TpPpAtChimeraShapeIsBoundedAndReachesAFixedPoint) {
  const analysis::CostModel cm = rtx4080();
  const Preset p = testing::preset_at_chimera_shape("tp-pp");
  const Schedule s = synthesize(p.model, p.layout, cm);
  const PipelineResult r = run_pipeline(s, cm, with_sim(cm));
  EXPECT_TRUE(r.fixed_point);
  const size_t coc = applied(r, "coc");
  EXPECT_GT(coc, 0u);   // on PCIe the TP collectives are worth pipelining
  EXPECT_LE(coc, 64u);  // each pair once (was 10,662 applications, chunks of chunks)
  for (size_t i = 0; i < r.passes.size(); ++i) {
    if (r.passes[i] == "coc") {
      EXPECT_EQ(r.rounds[i], 2);
    }
  }
  // The prediction is the simulation's difference, and the rewrites make the step shorter.
  const Ns a = replay::simulate(s, cm).step_ns(), b = replay::simulate(r.schedule, cm).step_ns();
  EXPECT_EQ(r.baseline_step_ns, a);
  EXPECT_EQ(r.fused_step_ns, b);
  EXPECT_EQ(r.predicted_saving_ns(), a - b);
  EXPECT_GT(a, b);
  // Every applied coc finding shortened the step: coc alone on the baseline, judged one by one,
  // never leaves a step longer than without it.
  PipelineOptions only = with_sim(cm);
  only.passes = {"coc"};
  const PipelineResult c = run_pipeline(s, cm, only);
  EXPECT_LT(c.fused_step_ns, c.baseline_step_ns);
  EXPECT_EQ(applied(c, "coc") + 0, c.applied.size());
}

// Without a step shortened, nothing is applied: a simulator that charges every extra stream
// (coc's chunks run on one) leaves coc's findings as skipped advice.
TEST(CocByStep, NotAppliedWhenTheSimulatedStepDoesNotGetShorter) {
  Schedule s = testing::gemm_allreduce(2, 64, 2'000'000);
  const analysis::CostModel cm = testing::slow_links();
  PipelineOptions o;
  o.passes = {"coc"};
  o.step_ns = [&cm](const Schedule& x) {
    size_t streams = 0;
    for (const auto& r : x.ranks) streams += r.streams.size();
    return replay::simulate(x, cm).step_ns() + static_cast<Ns>(streams) * 1'000'000'000;
  };
  const PipelineResult r = run_pipeline(s, cm, o);
  EXPECT_TRUE(r.applied.empty());
  ASSERT_EQ(r.advice.size(), 1u);
  EXPECT_TRUE(r.advice[0].legal);
  EXPECT_NE(r.advice[0].summary.find("not applied: the simulated step does not get shorter"),
            std::string::npos);
  EXPECT_EQ(r.predicted_saving_ns(), 0);
  // The same finding is applied with the plain simulator.
  o.step_ns = [&cm](const Schedule& x) { return replay::simulate(x, cm).step_ns(); };
  EXPECT_EQ(run_pipeline(s, cm, o).applied.size(), 1u);
}

// The shipped profiles load; the RTX 4080 one has the numbers of the shared profile of issue 22,
// the NVLink ones the vendor figures their README cites.
TEST(Profiles, ShippedProfilesLoadWithTheirSourcedNumbers) {
  const std::string dir = BRAID_PROFILES_DIR;
  const auto rtx = analysis::load_profile(dir + "/rtx4080-pcie4.json");
  const auto shared =
      analysis::load_profile(std::string(BRAID_TRACES_DIR) + "/../profiles/rtx4080-pcie4.json");
  EXPECT_EQ(analysis::profile_to_json(rtx), analysis::profile_to_json(shared));
  EXPECT_EQ(rtx.intra_node.bandwidth_gbps, 22);
  EXPECT_EQ(rtx.intra_node.latency_ns, 8000);
  const auto a100 = analysis::load_profile(dir + "/a100-nvlink.json");
  EXPECT_EQ(a100.name, "a100-sxm4-nvlink");
  EXPECT_EQ(a100.intra_node.bandwidth_gbps, 300);
  EXPECT_EQ(a100.gpu.tflops_16bit, 312);
  const auto h100 = analysis::load_profile(dir + "/h100-nvlink.json");
  EXPECT_EQ(h100.name, "h100-sxm5-nvlink");
  EXPECT_EQ(h100.intra_node.bandwidth_gbps, 450);
  EXPECT_EQ(h100.gpu.tflops_16bit, 989);
  EXPECT_EQ(h100.gpus_per_node, 8);
}

}  // namespace
}  // namespace braid::fusion

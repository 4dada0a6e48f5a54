// The Chimera rewrites at the shapes of Chimera's experiments on 8 RTX 4080s over PCIe (issue
// 22): the bytes on the wire per rank of the collectives each rewrite replaces and adds, as the
// simulator moves them, agree with the seeds' ring formulas for those collectives within 5%, and
// the rewrite shortens the simulated step (docs/fusion.md, "Closed forms side by side").
#include "fusion/chimera_bytes.h"

#include <gtest/gtest.h>

#include "analysis/hardware.h"

namespace braid::fusion {
namespace {

TEST(ChimeraBytes, FormulaAndSimulatorAgreeWithinFivePercentPerPreset) {
  const analysis::CostModel cm(
      analysis::load_profile(std::string(BRAID_PROFILES_DIR) + "/rtx4080-pcie4.json"));
  for (const std::string preset : {"tp-pp", "tp-ep", "sp-ep", "pp-ep", "pp-sp"}) {
    SCOPED_TRACE(preset);
    const testing::ChimeraRow r = testing::chimera_row(preset, cm);
    EXPECT_GT(r.applied, 0u);
    ASSERT_GT(r.formula_before, 0);
    ASSERT_GT(r.formula_after, 0);
    EXPECT_NEAR(r.braid_before, r.formula_before, 0.05 * r.formula_before);
    EXPECT_NEAR(r.braid_after, r.formula_after, 0.05 * r.formula_after);
    EXPECT_LT(r.braid_after, r.braid_before);
    EXPECT_LT(r.comm_after, r.comm_before);
    EXPECT_LT(r.step_after, r.step_before);
  }
}

}  // namespace
}  // namespace braid::fusion

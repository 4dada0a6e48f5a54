#include "replay/fuse.h"

#include "replay/sim.h"

namespace braid::replay {

fusion::PipelineResult fuse_simulated(const fusion::Schedule& s, const SimProfile& sp,
                                      fusion::PipelineOptions opt) {
  const analysis::CostModel cm(sp.profile);
  const SimOptions so = sp.sim_options();
  opt.step_ns = [&cm, so](const fusion::Schedule& x) { return simulate(x, cm, so).step_ns(); };
  return fusion::run_pipeline(s, cm, opt);
}

}  // namespace braid::replay

// The fusion pipeline judged by the sim backend: what `braid fuse` runs, and what braid-view's
// explorer re-runs for each choice of rewrites (docs/fusion.md, "Predicted saving").
#pragma once

#include "fusion/pipeline.h"
#include "replay/host_calibration.h"

namespace braid::replay {

// fusion::run_pipeline on `s` with `opt.step_ns` = the simulated step of `braid replay --backend
// sim --profile P` for the profile `sp` (load_sim_profile(P): calibrated compute costs
// included), so the prediction is the sim backend's difference.
fusion::PipelineResult fuse_simulated(const fusion::Schedule& s, const SimProfile& sp,
                                      fusion::PipelineOptions opt = {});

}  // namespace braid::replay

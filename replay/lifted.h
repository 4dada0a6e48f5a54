// Replaying a schedule lifted from a captured or imported run (fusion::Schedule::lifted): the sim
// prices its collectives with the α-β that `braid analyze` calibrated on that run, per
// communicator, so the lifted baseline reproduces the original's step time (docs/replay.md,
// "Fidelity").
#pragma once

#include <string>

#include "analysis/cost_model.h"
#include "fusion/lift.h"

namespace braid::replay {

struct LiftedModel {
  analysis::CostModel model;
  std::string note;  // one line saying where the communicators' α-β came from
};

// The cost model of `base` with each communicator of run `src.run` of `path` priced as the
// run's stored analysis calibrated it (analysis_communicators); when the run has no stored
// analysis it is analysed (with `base`) and the analysis stored first, as `braid analyze` would.
LiftedModel lifted_cost_model(const std::string& path, const fusion::LiftSource& src,
                              const std::string& base_profile);

// The cost model `braid replay` and `braid ab` run with: lifted_cost_model's for a schedule
// lifted from a run of `path` (src.run >= 0) on the sim without an explicit --profile, else
// `profile`'s (note empty).
LiftedModel replay_cost_model(const std::string& path, const fusion::LiftSource& src,
                              const std::string& backend, bool profile_given,
                              const std::string& profile_name,
                              const analysis::HardwareProfile& profile);

}  // namespace braid::replay

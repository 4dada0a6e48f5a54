// Calibration of the α-β cost model on a trace's own collectives.
//
// Each matched collective gives one sample: its transfer time (end - last arrival, so the
// arrival skew that is not the network's doing is left out), its size n and the number of
// ranks t. Per communicator, α and β solve
//     transfer ≈ α · steps(op, t, algo) + β · wire_factor(op, t, algo) · n
// by least squares weighted by 1 / transfer², i.e. minimizing relative error (small and large
// messages count alike), with α, β ≥ 0. When every sample has the same size the two cannot be
// told apart: α is then taken from the base link and only β fitted (the source says so).
// The algorithm is the sample's own where the trace names it (NCCL kernel names carry RING or
// TREE), else ring, direct for point-to-point and all-to-all.
//
// The error reported is k-fold cross-validated (k = min(5, samples)): the mean of
// |predicted - measured| / measured over held-out samples.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "analysis/clock.h"
#include "analysis/cost_model.h"
#include "analysis/matching.h"

namespace braid::analysis {

struct CalibrationSample {
  CollOp op = CollOp::Unknown;
  int64_t bytes = 0;
  int nranks = 0;
  Algorithm algo = Algorithm::Ring;
  Ns transfer_ns = 0;
};

struct CalibrationOptions {
  int folds = 5;
  int min_samples = 2;  // fewer: the communicator keeps the profile's link
};

// Fits one communicator. `base` supplies α when the sizes do not separate α from β.
// Returns cv_error -1 and samples 0 when there is nothing to fit.
CommCost fit_comm(const std::vector<CalibrationSample>& samples, const LinkCost& base,
                  const CalibrationOptions& opt = {});

// Samples per communicator from a run's complete, consistent groups of known size.
std::map<std::string, std::vector<CalibrationSample>> calibration_samples(const RunData& run,
                                                                          const MatchResult& match,
                                                                          const ClockFit& clocks);

// Calibrates every communicator with enough samples and installs the result in `model`.
std::map<std::string, CommCost> calibrate(const RunData& run, const MatchResult& match,
                                          const ClockFit& clocks, CostModel& model,
                                          const CalibrationOptions& opt = {});

}  // namespace braid::analysis

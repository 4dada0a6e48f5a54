// Clock alignment across ranks, anchored on matched collectives.
//
// A collective completes on all its members at nearly the same instant (the last rank to arrive
// releases everyone), so for every matched group g and member rank r
//     end_rg + offset_r ≈ T_g
// where offset_r maps rank r's clock onto the job axis (job_time = t + offset, as
// ranks.clock_offset_ns) and T_g is the group's common end. The offsets are the least-squares
// solution with T_g eliminated (a graph Laplacian system), with the reference rank (the lowest
// rank of the largest set of ranks linked by groups) fixed at 0.
//
// The fit starts from the steps' boundaries (profilers of a host-only job start at different
// times, so the clocks may differ by far more than a collective lasts) refined by alternating
// medians, and rejects single ends, not whole groups: an end farther from its group's median end
// than max(3 × 1.4826 · MAD of all ends, 2 µs) is left out (a host collective's end is when that
// rank's thread ran again, which a loaded host delays by milliseconds on one rank, not all), and
// the fit is repeated until the kept ends settle. A group left with fewer than two ends is
// dropped. Point-to-point pairs are not anchors (the receive ends after the send). With ranks but
// no two of them linked, nothing is aligned: reference -1, every rank keeps its clock.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/matching.h"

namespace braid::analysis {

struct ClockOptions {
  // A rank is flagged when its residual RMS exceeds both this and 3× the median RMS of ranks.
  double flag_residual_ns = 10'000;
};

struct RankClock {
  int32_t rank = 0;
  Ns offset = 0;           // job_time = t + offset
  Ns error = -1;           // one standard error of the offset; -1 when not aligned
  double residual_rms_ns = 0;  // over all its ends in the aligned set, rejected ones included
  int anchors = 0;             // its ends kept in the fit
  bool aligned = false;    // false: no anchor links it to the reference; clock kept as is
  bool flagged = false;    // residuals far larger than the other ranks'
};

struct ClockFit {
  int32_t reference = -1;        // -1: no two ranks share a matched collective; none aligned
  std::vector<RankClock> ranks;  // by rank
  int anchors_used = 0, anchors_dropped = 0;  // groups with two or more ends kept; the others
  int ends_rejected = 0;                      // ends left out as outliers (dropped groups' too)
  double residual_rms_ns = 0;                 // over the ends kept
  std::vector<Diagnostic> diagnostics;

  const RankClock* rank(int32_t r) const;
  Ns offset(int32_t r) const;  // 0 for an unknown rank
};

ClockFit align_clocks(const RunData& run, const MatchResult& match, const ClockOptions& opt = {});

// Offsets as stored in the file (ranks.clock_offset_ns), for analyses that keep the file's
// clocks instead of solving.
ClockFit stored_clocks(const RunData& run);

}  // namespace braid::analysis

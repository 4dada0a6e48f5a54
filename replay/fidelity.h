// Fidelity of a replay of a captured or imported run: replayed versus original step time per
// rank. For a schedule lifted from that run (fusion::lifted_from) the original is what was
// lifted: the lifted step's `steps` row per rank, or for a whole-run lift the span of the rank's
// GPU activity (kernels and memcpys); schedule rank i is the run's i-th rank. Otherwise the
// original's step time is the median of its `steps` rows per rank, or, when it has none, the
// span of its kernels on that rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusion/lift.h"
#include "replay/executor.h"

namespace braid::replay {

struct RankFidelity {
  int32_t rank = 0;
  Ns original_ns = 0;  // 0 when the original has nothing on this rank
  Ns replayed_ns = 0;  // median over the measured steps
  double ratio() const {
    return original_ns > 0 ? static_cast<double>(replayed_ns) / static_cast<double>(original_ns)
                           : 0;
  }
};

struct Fidelity {
  int64_t original_run = -1;
  std::string original_source;  // "steps", "step K", "kernel span" or "GPU activity span"
  std::vector<RankFidelity> ranks;
  std::vector<std::string> lines() const;
};

// Throws braid::Error(NotFound) when `run` is not in the file.
// `lifted`: where the replayed schedule was lifted from (run -1: not lifted).
Fidelity fidelity(const std::string& braid_path, int64_t run, const ReplayResult& replayed,
                  const fusion::LiftSource& lifted = {});
// Median over ranks of replayed/original (ranks without an original left out), 0 when none.
double median_ratio(const Fidelity& f);

}  // namespace braid::replay

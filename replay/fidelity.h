// Fidelity of a replay of a captured or imported run: replayed versus original step time per
// rank. For a schedule lifted from that run (fusion::Schedule::lifted) the original is what was
// lifted: the lifted step's `steps` row per rank (its profiler step), or for a whole-run lift
// the span of the rank's GPU activity (kernels and memcpys); schedule rank i is the run's i-th
// rank. Otherwise the original's step time is the median of its `steps` rows per rank, or, when
// it has none, the span of its kernels on that rank. The replayed step time of a rank is the
// median over the measured steps of the time from the step's start to the rank's last op.
//
// Given the replayed schedule, the error of each rank is decomposed (docs/replay.md,
// "Fidelity"), on the same window as the step time, in the original (from the trace) and in the
// replay's median step: compute (the sum of the durations of kernels, copies and host compute),
// exposed communication per communicator (collective time no compute overlaps), and gaps (time
// with neither: host gaps, launch latency, waits the trace shows as idle).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fusion/lift.h"
#include "replay/executor.h"
#include "trace/json.h"

namespace braid::replay {

struct TimeBreakdown {
  bool known = false;
  Ns compute_ns = 0;
  Ns exposed_comm_ns = 0;                     // all communicators
  std::map<std::string, Ns> exposed_by_comm;  // lifted communicator id ("opaque": collectives
                                              // left as opaque compute)
  Ns gaps_ns = 0;
};

struct RankFidelity {
  int32_t rank = 0;
  TimeBreakdown original, replayed;
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
  // The same as JSON (trace/json.h), for `braid replay --json` / `braid ab --json`.
  void write_json(json::Writer& w) const;
};

// Throws braid::Error(NotFound) when `run` is not in the file.
// `lifted`: where the replayed schedule was lifted from (run -1: not lifted).
// `schedule`: the replayed schedule, for the decomposition (null: step times only).
Fidelity fidelity(const std::string& braid_path, int64_t run, const ReplayResult& replayed,
                  const fusion::LiftSource& lifted = {},
                  const fusion::Schedule* schedule = nullptr);
// Median over ranks of replayed/original (ranks without an original left out), 0 when none.
double median_ratio(const Fidelity& f);
// The ratio of the rank furthest from 1 (either way), 0 when none.
double worst_ratio(const Fidelity& f);

}  // namespace braid::replay

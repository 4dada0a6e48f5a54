// Replays as runs of the `.braid` file: a replayed or simulated run shows in the GUI like a
// capture. Compute ops become kernels (category from the label by the importers' rules),
// collectives become a collective row (communicator, per-communicator sequence number, op, size)
// plus the kernel that carried it, delays become ranges ("host gap"), IR streams become streams
// (ids = stream index on the rank), and every step a row of `steps`. Measured steps are laid end
// to end on one time axis starting at 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusion/ir.h"
#include "replay/executor.h"
#include "trace/writer.h"

namespace braid::replay {

struct RunDescription {
  std::string source;        // the file replayed
  std::string label;         // e.g. "ab baseline (schedule 3)"
  int64_t schedule_id = -1;  // runs.schedule_id
};

// Adds one run to `w` and returns its id.
int64_t write_run(TraceWriter& w, const fusion::Schedule& s, const ReplayResult& r,
                  const RunDescription& d);

// Appends the runs (one per result) to the `.braid` file at `path` atomically and returns
// their ids.
std::vector<int64_t> store_runs(const std::string& path,
                                const std::vector<const fusion::Schedule*>& schedules,
                                const std::vector<const ReplayResult*>& results,
                                const std::vector<RunDescription>& descriptions);

}  // namespace braid::replay

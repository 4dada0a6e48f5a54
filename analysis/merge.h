// `braid merge`: per-rank `.braid` files (one process each) -> one job file with one run whose
// ranks are the union, clocks aligned on matched collectives (analysis/clock.h).
//
// Each input contributes its default run (the single run, else its first captured or imported
// one). A rank present in two inputs is refused, naming both files. The merged events keep
// each rank's own clock; the solved offsets and their errors go to ranks.clock_offset_ns /
// offset_error_ns. When no collective links a rank to the others, its clock is kept (offset 0)
// and a diagnostic `merge.clock_unanchored` says so. The output is written to a temporary file
// and renamed at the end: an error leaves no output and an existing output untouched.
#pragma once

#include <string>
#include <vector>

#include "analysis/clock.h"

namespace braid::analysis {

struct MergeResult {
  int64_t run_id = -1;
  std::vector<int32_t> ranks;
  ClockFit clocks;
  int64_t events = 0;  // rows copied
};

MergeResult merge_files(const std::vector<std::string>& inputs, const std::string& output,
                        bool solve_clocks = true);

}  // namespace braid::analysis

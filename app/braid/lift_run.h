// Lifting a run into a stored schedule, shared by `braid lift` and `braid fuse` (which lifts
// first when the file has a run and no schedule).
#pragma once

#include <cstdint>
#include <string>

#include "fusion/ir.h"

namespace braid::cli {

struct LiftedRun {
  int64_t run_id = -1;
  int64_t schedule_id = -1;
  fusion::Schedule schedule;
};

// Lifts `run` (-1: analysis::default_run) of `file`, optionally one step, and stores the
// schedule in the file. Throws braid::Error with nothing stored on bad input.
LiftedRun lift_into_file(const std::string& file, int64_t run, int64_t step = -1);
// The summary `braid lift` prints (fusion::lift_summary), after a line naming the run and the
// new schedule.
void print_lifted(const std::string& file, const LiftedRun& l);

}  // namespace braid::cli

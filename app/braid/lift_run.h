// Printing a lifted run, shared by `braid lift` and `braid fuse` (which lifts first when the file
// has a run and no schedule); the lifting itself is fusion::lift_into_file.
#pragma once

#include <cstdio>
#include <string>

#include "fusion/lift.h"

namespace braid::cli {

// The summary `braid lift` prints (fusion::lift_summary), after a line naming the run and the
// new schedule.
void print_lifted(const std::string& file, const fusion::LiftedRun& l, FILE* out = stdout);

}  // namespace braid::cli

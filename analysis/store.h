// Storing `braid analyze` results in the `.braid` file, for the GUI: tables analysis_* (docs/
// schema.md) and the solved clock offsets in ranks.clock_offset_ns / offset_error_ns. One
// all-or-nothing transaction (StoreUpdate); the rows of the analysed run (and step) are
// replaced, other runs' rows are kept.
#pragma once

#include <map>
#include <string>

#include "analysis/analyze.h"

namespace braid::analysis {

void store_analysis(const std::string& path, const Analysis& a);

// What store_analysis stored of `run`'s cost model: each communicator's α-β as `braid analyze`
// calibrated it on the trace (analysis_communicators rows with a fit), by the trace's
// communicator id. `analysed` says whether the run has a stored analysis at all.
struct StoredCosts {
  bool analysed = false;
  std::string profile;  // the profile the analysis used for what it did not calibrate
  std::map<std::string, CommCost> comms;
};
StoredCosts load_costs(const std::string& path, int64_t run);

}  // namespace braid::analysis

// Storing `braid analyze` results in the `.braid` file, for the GUI: tables analysis_* (docs/
// schema.md) and the solved clock offsets in ranks.clock_offset_ns / offset_error_ns. One
// all-or-nothing transaction (StoreUpdate); the rows of the analysed run (and step) are
// replaced, other runs' rows are kept.
#pragma once

#include <string>

#include "analysis/analyze.h"

namespace braid::analysis {

void store_analysis(const std::string& path, const Analysis& a);

}  // namespace braid::analysis

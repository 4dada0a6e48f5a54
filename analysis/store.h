// The owner of the analysis_* tables (docs/schema.md): the one module that holds their DDL and
// writes and reads their rows (a family registered with trace/schema.h's owned_families).
// store_analysis stores `braid analyze` results for the GUI, with the solved clock offsets
// (ranks.clock_offset_ns / offset_error_ns, written through trace/rows.h), in one all-or-nothing
// transaction (StoreUpdate); the rows of the analysed run (and step) are replaced, other runs'
// rows are kept.
#pragma once

#include <sqlite3.h>

#include <map>
#include <string>
#include <vector>

#include "analysis/analyze.h"

namespace braid {
class TraceReader;
}

namespace braid::analysis {

void store_analysis(const std::string& path, const Analysis& a);

// Creates the analysis_* tables where missing, in the caller's transaction (store_analysis does;
// so must a test that writes their rows by hand). The readers below take a missing table as
// empty.
void ensure_tables(sqlite3* db);

// What store_analysis stored of `run`'s cost model: each communicator's α-β as `braid analyze`
// calibrated it on the trace (analysis_communicators rows with a fit), by the trace's
// communicator id. `analysed` says whether the run has a stored analysis at all.
struct StoredCosts {
  bool analysed = false;
  std::string profile;  // the profile the analysis used for what it did not calibrate
  std::map<std::string, CommCost> comms;
};
StoredCosts load_costs(const std::string& path, int64_t run);

// The cross-rank critical path stored for `run` (analysis_critical_path), by step and position;
// times on the job axis. Empty when the file has no such table.
struct StoredPathSegment {
  int64_t step = -1;
  std::string kind;  // kernel, memcpy, collective or gap
  int32_t rank = -1;
  int64_t stream = -1;
  Ns start = 0, end = 0;
  std::string name;
};
std::vector<StoredPathSegment> load_critical_path(const TraceReader& reader, int64_t run);

// Each communicator's parallel dimension as stored for `run` (analysis_communicators), with the
// evidence for it. Empty when the file has no such table.
struct StoredCommLabel {
  std::string comm, dim, evidence;
};
std::vector<StoredCommLabel> load_comm_labels(const TraceReader& reader, int64_t run);

}  // namespace braid::analysis

// Numbers the panels show: per-collective timing (wait versus transfer, bus bandwidth), range
// statistics, per-rank metrics, step times, and the before/after diff of two runs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "app/view/core/view_run.h"

namespace braid::view {

// One rank's view of a collective, taken from the analysis metrics of its match
// (analysis::CollectiveMetrics, the definitions of docs/analysis.md), so the GUI and `braid
// analyze` agree; a collective the analysis has no timing for (unmatched, or host-only) gets
// its own duration as transfer.
struct CollTiming {
  Ns duration = 0;         // this rank's end - start
  Ns wait = 0;             // this rank's wait: the match's last arrival (start) - its own arrival
  Ns transfer = 0;         // the last member's end - the last arrival (unmatched: its duration)
  int nranks = 1;          // the trace's group size, else the members of the match
  int32_t late_rank = -1;  // the rank that arrived last
  double algbw_gbs = 0, busbw_gbs = 0;  // bytes / transfer, and times the bus factor
  Ns exposed = 0;  // this rank's part not overlapped by its computation (-1: not computed)
};
CollTiming coll_timing(const ViewRun& d, int32_t coll);

struct CategoryStat {
  int64_t count = 0;
  Ns time = 0;  // clipped to the range
};
struct RangeStats {
  Ns t0 = 0, t1 = 0;
  int64_t events = 0;
  std::map<std::string, CategoryStat> by_category;  // category name
  int64_t collectives = 0, collective_bytes = 0;
  std::map<int32_t, Ns> gpu_busy;  // rank -> union of GPU activity clipped to the range
};
RangeStats range_stats(const ViewRun& d, Ns t0, Ns t1);

struct OpTotals {
  int64_t count = 0, bytes = 0;
  Ns time = 0;  // sum of durations over ranks
};

// The run's numbers for the panels, from ViewRun::metrics (analysis::compute_metrics).
struct RunMetrics {
  std::vector<analysis::RankMetrics> ranks;  // the whole-run row of each rank
  bool steps_from_trace = false;             // false: the whole run counts as one step
  int64_t steps = 0;
  Ns step_time = 0;              // mean of analysis::step_spans, else the ranks' whole GPU span
  Ns exposed_comm_per_rank = 0;  // mean over ranks
  Ns comm_per_rank = 0, compute_per_rank = 0;
  std::map<std::string, OpTotals> per_op;  // op name
};
RunMetrics run_metrics(const ViewRun& d);

// One rank's stacked bar (Metrics tab): its span cut into computation alone, communication
// overlapped by computation, exposed communication, memory traffic under neither, and idle
// time; the parts sum to the span.
struct MetricsBar {
  Ns compute = 0, overlapped = 0, exposed = 0, memory = 0, idle = 0;
};
MetricsBar metrics_bar(const analysis::RankMetrics& r);

// The collectives with the most exposed time (summed over instances and ranks), grouped by
// (communicator, operation, size), largest first.
struct ExposedColl {
  std::string comm;
  CollOp op = CollOp::Unknown;
  int64_t bytes = -1;
  int64_t count = 0;   // instances
  Ns exposed = 0;      // sum over instances of analysis::CollectiveMetrics::exposed_ns
  Ns transfer = 0;     // sum of transfer_ns
  int32_t worst = -1;  // the instance with the most exposure: index into metrics.collectives
};
std::vector<ExposedColl> top_exposed(const ViewRun& d, size_t n);

// The start of the first step (the earliest rank's), else the start of the run: compare mode
// shows every run relative to this.
Ns step_origin(const ViewRun& d);

struct DiffRow {
  std::string name;
  double a = 0, b = 0;  // ns, bytes or counts, as `unit` says
  std::string unit;     // "ns", "count", "bytes"
  double delta() const { return b - a; }
  double percent() const { return a != 0 ? 100.0 * (b - a) / a : 0.0; }
};
std::vector<DiffRow> diff_runs(const RunMetrics& a, const RunMetrics& b);

}  // namespace braid::view

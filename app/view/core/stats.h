// Numbers the panels show: per-collective timing (wait versus transfer, bus bandwidth), range
// statistics, per-rank metrics, step times, and the before/after diff of two runs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "app/view/core/run_data.h"

namespace braid::view {

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor (allreduce 2(n-1)/n; allgather,
// reducescatter and alltoall (n-1)/n; everything else 1), as `braid analyze` uses it.
double bus_factor(CollOp op, int nranks);

// The definitions of docs/analysis.md, so the GUI and `braid analyze` agree.
struct CollTiming {
  Ns duration = 0;         // this rank's end - start
  Ns wait = 0;             // this rank's wait: the match's last arrival (start) - its own arrival
  Ns transfer = 0;         // the last member's end - the last arrival (unmatched: its duration)
  int nranks = 1;          // the trace's group size, else the members of the match
  int32_t late_rank = -1;  // the rank that arrived last
  double algbw_gbs = 0, busbw_gbs = 0;  // bytes / transfer, and times bus_factor
};
CollTiming coll_timing(const RunData& d, int32_t coll);

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
RangeStats range_stats(const RunData& d, Ns t0, Ns t1);

struct RankMetrics {
  int32_t rank = 0;
  Ns span = 0;          // first to last GPU event
  Ns compute = 0;       // union of non-communication GPU work
  Ns comm = 0;          // union of communication
  Ns exposed_comm = 0;  // communication not overlapped by compute
  Ns idle = 0;          // span without any GPU activity
  int64_t kernels = 0, collectives = 0;
};

struct OpTotals {
  int64_t count = 0, bytes = 0;
  Ns time = 0;  // sum of durations over ranks
};

struct RunMetrics {
  std::vector<RankMetrics> ranks;
  bool steps_from_trace = false;  // false: the whole run counts as one step
  int64_t steps = 0;
  Ns step_time = 0;              // mean over steps of (last end - first start over ranks)
  Ns exposed_comm_per_rank = 0;  // mean over ranks
  Ns comm_per_rank = 0, compute_per_rank = 0;
  std::map<std::string, OpTotals> per_op;  // op name
};
RunMetrics run_metrics(const RunData& d);

// The start of the first step (the earliest rank's), else the start of the run: compare mode
// shows every run relative to this.
Ns step_origin(const RunData& d);

struct DiffRow {
  std::string name;
  double a = 0, b = 0;  // ns, bytes or counts, as `unit` says
  std::string unit;     // "ns", "count", "bytes"
  double delta() const { return b - a; }
  double percent() const { return a != 0 ? 100.0 * (b - a) / a : 0.0; }
};
std::vector<DiffRow> diff_runs(const RunMetrics& a, const RunMetrics& b);

// Measure of the union of intervals (sorted or not), and of a \ b for two unions.
Ns union_length(std::vector<std::pair<Ns, Ns>> iv);
Ns difference_length(std::vector<std::pair<Ns, Ns>> a, std::vector<std::pair<Ns, Ns>> b);

}  // namespace braid::view

// Metrics per rank and step, per collective, and per kernel.
//
// Per rank, for the whole run (first to last GPU activity) and per step (the GPU work the step
// launched: RankTrace::kernel_step, over that work's own span), with GPU activity classified as
// HTA does (trace/model.h time_class: communication: NCCL kernels; memory: memcpy/memset
// activity; computation: every other kernel):
//   compute_ns / comm_ns / memory_ns: length of the union of each class's intervals;
//   busy_ns: union of all GPU activity; idle_ns = span - busy (HTA temporal breakdown "idle");
//   non_compute_ns = span - compute - idle (HTA "non-compute");
//   overlap_ns: time when communication and computation both run;
//   overlap_pct = 100 · overlap / comm (HTA get_comm_comp_overlap);
//   exposed_comm_ns = comm - overlap (communication nothing hides).
// Collectives seen only on the host (no GPU kernel) have no GPU time and count in none of these.
//
// Per matched collective, on the job axis (clock offsets applied): arrival_r = start on rank r;
// wait_ns = last arrival - first arrival (arrival skew), transfer_ns = end - last arrival (end:
// the latest member end); the late rank is the last to arrive; algbw = bytes / transfer,
// busbw = algbw · nccl-tests factor; exposed_ns: the part of [arrival, end] on the member's rank
// that no computation overlaps (summed over members for the collective).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "analysis/clock.h"
#include "analysis/matching.h"

namespace braid::analysis {

struct Interval {
  Ns start = 0, end = 0;
};
// Sorts and merges in place; returns the total length.
Ns merge_intervals(std::vector<Interval>& v);
// Total length of the intersection of two merged lists.
Ns intersect_length(const std::vector<Interval>& a, const std::vector<Interval>& b);
// The time of [a, b] that no interval of `cover` (merged: sorted, disjoint) covers.
Ns uncovered(Ns a, Ns b, const std::vector<Interval>& cover);

struct RankMetrics {
  int32_t rank = 0;
  int64_t step = -1;  // -1: the whole run
  Ns start = 0, end = 0;  // window on the job axis
  Ns busy_ns = 0, idle_ns = 0, compute_ns = 0, comm_ns = 0, memory_ns = 0, non_compute_ns = 0;
  Ns overlap_ns = 0, exposed_comm_ns = 0;
  double overlap_pct = 0;
  int64_t kernels = 0, collectives = 0;
  Ns span() const { return end - start; }
};

struct MemberTiming {
  int32_t rank = 0;
  Ns arrival = 0, end = 0;  // job axis
  Ns wait_ns = 0;           // last arrival - this arrival
  Ns exposed_ns = 0;        // of [arrival, end], the time no computation of the rank overlaps
};

struct CollectiveMetrics {
  int group = -1;
  std::string comm;
  int64_t seq = 0;
  CollOp op = CollOp::Unknown;
  int64_t bytes = -1;
  int32_t nranks = 0;
  int64_t step = -1;  // the first member's step (RankTrace::collective_step), -1 if in none
  bool complete = false;
  Ns first_arrival = 0, last_arrival = 0, end = 0;  // job axis
  Ns wait_ns = 0, transfer_ns = 0;
  Ns exposed_ns = 0;  // sum of the members' exposed_ns
  int32_t late_rank = -1;
  double algbw_gbps = 0, busbw_gbps = 0;
  std::vector<MemberTiming> members;
};

struct KernelStat {
  int32_t rank = 0;
  std::string name;
  Category category = Category::Other;
  int64_t count = 0;
  Ns total_ns = 0, min_ns = 0, max_ns = 0;
};

struct Metrics {
  std::vector<RankMetrics> ranks;              // per rank: the whole run, then each step
  std::vector<CollectiveMetrics> collectives;  // per matched group with >= 1 GPU member
  std::vector<KernelStat> kernels;             // per rank, top kernels by total time
  std::map<int32_t, std::map<Category, Ns>> category_ns;  // per rank, summed kernel time
};

struct MetricsOptions {
  int64_t step = -1;     // only this step (and not the whole run); -1: whole run and all steps
  int top_kernels = 10;  // per rank
  // The whole-run rows as HTA's TraceAnalysis computes them by default: only GPU activity
  // launched before the last ProfilerStep started (with one step: before it ended) by a runtime
  // call that is in the trace, times rounded to whole µs (start up, end down) as HTA's parser
  // does. Step rows are unchanged.
  bool hta_compat = false;
  // Spread over processes (analysis/job.h): whether this process holds a rank's timeline. Rows,
  // kernels and members' exposure only for the ranks held (members' exposure 0 for the others);
  // empty: every rank.
  std::function<bool(int32_t)> holds;
};

Metrics compute_metrics(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                        const MetricsOptions& opt = {});

// The parts of compute_metrics, for an analysis that holds one rank at a time (analysis/
// stream.h). add_rank_metrics appends rank `r`'s rows, top kernels and kernel time per category,
// and returns its merged computation intervals on the job axis; add_collective_metrics appends
// every matched group, its members' exposure 0; add_exposure adds the exposure of one rank's
// members (`members`: (collective, member) positions, members_by_rank) from its computation.
std::vector<Interval> add_rank_metrics(const RunData& run, int32_t r, const ClockFit& clocks,
                                       const MetricsOptions& opt, Metrics& out);
void add_collective_metrics(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                            const MetricsOptions& opt, Metrics& out);
std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> members_by_rank(const Metrics& m);
void add_exposure(Metrics& m, const std::vector<std::pair<int32_t, int32_t>>& members,
                  const std::vector<Interval>& computation);

// Step time: per step number, from the earliest start to the latest end of the step's rows
// over all ranks (the GPU work the step launched). Empty when the metrics have no step rows.
std::map<int64_t, Ns> step_spans(const Metrics& m);

// Who made the others wait: per rank, the complete collectives it arrived last at and the sum
// of their wait_ns (arrival skew), as `braid analyze` reports "last to arrive".
struct LateRank {
  int64_t count = 0;
  Ns waited_ns = 0;
};
std::map<int32_t, LateRank> late_ranks(const Metrics& m);

// The number of ranks a group's collective runs on: the trace's group size where known, else
// the communicator members present.
int32_t group_nranks(const RunData& run, const CollGroup& g);

}  // namespace braid::analysis

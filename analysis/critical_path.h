// The critical path of a step across ranks.
//
// Walking back from the op that ends last in the window (job axis, clock offsets applied), each
// op's start is explained by what it waited for, the latest of:
//   - its stream predecessor's end;
//   - its inferred cross-stream dependency (analysis/timeline.h);
//   - for a matched collective, the last member to arrive: the path takes the transfer
//     (last arrival -> end) and continues on the late rank, whose own predecessors explain
//     its arrival.
// Where the latest predecessor ended more than `gap_ns` before the op started, the stream was
// waiting for the host (launch latency, data loading, a CPU-bound framework): the path records
// a `gap` segment on that rank and continues with the predecessor. The chain is reported in
// time order with the share of each kernel category and each communicator on it.
//
// A step's path lies within the step: its span on the job axis, from the first rank's start of it
// to the last rank's end (`step_ns`). Clocks that are not aligned make that span impossible: on
// aligned clocks the ranks' shares of a step overlap (they wait for one another in its
// collectives), so the span is at most twice the longest share on any one rank's own clock
// (`longest_rank_ns`, which no clock offset enters). A step whose span is longer than that is
// refused: no chain, `refused` says why. Ranks whose clocks are not aligned with the rank the
// path ends on are left out of the step (their times are on another axis).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/clock.h"
#include "analysis/exchange.h"
#include "analysis/matching.h"
#include "analysis/timeline.h"

namespace braid::analysis {

enum class SegmentKind : uint8_t { Kernel, Memcpy, Collective, Gap };
std::string_view to_string(SegmentKind k);

struct PathSegment {
  SegmentKind kind = SegmentKind::Kernel;
  int32_t rank = 0;
  int64_t stream = 0;       // -1 for host-side collectives and gaps before a stream's first op
  Ns start = 0, end = 0;    // job axis
  std::string name;         // kernel name, "allreduce" ..., "host gap"
  std::string category;     // to_string(Category), or "gap"
  std::string comm;         // collectives
  int group = -1;           // collectives: the matched group
  int32_t late_rank = -1;   // collectives: the last rank to arrive
  Ns duration() const { return end - start; }
};

struct CriticalPath {
  int64_t step = -1;  // -1: the whole run
  Ns start = 0, end = 0;
  Ns step_ns = 0;                  // the step's span on the job axis over the ranks it covers
  Ns longest_rank_ns = 0;          // the longest the step lasts on one rank (its own clock)
  std::string refused;             // non-empty: no path reported for the step, and why
  std::vector<PathSegment> chain;  // in time order
  std::map<std::string, Ns> by_category;  // category (or "gap") -> time on the path
  std::map<std::string, Ns> by_comm;      // communicator -> collective time on the path
  Ns length() const { return end - start; }
};

struct CriticalPathOptions {
  int64_t step = -1;
  Ns gap_ns = 1'000;
};

// Where the ranks' timelines are when the analysis is spread over processes (analysis/job.h):
// `timelines` holds this process's ranks, `owner` names the process holding each rank, and the
// walk asks that process about the rank's ops (every process walks the same path).
struct SpreadTimelines {
  Exchange* exchange = nullptr;  // nullptr: every rank's timeline is in `timelines`
  const std::map<int32_t, int>* owner = nullptr;
};

CriticalPath critical_path(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                           const std::map<int32_t, RankTimeline>& timelines,
                           const CriticalPathOptions& opt = {}, const SpreadTimelines& spread = {});

}  // namespace braid::analysis

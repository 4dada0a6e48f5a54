// Cross-rank matching of collectives.
//
// Collectives of one communicator are matched by the trace's sequence number where it records
// one, otherwise by their order within the communicator on each rank. Point-to-point sends and
// receives pair per channel: rank a's k-th send to b with b's k-th receive from a.
//
// Host collectives (no GPU kernel: gloo, legacy profiler traces) without sequence numbers are
// matched by each rank's call order per operation, within each step when every rank has steps:
// the k-th all-reduce a rank calls in step 7 with the k-th all-reduce every other rank calls in
// step 7 (MatchMethod::CallOrder). No time comparison is made: such traces have a time origin
// per rank (each profiler's own start), which the clock alignment solves afterwards from these
// groups. Sizes, where the trace gives them, verify each group (a disagreement is mismatched).
//
// When the order differs between ranks (a sampled or truncated trace drops collectives on one
// rank and not the other), plain order would pair the wrong instances. Such communicators are
// matched by aligning each rank's sequence with a reference rank's (the one with the most
// collectives): an alignment that pairs the most collectives of the same operation whose
// intervals overlap once the ranks' median clock difference is removed (a collective cannot
// complete on one rank before every member has started it). What was left unmatched is
// reported.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/run_data.h"

namespace braid::analysis {

struct CollRef {
  int32_t rank = -1;
  int32_t index = -1;  // into RankTrace::collectives
  bool operator==(const CollRef&) const = default;
};

enum class MatchMethod : uint8_t { Seq, Order, Aligned, PointToPoint, CallOrder };
std::string_view to_string(MatchMethod m);

// One collective instance across ranks.
struct CollGroup {
  std::string comm;  // communicator identity, "" when the trace names none
  int64_t seq = 0;   // the trace's sequence number, else the position within the communicator
  MatchMethod method = MatchMethod::Order;
  CollOp op = CollOp::Unknown;
  int64_t bytes = -1;            // the members' common size, -1 when unknown or they disagree
  std::vector<CollRef> members;  // by rank; send/recv: {send, recv}
  int32_t expected = 0;          // members of the communicator present in the run
  bool mismatched = false;       // members disagree on op or size (see `problem`)
  std::string problem;

  bool complete() const { return static_cast<int32_t>(members.size()) == expected; }
};

struct MatchResult {
  std::vector<CollGroup> groups;
  // group of each collective, per rank (same indexing as RankTrace::collectives), -1: none
  std::map<int32_t, std::vector<int>> group_of;
  std::vector<Diagnostic> diagnostics;  // codes analysis.unmatched_collective, ... (docs)
  int64_t unmatched = 0, mismatched = 0;

  int group(CollRef r) const;
};

MatchResult match_trace_collectives(const RunData& run);

// The size of one rank's part of a collective, from what the importer or the capture stored
// (NCCL kernel args, record_param_comms, the Input Dims of nccl:* / c10d::* CPU ops, nsys NVTX
// payloads, captured nccl_calls). The one place sizes are derived: `braid analyze`'s size
// column (CollGroup::bytes) and the lift (fusion/lift.h) both call it.
struct CollSize {
  std::string dtype;   // normalized; "uint8" when the trace gives bytes but no type
  int64_t count = -1;  // elements of the rank's part as the schedule IR counts them
                       // (docs/schedule-ir.md), -1 when unknown
  int64_t bytes = -1;  // nccl-tests "size": the larger of the in/out buffers, -1 when unknown
  std::string why;     // when count < 0: what the trace lacks
  bool known() const { return count >= 0; }
};
// `nranks`: members of the communicator (to derive one buffer from the other where the trace
// gives only one, e.g. an All-Gather's input).
CollSize collective_size(const RunData& run, const Collective& c, int64_t nranks);

// Members of `comm` present in the run: the communicator table's rank list where it has one
// (restricted to ranks of the run), else every rank with a collective on `comm`.
std::vector<int32_t> comm_members(const RunData& run, const std::string& comm);

}  // namespace braid::analysis

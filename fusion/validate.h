// Validation of schedules and cross-rank matching of collectives.
//
// Matching: on each rank, the ops of one communicator are ordered by the rank's local
// happens-before order (stream order plus record -> wait edges); that order must be total, as
// NCCL requires one issue order per communicator. The k-th collective (not send/recv) of
// communicator C on every member rank form one group. Point-to-point ops match per channel:
// rank a's k-th send to b on C pairs with b's k-th recv from a on C.
#pragma once

#include <string>
#include <vector>

#include "fusion/ir.h"

namespace braid::fusion {

struct MatchGroup {
  CollOp op = CollOp::Unknown;
  std::string comm;
  int64_t seq = 0;  // k-th collective on the communicator, or k-th message on a p2p channel
  std::vector<OpRef> members;  // collectives: in communicator order; send/recv: {send, recv}
};

struct Matching {
  std::vector<MatchGroup> groups;     // complete groups only
  std::vector<std::string> problems;  // missing partners, mismatches, ambiguous order
  std::vector<std::vector<std::vector<int>>> group_index;  // [rank][stream][index], -1: none

  // The group an op belongs to, or -1 (not a collective, or without a complete match).
  int group_of(OpRef r) const;
};

Matching match_schedule_collectives(const Schedule& s);

struct ValidateOptions {
  // Look for cycles in the happens-before graph of the whole job (stream order, events, and
  // collectives, which complete only when every member has reached them).
  bool check_deadlock = true;
};

// Every problem found, each one readable line; empty when the schedule is valid. Checks:
// structure (rank numbering, unique ids / names, communicator membership), buffer slices within
// bounds and of the collective's dtype, per-op slice counts, matching (every collective has its
// partner on every member rank with the same op, count, dtype and root; send/recv and manytomany
// counts agree pairwise), events (recorded exactly once on the waiting rank, never after the
// wait), and deadlock freedom.
// With `matching`, also the collectives' matching the checks found (match_schedule_collectives's
// answer, without analyzing the schedule twice).
std::vector<std::string> validate(const Schedule& s, const ValidateOptions& opt = {},
                                  Matching* matching = nullptr);

}  // namespace braid::fusion

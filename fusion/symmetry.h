// Rank classes (docs/schedule-ir.md, "Rank classes"): a schedule whose ranks repeat up to
// renaming (the DP replicas of a step, EP groups) is held as one representative per class and a
// Symmetry (fusion/ir.h) that says how the others follow. The passes, the matching and the
// simulator work on the representatives; expand() gives every rank back.
//
// Correctness rests on the permutation pi being a symmetry of the whole job: rank pi(r) runs
// rank r's ops renamed. fold() proves that on a schedule that has every rank (each rank against
// the image of the one before it, which by induction covers the whole orbit); synthesize()
// builds representatives and checks them against the first and the last replica it builds in
// full. symmetry_problems() checks what the representatives alone must satisfy for the
// matching and the simulator to see the whole job through them.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "fusion/ir.h"

namespace braid::fusion {

// How communicators map under pi: the image of communicator c is the communicator whose member
// set is pi's image of c's (the k-th of several communicators with one member set maps to the
// k-th with the image set, in the order of Schedule::comms).
class SymmetryMap {
 public:
  SymmetryMap(const Schedule& s, Symmetry sym);
  // Index in s.comms of pi(c), -1 when no communicator has that member set.
  int next(int c) const { return next_[c]; }
  int index(const std::string& id) const;  // -1 when unknown
  // Rank r's schedule renamed by pi^i: its rank number, peers, roots, chunk peers, the
  // communicators of collectives and of `replicated` buffers and compute, op ids and the ids in
  // `replaces` (+ i * id_stride). `comms` maps communicator indices for that i (comms_after(i)).
  RankSchedule image(const RankSchedule& r, int64_t i, const std::vector<int>& comms) const;
  // The communicator map of pi^i: element c is the index of pi^i(c), -1 when it has none.
  std::vector<int> comms_after(int64_t i) const;

 private:
  const Schedule& s_;
  Symmetry sym_;
  std::vector<int> next_;
  std::unordered_map<std::string, int> index_;
};

// The schedule with every rank present and no symmetry (`s` itself when it has none). Throws
// braid::Error(Usage) naming the schedule, its ranks and classes and the size when the
// expansion would hold more than `max_ops` ops (2 Mi ops: several GiB in the commands that
// hold a schedule twice and simulate or interpret it): a command that needs every rank (a real replay,
// the data check) says so before it allocates.
Schedule expand(const Schedule& s, size_t max_ops = size_t{2} << 20);

// Ops the expansion of `s` holds (s.op_count() without a symmetry).
size_t expanded_op_count(const Schedule& s);

// `s` folded to one representative per rank class under the largest symmetry pi (fewest
// classes) that holds exactly on its every rank; `s` unchanged when none does, or when it
// already has a symmetry, or when it was rewritten (ops with `replaces`: a fused schedule keeps
// its parent's symmetry instead). Only pi of the Symmetry form (blocks of consecutive ranks,
// cyclic shift) are tried. The schedule is then exactly its classes, but whether the passes act
// alike on every rank of a class is proven only for the DP symmetry (tests/fusion/symmetry_test):
// a shift inside a TP or EP group, which fold may also find, makes the group's collectives
// visible through one member, and a pass that needs each member's part does not fire. So
// braid fuse does not fold what is stored with every rank.
Schedule fold(const Schedule& s);

// What the representatives of a symmetric schedule must satisfy, one line each (empty when
// fine, and for a schedule without symmetry): block and shift divide the world and each other,
// every communicator has an image, a communicator with members of two classes' images (a DP
// communicator) is mapped onto itself, the ranks a stored rank sends to or receives from are
// stored, image ranks are empty, and op ids stay below id_stride.
std::vector<std::string> symmetry_problems(const Schedule& s);

// Adds communicator `c` (of stored ranks, which a rewrite of the representatives made) and,
// under a symmetry, its images (ids "<c.id>~<i>"), so the rewrite stands for the same one on
// every rank of the classes. Returns c's id.
std::string add_comm(Schedule& s, Comm c);

// Whether communicator `c` of `s` joins stored ranks and images (a DP communicator under the DP
// symmetry): its collective is seen through the stored members, and an image holds another
// position in it. A rewrite whose slices depend on a member's position (a reduce-scatter's
// shard) cannot be made on the representative for its images, so passes leave such
// collectives alone (decompose; the TP / EP passes match communicators inside a replica).
bool has_images(const Schedule& s, const Comm& c);

// Rank classes: the ranks the schedule stores (its world size without a symmetry).
int32_t rank_classes(const Schedule& s);

// The id stride for a schedule whose largest op id is below `next_id`: a power of ten at least
// 10 times it, so rewrites of the representatives have room for new ids.
int64_t id_stride_for(int64_t next_id);

}  // namespace braid::fusion

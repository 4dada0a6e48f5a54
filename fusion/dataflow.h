// Data-flow and editing helpers shared by the rewrite passes: per-rank happens-before, the live
// uses of a value, collective costs for predicted savings, and small schedule edits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/ir.h"
#include "fusion/validate.h"

namespace braid::fusion {

// Elements of one buffer as sorted, disjoint [begin, end) intervals.
struct ElemSet {
  std::vector<std::pair<int64_t, int64_t>> iv;

  static ElemSet of(const Slice& s);
  bool empty() const { return iv.empty(); }
  int64_t size() const;
  void add(int64_t b, int64_t e);
  void subtract(int64_t b, int64_t e);
  ElemSet intersect(int64_t b, int64_t e) const;
  // True when every element lies in [b, e).
  bool within(int64_t b, int64_t e) const;
};

// Happens-before on every rank: stream order plus record -> wait edges (vector clocks).
class HappensBefore {
 public:
  explicit HappensBefore(const Schedule& s);
  // a strictly before b (same rank); false for a == b.
  bool before(OpRef a, OpRef b) const;
  bool ordered(OpRef a, OpRef b) const { return before(a, b) || before(b, a); }
  bool cyclic(int32_t rank) const { return cyclic_[rank]; }

 private:
  std::vector<std::vector<int>> base_;  // [rank][stream] -> flat index of the first op
  std::vector<std::vector<std::vector<int32_t>>> clock_;  // [rank][flat] -> clock per stream
  std::vector<bool> cyclic_;
};

// How the value of `slice` right after op `at` (on at.rank) is used later on that rank.
struct Uses {
  struct Use {
    OpRef op;
    ElemSet elems;  // the elements of the value it reads (offsets in the buffer)
  };
  std::vector<Use> readers;   // ops after `at` reading part of the value before it is overwritten
  ElemSet live_at_end;        // elements still holding the value at the end, in an output buffer
  std::vector<OpRef> opaque;  // opaque compute after `at` (may read anything)
  // Ops touching the slice that are not ordered with `at` (or a reader unordered with a writer
  // of the same elements): the uses cannot be known.
  std::vector<OpRef> unordered;
  bool known() const { return opaque.empty() && unordered.empty(); }
};

class Dataflow {
 public:
  explicit Dataflow(const Schedule& s);
  const Schedule& schedule() const { return s_; }
  const HappensBefore& hb() const { return hb_; }
  const Matching& matching() const { return m_; }
  // The match group of a collective, nullptr when unmatched.
  const MatchGroup* group(OpRef r) const;
  // True when `buffer` on `rank` is one of its outputs (all buffers when `outputs` is empty).
  bool is_output(int32_t rank, const std::string& buffer) const;
  Uses uses_after(OpRef at, const Slice& slice) const;
  // Ops of the rank strictly between a and b (a before op before b) that write an element of
  // `slice`, plus ops unordered with a or b that touch it; opaque compute counts as a writer.
  std::vector<OpRef> writers_between(OpRef a, OpRef b, const Slice& slice) const;
  // The collectives (send/recv included) of a rank on a communicator, in (stream, position)
  // order. Built per rank on first use.
  const std::vector<OpRef>& collectives_on(int32_t rank, const std::string& comm) const;

 private:
  // Ops of a rank that may touch a buffer: those whose access names it, plus opaque compute,
  // in (stream, position) order. Built per rank on first use, so a search reads only the ops
  // of the buffer it follows instead of every op of the rank.
  const std::vector<OpRef>& touching(int32_t rank, const std::string& buffer) const;

  const Schedule& s_;
  HappensBefore hb_;
  Matching m_;
  struct RankIndex {
    bool built = false;
    std::unordered_map<std::string, std::vector<OpRef>> by_buffer;  // opaque ops merged in
    std::vector<OpRef> opaque;
    bool comms_built = false;
    std::unordered_map<std::string, std::vector<OpRef>> by_comm;
  };
  mutable std::vector<RankIndex> index_;
};

// The wire bytes one rank puts on the network for a collective (ring / direct factors of the
// seeds' table applied to collective_bytes, fusion/ir.h); manytomany: the bytes this rank sends.
int64_t wire_bytes(const Schedule& s, const Collective& c, int32_t rank);
// Predicted time of a matched collective (largest over its members for manytomany).
Ns group_ns(const Schedule& s, const MatchGroup& g, const analysis::CostModel& cm);
// Wire bytes of a matched group: the most any member puts on the wire.
int64_t group_wire_bytes(const Schedule& s, const MatchGroup& g);

// Edits.
struct Located {
  OpRef ref;
  const Op* op = nullptr;
};
// Removes the op with this id; returns it (throws braid::Error(Usage) when it is gone).
Op remove_op(Schedule& s, int64_t id);
// Inserts `op` into (rank, stream) at `index`.
void insert_op(Schedule& s, int32_t rank, int32_t stream, int32_t index, Op op);
// An op with a fresh id (counting from `next`, which it advances).
Op make_op(int64_t& next, decltype(Op::body) body, std::vector<int64_t> replaces);
// Names not used yet: an event on a rank, a communicator id, a buffer on a rank, a stream.
std::string fresh_event(const Schedule& s, int32_t rank, const std::string& stem);
std::string fresh_comm(const Schedule& s, const std::string& stem);
std::string fresh_stream(const Schedule& s, int32_t rank, const std::string& stem);
OpRef must_find(const Schedule& s, int64_t id);
// "all-reduce 'grad' on 'tp'"
std::string op_name(const Op& op);

}  // namespace braid::fusion

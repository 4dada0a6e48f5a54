// Which values are provably the same on several ranks (internal to the passes). Megatron's TP
// ranks hold identical copies of the residual stream; Chimera's TP+PP rewrite sends only 1/t of
// such a copy from each rank. The IR shows it through data flow: an All-Reduce (All-Gather,
// Broadcast) gives its members equal outputs, compute marked `replicated` over a communicator
// is the same function on all its members, a buffer marked `replicated` starts equal, and a
// receive holds what its sender sent. A value's signature hashes how it was made, down to those
// facts; two ranks' values with equal signatures are equal element by element.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "fusion/dataflow.h"

namespace braid::fusion::passes {

class Replicas {
 public:
  explicit Replicas(const Dataflow& df) : df_(df) {}

  // Signature of the values op `at` (on at.rank) reads from `slice`; nullopt when the values
  // cannot be traced (opaque compute, writers unordered with `at` or with each other).
  std::optional<uint64_t> signature(OpRef at, const Slice& slice);

  // True when every (op, slice) pair reads the same values on its rank.
  bool same(const std::vector<std::pair<OpRef, Slice>>& reads);

 private:
  // Ops of a rank writing a buffer, and its opaque compute; built per rank on first use.
  struct RankWriters {
    std::map<std::string, std::vector<OpRef>> by_buffer;
    std::vector<OpRef> opaque;
  };
  const RankWriters& writers(int32_t rank);
  // Signature of elements [a, b) of the write slice `w` of op `op`.
  std::optional<uint64_t> piece(OpRef op, const Slice& w, int64_t a, int64_t b);

  const Dataflow& df_;
  std::map<std::tuple<int32_t, int32_t, int32_t, std::string, int64_t, int64_t>,
           std::optional<uint64_t>>
      memo_;
  std::map<int32_t, RankWriters> writers_;
  int depth_ = 0;
};

}  // namespace braid::fusion::passes

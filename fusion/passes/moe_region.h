// The MoE block rewrite (moe_block.h), its first half: building each rank's region from a seed
// (the ops the rewrite shards, the role of each and the order of the rows it writes). The
// second half, whether the regions may be sharded and the plan that does it, is moe_plan.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fusion/passes/passes.h"

namespace braid::fusion::passes::moe {

enum class Role : uint8_t { Seed, Positional, Rows, Sum, AllToAll, LocalSum };
enum class Order : uint8_t { Token, Dest };

inline bool has(const std::vector<OpRef>& v, OpRef r) {
  return std::find(v.begin(), v.end(), r) != v.end();
}

// The region of one rank (moe_block.h): every op the rewrite shards, found from the seed.
class Region {
 public:
  Region(const Dataflow& df, OpRef seed, std::vector<OpRef> pre, int t, int index)
      : df_(df), s_(df.schedule()), seed_(seed), pre_(std::move(pre)), t_(t), index_(index) {}

  // False with `why` when the region has a shape the rewrite cannot shard.
  bool build(std::string& why);

  const std::vector<OpRef>& ops() const { return ops_; }
  Role role(OpRef r) const { return role_.at(r); }
  const std::vector<std::pair<OpRef, Slice>>& exits() const { return exits_; }
  int64_t n() const { return n_; }
  int ep() const { return ep_; }
  // Order of the rows `r` writes (row-wise compute).
  Order write_order(OpRef r) const { return write_order_.at(r); }

 private:
  enum class Kind : uint8_t { Token, Row, Exit };
  struct Value {
    OpRef writer;
    Slice slice;
    Kind kind;
  };
  struct Outside {
    size_t value;
    std::optional<Uses::Use> use;  // nullopt: live at the end of the step
  };

  // A positional compute whose every slice has the seed's element count: element j of the
  // output depends on element j of the inputs, so it splits by rows.
  bool positional_token_op(const Compute& c) const {
    if (c.writes.empty()) return false;
    for (const auto* v : {&c.reads, &c.writes})
      for (const Slice& sl : *v)
        if (sl.count != n_) return false;
    return true;
  }
  void add(OpRef r, Role role) {
    ops_.push_back(r);
    role_[r] = role;
  }
  void add_exit(OpRef w, const Slice& sl) {
    for (const auto& [x, y] : exits_)
      if (x == w && y == sl) return;
    exits_.push_back({w, sl});
  }
  static bool fail(std::string& why, std::string w) {
    why = std::move(w);
    return false;
  }

  // The order of the rows a region slice holds where `at` reads it: that of the region op that
  // wrote it last before `at`, token order for values from outside (activations).
  std::optional<Order> read_order(OpRef at, const Slice& sl) const;
  Order order_of(const Value& v) const;

  // Which order (tokens, or the experts' destinations) each region op's rows are in: seed and
  // positional compute hold tokens, all-to-alls destinations, row-wise compute the order of its
  // reads, flipped by a transpose. Inconsistent orders cannot be sharded.
  bool orders(std::string& why);

  const Dataflow& df_;
  const Schedule& s_;
  OpRef seed_;
  std::vector<OpRef> pre_;
  int t_ = 0, index_ = 0;
  int64_t n_ = 0;
  std::string tp_comm_;
  int ep_ = 0;
  std::vector<OpRef> ops_;
  std::map<OpRef, Role> role_;
  std::vector<Value> values_;
  std::vector<Outside> outside_;
  std::vector<std::pair<OpRef, Slice>> exits_;
  mutable std::map<OpRef, std::vector<std::pair<Slice, Order>>> written_;
  std::map<OpRef, Order> write_order_;
};

// A seed group and, per member, how it reaches its all-to-all.
struct Cand {
  const MatchGroup* seed;
  std::vector<const MatchGroup*> a2a;   // per member, the nearest all-to-all
  std::vector<std::vector<OpRef>> via;  // per member, the compute on the way
  bool routed = false;                  // a routing transpose on the way
};
// Builds the regions of the component `comp` of `cands` (one per seed member, TP group size t)
// and checks that every all-to-all and local sum in them has all its members inside; false with
// `why` otherwise. `seed_name` names the seed in the reasons.
bool build_regions(const Dataflow& df, const std::vector<Cand>& cands,
                   const std::vector<size_t>& comp, int t, const std::string& seed_name,
                   std::vector<Region>& regions, std::string& why);

}  // namespace braid::fusion::passes::moe

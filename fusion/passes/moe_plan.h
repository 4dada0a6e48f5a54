// The MoE block rewrite (moe_block.h), its second half: whether the regions built from a
// component's seeds (moe_region.h) may be sharded, and the plan that rewrites the schedule.
// Legal when the TP ranks' blocks are the same ops, every region compute is declared replicated
// over the TP group and can run on 1/t of its rows, and every value it reads from outside is
// provably the same on the TP ranks (fusion/passes/replicas.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fusion/passes/moe_region.h"

namespace braid::fusion::passes::moe {

// One rank's part of the rewrite, by op id (ids survive other findings' rewrites).
struct RankPlan {
  int32_t rank = -1;
  int index = 0;  // position in the TP communicator: which 1/t of the tokens
  std::string tp_comm;
  struct Item {
    int64_t id = -1;
    Role role = Role::Positional;
  };
  std::vector<Item> ops;                         // stream order
  std::vector<std::pair<int64_t, Slice>> exits;  // values all-gathered after their writer
  std::vector<std::pair<Slice, Slice>>
      redirects;              // a sharded read of a gathered value -> its input
  std::vector<int64_t> drop;  // all-gathers no longer read
  bool keep_seed = false;     // an all-gather seed still read in full
};

struct Plan {
  CollOp seed = CollOp::AllReduce;
  int t = 0;
  std::vector<RankPlan> ranks;
  std::string delta_stem;
  Ns add_ns = 0;        // one gradient add per accumulated weight
  Ns local_sum_ns = 0;  // t local additions replacing a reduce-scatter
};

class Planner {
 public:
  Planner(const Dataflow& df, const analysis::CostModel& cm, CollOp seed, const std::string& pass)
      : df_(df), s_(df.schedule()), cm_(cm), seed_(seed), pass_(pass) {}

  // The plan for the component's regions, or nullopt with `why` when they cannot be sharded.
  std::optional<Plan> make_plan(const std::vector<Cand>& cands, const std::vector<size_t>& comp,
                                std::vector<Region>& regions, int t, std::string& why);

 private:
  // All-gathers over the rank's TP group whose output a region op reads: the rank's own shard
  // of it is the all-gather's input, which the sharded read takes instead; an all-gather no one
  // else reads (and not a result) goes. The seed all-gather included.
  void gathers(const Region& r, OpRef seed, RankPlan& rp) const;
  // Can compute `c` (role in the region) run on 1/t of its rows?
  bool shardable(const Compute& c, Role role, int t, const Region& r, OpRef o,
                 std::string& why) const;
  // Reads of region op `o` whose values come from outside the region (sum accumulators
  // excluded: the rewrite adds into them after the All-Reduce of the partial sums).
  std::vector<Slice> external_reads(const Region& r, OpRef o) const;

  const Dataflow& df_;
  const Schedule& s_;
  const analysis::CostModel& cm_;
  CollOp seed_;
  const std::string& pass_;
};

// Rewrites `x` as the plan says (the finding's rewrite).
void apply_plan(Schedule& x, const Plan& p);

}  // namespace braid::fusion::passes::moe

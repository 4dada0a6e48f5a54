// tp-ep: an All-Reduce over the tensor-parallel group followed by the dispatch All-to-All: every
// TP rank dispatches the same tokens. Reduce-scatter instead and dispatch 1/t of the tokens per
// TP rank (all-gather after the combine). The ranks then split the expert work, which the IR's
// per-rank compute cannot prove equal, so this is always advice; mirrored on the combine side
// (All-to-All followed by the All-Reduce).
#include <set>

#include "fusion/passes/chimera_util.h"

namespace braid::fusion::passes {
namespace {

class TpEp : public Pass {
 public:
  std::string_view name() const override { return "tp-ep"; }
  std::string_view description() const override {
    return "All-Reduce + All-to-All -> Reduce-Scatter + All-to-All of 1/t (advice)";
  }
  std::vector<Finding> find_in(const Schedule& s, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    std::optional<Dataflow> own_df;
    const Dataflow& df = dataflow_of(s, focus, own_df);
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->hits(s, g.members)) continue;
      if (g.op != CollOp::AllReduce) continue;
      const int t = static_cast<int>(
          s.find_comm(s.op(g.members[0]).collective()->comm)->ranks.size());
      if (t < 2) continue;
      // Dispatch: the all-reduce's output feeds an all-to-all on every member.
      std::vector<const MatchGroup*> after, before;
      bool all_after = true, all_before = true;
      for (const OpRef& m : g.members) {
        const Collective& c = *s.op(m).collective();
        auto r = reach(df, m, c.out, CollOp::AllToAll, 4);
        all_after = all_after && !r.empty();
        if (!r.empty() && std::find(after.begin(), after.end(), r[0].group) == after.end())
          after.push_back(r[0].group);  // the nearest all-to-all
      }
      // Mirror: an all-to-all whose output reaches the all-reduce on every member.
      for (const OpRef& m : g.members) {
        bool found = false;
        for (const MatchGroup& a : df.matching().groups) {
      if (focus && !focus->any(a.members)) continue;
          if (a.op != CollOp::AllToAll) continue;
          for (const OpRef& am : a.members) {
            if (am.rank != m.rank) continue;
            auto near = reach(df, am, s.op(am).collective()->out, CollOp::AllReduce, 4);
            for (const Reach& x : near)
              if (x.group == &g && &x == &near.front()) {
                found = true;
                if (std::find(before.begin(), before.end(), &a) == before.end()) before.push_back(&a);
              }
          }
        }
        all_before = all_before && found;
      }
      // TP x EP: each TP rank dispatches over its own EP group (members in distinct groups).
      auto distinct = [&](const std::vector<const MatchGroup*>& gs) {
        std::set<int32_t> seen;
        for (const MatchGroup* a : gs) {
          int n = 0;
          for (const OpRef& m : g.members)
            for (const OpRef& am : a->members) n += am.rank == m.rank;
          if (n != 1) return false;
        }
        return gs.size() == g.members.size();
      };
      all_after = all_after && distinct(after);
      all_before = all_before && distinct(before);
      if (all_after && !after.empty()) report(s, g, after, t, cm, true, out);
      if (all_before && !before.empty()) report(s, g, before, t, cm, false, out);
    }
    return out;
  }

 private:
  void report(const Schedule& s, const MatchGroup& ar, const std::vector<const MatchGroup*>& a2as,
              int t, const analysis::CostModel& cm, bool dispatch, std::vector<Finding>& out) const {
    Finding f;
    f.pass = std::string(name());
    std::vector<MatchGroup> all = copy_groups(a2as);
    all.push_back(ar);
    f.ranks = group_ranks(all);
    f.ops = group_ids(s, all);
    // Per rank: the all-to-all carries 1/t; the all-reduce's bytes split into a reduce-scatter
    // and an all-gather (same ring bytes).
    int64_t wire = 0;
    Ns ns = 0;
    for (const MatchGroup* a : a2as) {
      wire = std::max(wire, group_wire_bytes(s, *a));
      const Collective& c = *s.op(a->members[0]).collective();
      const Comm* comm = s.find_comm(c.comm);
      Ns full = group_ns(s, *a, cm);
      Ns part = cm.collective_ns(CollOp::AllToAll, nccl_bytes(s, c) / t,
                                 static_cast<int>(comm->ranks.size()), c.comm, comm->ranks);
      ns = std::max(ns, full - part);
    }
    f.saving_bytes = wire - wire / t;
    f.saving_ns = ns;
    f.legal = false;
    std::string ar_name = op_name(s.op(ar.members[0]));
    std::string a2a_name = op_name(s.op(a2as.front()->members[0]));
    if (dispatch) {
      f.summary = ar_name + " + " + a2a_name +
                  " -> reduce-scatter + all-to-all of 1/" + std::to_string(t) + " of the tokens";
      f.assumption = "assumes the " + std::to_string(t) +
                     " tensor-parallel ranks may each dispatch and process 1/" +
                     std::to_string(t) + " of the tokens (identical expert work on every TP rank; "
                     "the all-gather moves after the combine)";
    } else {
      f.summary = a2a_name + " + " + ar_name + " (mirror) -> all-to-all of 1/" +
                  std::to_string(t) + " + all-gather";
      f.assumption = "assumes the " + std::to_string(t) +
                     " tensor-parallel ranks each combine 1/" + std::to_string(t) +
                     " of the tokens and all-gather them after";
    }
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Pass> make_tp_ep() { return std::make_unique<TpEp>(); }

}  // namespace braid::fusion::passes

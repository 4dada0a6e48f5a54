// sp-ep: a sequence-parallel All-Gather followed by the MoE dispatch All-to-All. Through the
// router and permute, the MoE block runs on each rank's own sequence shard (fusion/passes/
// moe_block.h: the All-Gathers go, All-to-Alls of 1/t); a direct All-Gather -> All-to-All chain
// becomes one many-to-many from the shards; the combine side's All-to-All followed by the
// Reduce-Scatter is advice where no rewrite covers it.
#include <set>

#include "fusion/passes/chimera_util.h"
#include "fusion/passes/moe_block.h"

namespace braid::fusion::passes {
namespace {

class SpEp : public DataflowPass {
 public:
  SpEp()
      : DataflowPass("sp-ep",
                     "All-Gather + dispatch All-to-All -> All-to-All on sequence shards; combine "
                     "All-to-All + Reduce-Scatter likewise") {}
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    // Through the router and permute: the MoE block on the rank's own shard (moe_block.h).
    find_moe_rewrites(df, cm, focus, CollOp::AllGather, std::string(name()), false, out);
    std::set<int64_t> rewritten;
    for (const Finding& f : out)
      if (f.legal) rewritten.insert(f.ops.begin(), f.ops.end());
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->hits(s, g.members)) continue;
      if (g.op == CollOp::AllGather) dispatch(df, g, cm, out);
      if (g.op == CollOp::AllToAll && !rewritten.count(s.op(g.members[0]).id))
        combine(df, g, cm, out);
    }
    return out;
  }

 private:
  // The closed form: the all-gather's bytes and (t-1)/t of the all-to-all's are saved, the
  // all-to-all carrying only the rank's own 1/t of the sequence.
  static void closed_form(const Schedule& s, const MatchGroup& sp, const MatchGroup& a2a,
                          const analysis::CostModel& cm, Finding& f) {
    const Collective& c = *s.op(a2a.members[0]).collective();
    const Comm* ec = s.find_comm(c.comm);
    const int t = static_cast<int>(s.find_comm(s.op(sp.members[0]).collective()->comm)->ranks.size());
    const int64_t a2a_bytes = collective_bytes(s, c);
    const int64_t a2a_wire = group_wire_bytes(s, a2a);
    f.saving_bytes = group_wire_bytes(s, sp) + a2a_wire - a2a_wire / t;
    f.saving_ns = group_ns(s, sp, cm) + group_ns(s, a2a, cm) -
                  cm.collective_ns(CollOp::AllToAll, a2a_bytes / t,
                                   static_cast<int>(ec->ranks.size()), c.comm, ec->ranks);
  }

  // A direct All-Gather -> All-to-All chain: one many-to-many from the shards (movement.cc).
  void dispatch(const Dataflow& df, const MatchGroup& g, const analysis::CostModel& cm,
                std::vector<Finding>& out) const {
    const Schedule& s = df.schedule();
    std::vector<MatchGroup> a2as;
    for (const OpRef& m : g.members) {
      auto r = reach(df, m, s.op(m).collective()->out, CollOp::AllToAll, 3);
      if (r.empty() || !r[0].via.empty()) return;  // through compute: find_moe_rewrites
      bool seen = false;
      for (const MatchGroup& x : a2as) seen = seen || (x.comm == r[0].group->comm && x.seq == r[0].group->seq);
      if (!seen) a2as.push_back(*r[0].group);
    }
    const std::string summary = op_name(s.op(g.members[0])) + " + " +
                                op_name(s.op(a2as[0].members[0])) +
                                " -> all-to-all on the sequence shards";
    Finding f;
    MovementPlan p = plan_movement(df, {g}, a2as, cm, "a2a-shards");
    if (!finding_from_plan(p, std::string(name()), summary, f)) return;
    if (!f.legal) closed_form(s, g, a2as[0], cm, f);
    out.push_back(std::move(f));
  }

  // Combine mirror: the all-to-all's output reaches a reduce-scatter (back to the sequence
  // shards) on every member; reported once per reduce-scatter group.
  void combine(const Dataflow& df, const MatchGroup& a, const analysis::CostModel& cm,
               std::vector<Finding>& out) const {
    const Schedule& s = df.schedule();
    std::vector<const MatchGroup*> rss;
    for (const OpRef& m : a.members) {
      auto r = reach(df, m, s.op(m).collective()->out, CollOp::ReduceScatter, 3);
      if (r.empty()) return;
      if (std::find(rss.begin(), rss.end(), r[0].group) == rss.end()) rss.push_back(r[0].group);
    }
    for (const MatchGroup* rs : rss) {
      // Only from the all-to-all whose first member is in this reduce-scatter: once per pair.
      Finding f;
      f.pass = std::string(name());
      f.ranks = group_ranks({a, *rs});
      f.ops = group_ids(s, {a, *rs});
      closed_form(s, *rs, a, cm, f);
      f.legal = false;
      f.summary = op_name(s.op(a.members[0])) + " + " + op_name(s.op(rs->members[0])) +
                  " (combine) -> all-to-all returning each token to its sequence shard";
      f.assumption = "assumes the combine returns every token to the rank owning its sequence "
                     "shard, so the reduce-scatter's sum is done by the expert side (a reduction "
                     "cannot be folded into a data-movement op exactly in the IR)";
      out.push_back(std::move(f));
    }
  }
};
}  // namespace

std::unique_ptr<Pass> make_sp_ep() { return std::make_unique<SpEp>(); }

}  // namespace braid::fusion::passes

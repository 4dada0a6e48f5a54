// The MoE block rewrite (moe_block.h): the search for seeds and their components and the
// findings (summary, advice's closed form, predicted saving). Regions are built in
// moe_region.cc, their legality and the rewrite are moe_plan.cc's.
#include "fusion/passes/moe_block.h"

#include <map>
#include <optional>
#include <set>

#include "fusion/passes/chimera_util.h"
#include "fusion/passes/moe_plan.h"
#include "fusion/passes/moe_region.h"

namespace braid::fusion::passes {
namespace {

using moe::apply_plan;
using moe::build_regions;
using moe::Cand;
using moe::Plan;
using moe::Planner;
using moe::RankPlan;
using moe::Region;
using moe::Role;

class Finder {
 public:
  Finder(const Dataflow& df, const analysis::CostModel& cm, CollOp seed, std::string pass,
         bool direct)
      : df_(df), s_(df.schedule()), cm_(cm), seed_(seed), pass_(std::move(pass)), direct_(direct) {}

  void run(const Focus* focus, std::vector<Finding>& out) {
    std::vector<Cand> cands;
    std::map<const MatchGroup*, std::vector<size_t>> by_a2a;
    for (const MatchGroup& g : df_.matching().groups) {
      if (g.op != seed_) continue;
      // A focused search (the pipeline's look-ahead) only from seeds it names: the reach to the
      // all-to-all is the costly part of the search.
      if (focus && !focus->hits(s_, g.members)) continue;
      const Comm* tp = s_.find_comm(s_.op(g.members[0]).collective()->comm);
      if (!tp || tp->ranks.size() < 2) continue;
      Cand c{&g, {}, {}, true};
      bool ok = true;
      for (const OpRef& m : g.members) {
        auto r = reach(df_, m, s_.op(m).collective()->out, CollOp::AllToAll, 4);
        if (r.empty()) {
          ok = false;
          break;
        }
        // Row-wise compute on the way without the routing transpose: the TP ranks already
        // route different tokens (a block rewritten before) or route in a layout this rule is
        // not about.
        bool rows = false, routed = false;
        for (const OpRef& v : r[0].via) {
          rows = rows || s_.op(v).compute()->row_wise();
          routed = routed || !s_.op(v).compute()->transpose.empty();
        }
        ok = ok && (routed || !rows);
        c.routed = c.routed && routed;
        c.a2a.push_back(r[0].group);
        c.via.push_back(r[0].via);
      }
      if (!ok) continue;
      bool all_direct = true;
      for (const auto& v : c.via) all_direct = all_direct && v.empty();
      if (all_direct && !direct_) continue;
      for (const MatchGroup* a : c.a2a) by_a2a[a].push_back(cands.size());
      cands.push_back(std::move(c));
    }
    // Components: seeds sharing an all-to-all are rewritten together (every TP group whose
    // ranks dispatch to each other), in schedule order.
    std::vector<bool> done(cands.size(), false);
    for (size_t ci = 0; ci < cands.size(); ++ci) {
      if (done[ci]) continue;
      std::vector<size_t> comp{ci};
      done[ci] = true;
      for (size_t k = 0; k < comp.size(); ++k)
        for (const MatchGroup* a : cands[comp[k]].a2a)
          for (size_t o : by_a2a[a])
            if (!done[o]) {
              done[o] = true;
              comp.push_back(o);
            }
      bool in_focus = !focus;
      for (size_t k : comp) in_focus = in_focus || focus->hits(s_, cands[k].seed->members);
      if (in_focus) component(cands, comp, out);
    }
  }

 private:
  void component(const std::vector<Cand>& cands, const std::vector<size_t>& comp,
                 std::vector<Finding>& out) {
    const MatchGroup& g0 = *cands[comp[0]].seed;
    const Comm& tp = *s_.find_comm(s_.op(g0.members[0]).collective()->comm);
    const int t = static_cast<int>(tp.ranks.size());
    std::vector<const MatchGroup*> a2as;
    bool routed = true;
    for (size_t k : comp) {
      routed = routed && cands[k].routed;
      for (const MatchGroup* a : cands[k].a2a)
        if (std::find(a2as.begin(), a2as.end(), a) == a2as.end()) a2as.push_back(a);
    }
    Finding f;
    f.pass = pass_;
    f.summary = summary(g0, *a2as[0], t);
    std::string why;
    std::vector<Region> regions;
    std::optional<Plan> plan;
    if (!routed) {
      why = "no row-wise routing (permute) between the " + seed_name() +
            " and the all-to-all shows which tokens each rank dispatches";
    } else {
      const bool built = build_regions(df_, cands, comp, t, seed_name(), regions, why);
      // A region overlapping one found before (the backward's collective reaching the same
      // block's backward) is part of that finding.
      for (const Region& r : regions)
        for (const OpRef& o : r.ops())
          if (claimed_.count(s_.op(o).id)) return;
      if (built) plan = Planner(df_, cm_, seed_, pass_).make_plan(cands, comp, regions, t, why);
    }
    for (size_t k : comp)
      for (int64_t id : member_ids(s_, *cands[k].seed)) f.ops.push_back(id);
    for (const MatchGroup* a : a2as)
      for (int64_t id : member_ids(s_, *a)) f.ops.push_back(id);
    for (const Region& r : regions)
      for (const OpRef& o : r.ops()) f.ops.push_back(s_.op(o).id);
    if (plan)
      for (const RankPlan& rp : plan->ranks)
        f.ops.insert(f.ops.end(), rp.drop.begin(), rp.drop.end());
    sort_unique(f.ops);
    // One finding per block: later candidates reaching into this region (the backward's
    // collective reaching the block's backward) are part of it, applied or advice.
    for (const Region& r : regions)
      for (const OpRef& o : r.ops()) claimed_.insert(s_.op(o).id);
    for (size_t k : comp)
      for (int32_t r : member_ranks(*cands[k].seed)) f.ranks.push_back(r);
    for (const MatchGroup* a : a2as)
      for (int32_t r : member_ranks(*a)) f.ranks.push_back(r);
    sort_unique(f.ranks);
    if (plan) {
      saving(*plan, regions[0], f);
      f.legal = true;
      f.rewrite = [p = *plan](Schedule& x) { apply_plan(x, p); };
    } else {
      closed_form(cands, comp, a2as, t, f);
      f.legal = false;
      f.assumption = assumption(t) + (why.empty() ? std::string() : " (not applied: " + why + ")");
    }
    out.push_back(std::move(f));
  }

  std::string seed_name() const { return seed_ == CollOp::AllReduce ? "all-reduce" : "all-gather"; }

  std::string summary(const MatchGroup& g, const MatchGroup& a, int t) const {
    const std::string frac = "1/" + std::to_string(t);
    std::string head = op_name(s_.op(g.members[0])) + " + " + op_name(s_.op(a.members[0]));
    if (seed_ == CollOp::AllReduce)
      return head + " -> reduce-scatter, the MoE block on " + frac +
             " of the tokens per TP rank (all-to-alls of " + frac + "), all-gather after it";
    return head + " -> the MoE block on the rank's own sequence shard (all-to-alls of " + frac +
           ", no all-gather)";
  }

  std::string assumption(int t) const {
    const std::string n = std::to_string(t);
    if (seed_ == CollOp::AllReduce)
      return "assumes the " + n + " tensor-parallel ranks may each dispatch and process 1/" + n +
             " of the tokens (identical expert work on every TP rank; the all-gather moves after "
             "the combine)";
    return "assumes the routing / permutation can work on the rank's own sequence shard, so each "
           "rank dispatches only its own tokens";
  }

  // Advice: the all-to-alls' (t-1)/t, plus the all-gather for sp-ep (Chimera's closed forms).
  void closed_form(const std::vector<Cand>& cands, const std::vector<size_t>& comp,
                   const std::vector<const MatchGroup*>& a2as, int t, Finding& f) const {
    int64_t wire = 0;
    Ns ns = 0;
    for (const MatchGroup* a : a2as) {
      wire = std::max(wire, group_wire_bytes(s_, *a));
      const Collective& c = *s_.op(a->members[0]).collective();
      const Comm* comm = s_.find_comm(c.comm);
      ns = std::max(
          ns, group_ns(s_, *a, cm_) -
                  cm_.collective_ns(CollOp::AllToAll, collective_bytes(s_, c) / t,
                                    static_cast<int>(comm->ranks.size()), c.comm, comm->ranks));
    }
    f.saving_bytes = wire - wire / t;
    f.saving_ns = ns;
    if (seed_ == CollOp::AllGather) {
      f.saving_bytes += group_wire_bytes(s_, *cands[comp[0]].seed);
      f.saving_ns += group_ns(s_, *cands[comp[0]].seed, cm_);
    }
  }

  // Predicted saving on the first rank of the component.
  void saving(const Plan& plan, const Region& r, Finding& f) const {
    const int t = plan.t;
    const RankPlan& rp = plan.ranks[0];
    const Comm& tp = *s_.find_comm(rp.tp_comm);
    auto hypothetical = [&](CollOp op, const std::string& dtype, int64_t count, Ns& ns) {
      Collective c;
      c.op = op;
      c.comm = rp.tp_comm;
      c.dtype = dtype;
      c.count = count;
      ns = cm_.collective_ns(op, collective_bytes(s_, c), t, rp.tp_comm, tp.ranks);
      return wire_bytes(s_, c, rp.rank);
    };
    int64_t bytes = 0, delta = 0;
    Ns ns = 0;
    std::string delta_dtype;
    for (const OpRef& o : r.ops()) {
      const Op& op = s_.op(o);
      if (const Compute* c = op.compute()) {
        ns += c->duration_ns - c->duration_ns / t;
        if (c->sum_rows) {
          delta += c->writes[0].count;
          delta_dtype = s_.ranks[o.rank].find_buffer(c->writes[0].buffer)->dtype;
          ns -= plan.add_ns;
        }
        continue;
      }
      const Collective& c = *op.collective();
      const MatchGroup* g = df_.group(o);
      const int64_t w = wire_bytes(s_, c, o.rank);
      switch (r.role(o)) {
        case Role::Seed:
          if (seed_ == CollOp::AllReduce) {
            Ns rs = 0;
            bytes += w - hypothetical(CollOp::ReduceScatter, c.dtype, c.count / t, rs);
            ns += group_ns(s_, *g, cm_) - rs;
          } else if (!rp.keep_seed) {
            bytes += w;
            ns += group_ns(s_, *g, cm_);
          }
          break;
        case Role::LocalSum:
          bytes += w;
          ns += group_ns(s_, *g, cm_) - plan.local_sum_ns;
          break;
        default: {
          const Comm* comm = s_.find_comm(c.comm);
          bytes += w - w / t;
          ns += group_ns(s_, *g, cm_) -
                cm_.collective_ns(CollOp::AllToAll, collective_bytes(s_, c) / t,
                                  static_cast<int>(comm->ranks.size()), c.comm, comm->ranks);
        }
      }
    }
    for (int64_t id : rp.drop) {
      const OpRef at = must_find(s_, id);
      bytes += wire_bytes(s_, *s_.op(at).collective(), at.rank);
      ns += group_ns(s_, *df_.group(at), cm_);
    }
    for (const auto& [w, sl] : rp.exits) {
      Ns ag = 0;
      const Buffer* b = s_.ranks[rp.rank].find_buffer(sl.buffer);
      bytes -= hypothetical(CollOp::AllGather, b->dtype, sl.count / t, ag);
      ns -= ag;
    }
    if (delta > 0) {
      Ns ar = 0;
      bytes -= hypothetical(CollOp::AllReduce, delta_dtype, delta, ar);
      ns -= ar;
    }
    f.saving_bytes = bytes;
    f.saving_ns = ns;
  }

  const Dataflow& df_;
  const Schedule& s_;
  const analysis::CostModel& cm_;
  CollOp seed_;
  std::string pass_;
  bool direct_ = true;
  std::set<int64_t> claimed_;
};

}  // namespace

void find_moe_rewrites(const Dataflow& df, const analysis::CostModel& cm, const Focus* focus,
                       CollOp seed, const std::string& pass, bool direct,
                       std::vector<Finding>& out) {
  Finder(df, cm, seed, pass, direct).run(focus, out);
}

}  // namespace braid::fusion::passes

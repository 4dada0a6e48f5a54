// pp-sp: a sequence-parallel All-Gather followed by the pipeline P2P of the gathered tensor
// becomes a many-to-many multicast: every rank sends its shard straight to the next stage.
// The mirror (P2P then Reduce-Scatter, in backward) reduces, so it is reported, not rewritten.
#include "fusion/passes/chimera_util.h"

namespace braid::fusion::passes {
namespace {

class PpSp : public DataflowPass {
 public:
  PpSp() : DataflowPass("pp-sp", "All-Gather + P2P -> many-to-many multicast of shards") {}
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->any(g.members)) continue;
      if (g.op == CollOp::AllGather) gather_send(df, g, cm, out);
      if (g.op == CollOp::ReduceScatter) recv_reduce_scatter(df, g, cm, out);
    }
    return out;
  }

 private:
  void gather_send(const Dataflow& df, const MatchGroup& g, const analysis::CostModel& cm,
                   std::vector<Finding>& out) const {
    const Schedule& s = df.schedule();
    std::vector<const MatchGroup*> sends;
    for (const OpRef& m : g.members) {
      auto r = reader_groups(df, m, s.op(m).collective()->out, CollOp::Send);
      if (r.empty()) return;
      for (auto* x : r)
        if (std::find(sends.begin(), sends.end(), x) == sends.end()) sends.push_back(x);
    }
    MovementPlan p = plan_movement(df, {g}, copy_groups(sends), cm, "m2m-multicast");
    Finding f;
    if (finding_from_plan(p, std::string(name()),
                          op_name(s.op(g.members[0])) +
                              " + P2P -> many-to-many multicast of shards to the next stage",
                          f))
      out.push_back(std::move(f));
  }

  // Backward mirror: the gradient arrives by P2P and is reduce-scattered. A many-to-many cannot
  // reduce, so this is advice: the sending stage could reduce-scatter before sending.
  void recv_reduce_scatter(const Dataflow& df, const MatchGroup& g, const analysis::CostModel& cm,
                           std::vector<Finding>& out) const {
    const Schedule& s = df.schedule();
    std::vector<const MatchGroup*> recvs;
    for (const OpRef& m : g.members) {
      auto w = writer_groups(df, m, s.op(m).collective()->in, CollOp::Send);
      if (w.empty()) return;
      for (auto* x : w)
        if (std::find(recvs.begin(), recvs.end(), x) == recvs.end()) recvs.push_back(x);
    }
    const Collective& c = *s.op(g.members[0]).collective();
    const int t = static_cast<int>(s.find_comm(c.comm)->ranks.size());
    Finding f;
    f.pass = std::string(name());
    std::vector<MatchGroup> all = copy_groups(recvs);
    all.push_back(g);
    f.ranks = group_ranks(all);
    f.ops = group_ids(s, all);
    // P2P of the full tensor then reduce-scatter -> each rank receives only its shard.
    int64_t p2p = 0;
    Ns p2p_ns = 0;
    for (auto* x : recvs) {
      p2p = std::max(p2p, group_wire_bytes(s, *x));
      p2p_ns = std::max(p2p_ns, group_ns(s, *x, cm));
    }
    f.saving_bytes = p2p - p2p / t;
    const Collective& send = *s.op(recvs.front()->members[0]).collective();
    f.saving_ns =
        p2p_ns - cm.collective_ns(CollOp::Send, collective_bytes(s, send) / t, 2, send.comm,
                                  {recvs.front()->members[0].rank, recvs.front()->members[1].rank});
    f.legal = false;
    f.summary = "P2P + " + op_name(s.op(g.members[0])) +
                " (backward mirror): send only the shard each rank keeps";
    f.assumption = "assumes the sending stage reduce-scatters the gradient before the P2P (a "
                   "many-to-many cannot reduce, so the IR rewrite is not expressible)";
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Pass> make_pp_sp() { return std::make_unique<PpSp>(); }

}  // namespace braid::fusion::passes

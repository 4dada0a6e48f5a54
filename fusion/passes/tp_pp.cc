// tp-pp: Megatron's scatter/gather for pipeline parallelism with tensor parallelism. An
// All-Reduce over the TP group whose result reaches (directly or through compute such as the
// residual) a P2P send on every member, the t sends going to t ranks that form one TP group of
// the next stage: every TP rank sends the same full activation M. Reduce-scatter instead, send
// the rank's 1/t shard, and all-gather on the receiving stage. Legal only if the sent activation
// is identical on the t ranks, which the IR cannot prove (compute and initial data are per rank),
// so this is always advice. The backward (the input-gradient All-Reduce, then the send to the
// previous stage) is the same pattern.
#include <set>

#include "fusion/passes/chimera_util.h"

namespace braid::fusion::passes {
namespace {

class TpPp : public Pass {
 public:
  std::string_view name() const override { return "tp-pp"; }
  std::string_view description() const override {
    return "All-Reduce + P2P of the full activation on every TP rank -> Reduce-Scatter + P2P of "
           "1/t + All-Gather on the next stage (advice)";
  }
  std::vector<Finding> find_in(const Schedule& s, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    std::optional<Dataflow> own_df;
    const Dataflow& df = dataflow_of(s, focus, own_df);
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->hits(s, g.members)) continue;
      if (g.op != CollOp::AllReduce) continue;
      const Collective& c0 = *s.op(g.members[0]).collective();
      const int t = static_cast<int>(s.find_comm(c0.comm)->ranks.size());
      if (t < 2 || c0.count % t != 0) continue;
      // The nearest send each member's result reaches, directly or through one compute op (the
      // residual forward, the norm's backward): the all-reduce that produces the stage's output.
      std::vector<const MatchGroup*> sends;
      std::vector<OpRef> via;
      std::set<int32_t> receivers;
      bool all = true;
      for (const OpRef& m : g.members) {
        auto r = reach(df, m, s.op(m).collective()->out, CollOp::Send, 1);
        if (r.empty()) {
          all = false;
          break;
        }
        const MatchGroup* p = r[0].group;
        const Collective& sc = *s.op(p->members[0]).collective();
        // The full activation: the send carries as many elements as the all-reduce.
        if (sc.count != c0.count || p->members[0].rank != m.rank) {
          all = false;
          break;
        }
        sends.push_back(p);
        receivers.insert(p->members[1].rank);
        via.insert(via.end(), r[0].via.begin(), r[0].via.end());
      }
      if (!all || static_cast<int>(receivers.size()) != t) continue;
      // The receivers must form a communicator of their own (the next stage's TP group), over
      // which they can all-gather.
      const Comm* next_tp = nullptr;
      for (const Comm& c : s.comms) {
        std::set<int32_t> members(c.ranks.begin(), c.ranks.end());
        if (members == receivers && static_cast<int>(c.ranks.size()) == t) next_tp = &c;
      }
      if (!next_tp) continue;
      out.push_back(report(s, g, sends, *next_tp, via, t, cm));
    }
    return out;
  }

 private:
  Finding report(const Schedule& s, const MatchGroup& ar, const std::vector<const MatchGroup*>& sends,
                 const Comm& next_tp, const std::vector<OpRef>& via, int t,
                 const analysis::CostModel& cm) const {
    const Collective& c0 = *s.op(ar.members[0]).collective();
    const Comm& tp = *s.find_comm(c0.comm);
    const int64_t bytes = c0.count * dtype_bytes_of(c0.dtype);
    Finding f;
    f.pass = std::string(name());
    std::vector<MatchGroup> all = copy_groups(sends);
    all.push_back(ar);
    f.ranks = group_ranks(all);
    f.ops = group_ids(s, all);
    // Per rank (every stage both sends and receives in steady state): the all-reduce becomes a
    // reduce-scatter ((t-1)/t·M), the P2P carries M/t instead of M ((t-1)/t·M) and the receiving
    // stage adds an all-gather ((t-1)/t·M): (t-1)/t·M net.
    const int64_t p2p_wire = bytes;
    const int64_t rs_wire = bytes * (t - 1) / t;
    const int64_t ag_wire = bytes * (t - 1) / t;
    f.saving_bytes = group_wire_bytes(s, ar) - rs_wire + (p2p_wire - p2p_wire / t) - ag_wire;
    Ns p2p = 0, p2p_shard = 0;
    for (const MatchGroup* p : sends) {
      const Collective& sc = *s.op(p->members[0]).collective();
      const Comm* pc = s.find_comm(sc.comm);
      p2p = std::max(p2p, group_ns(s, *p, cm));
      p2p_shard = std::max(p2p_shard, cm.collective_ns(CollOp::Send, bytes / t,
                                                        static_cast<int>(pc->ranks.size()),
                                                        sc.comm, pc->ranks));
    }
    const Ns rs = cm.collective_ns(CollOp::ReduceScatter, bytes, t, c0.comm, tp.ranks);
    const Ns ag = cm.collective_ns(CollOp::AllGather, bytes, t, next_tp.id, next_tp.ranks);
    f.saving_ns = group_ns(s, ar, cm) + p2p - rs - p2p_shard - ag;
    f.legal = false;
    f.summary = op_name(s.op(ar.members[0])) + " + P2P of the full activation on all " +
                std::to_string(t) + " TP ranks -> reduce-scatter, P2P of 1/" + std::to_string(t) +
                ", all-gather on '" + next_tp.id + "'";
    f.assumption = "assumes the activation sent is identical on the " + std::to_string(t) +
                   " ranks of '" + c0.comm + "' (replicated after the all-reduce" +
                   (via.empty() ? std::string() : " and " + name_ops(s, via)) +
                   ", as in Megatron), so each may send only its 1/" + std::to_string(t) +
                   " shard and the receivers all-gather it";
    return f;
  }
};

}  // namespace

std::unique_ptr<Pass> make_tp_pp() { return std::make_unique<TpPp>(); }

}  // namespace braid::fusion::passes

// tp-pp: Megatron's scatter/gather for pipeline parallelism with tensor parallelism (Chimera
// TP+PP). An All-Reduce over the TP group whose result reaches (directly or through one compute
// op, the residual) a P2P send on every member, the t sends going to t ranks that form one TP
// group of the next stage: every TP rank sends the same full activation M. Reduce-scatter
// instead, compute the residual on the rank's shard only, send that 1/t shard, and all-gather
// on the receiving stage. Legal when the sent activation is provably identical on the t ranks
// (fusion/passes/replicas.h: the residual stream is replicated compute over the TP group), the
// j-th sender feeds the j-th member of the receiving group, nothing else on the sender reads the
// full All-Reduce output or the residual's output, and the residual's reads follow the split;
// otherwise advice. The backward (the input-gradient All-Reduce, then the send to the previous
// stage) is the same pattern.
#include <set>

#include "fusion/passes/chimera_util.h"
#include "fusion/passes/replicas.h"

namespace braid::fusion::passes {
namespace {

class TpPp : public DataflowPass {
 public:
  TpPp()
      : DataflowPass(
            "tp-pp",
            "All-Reduce + P2P of the full activation on every TP rank -> Reduce-Scatter + P2P of "
            "1/t + All-Gather on the next stage") {}
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    Replicas replicas(df);
    std::vector<std::optional<Plan>> plans;  // per finding
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
      std::vector<std::vector<OpRef>> via_of;  // per member
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
        via_of.push_back(r[0].via);
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
      Finding f = report(s, g, sends, *next_tp, via, t, cm);
      std::string why;
      auto plan = make_plan(df, replicas, g, sends, via_of, *next_tp, t, why);
      if (!plan && !why.empty()) f.assumption += " (not applied: " + why + ")";
      out.push_back(std::move(f));
      plans.push_back(std::move(plan));
    }
    // Each plan's rewrite must leave a valid schedule. Validating a copy costs as much as the
    // search, so a caller that validates what it applies (the pipeline) skips it here.
    const bool caller_validates = focus && focus->caller_validates;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!plans[i]) continue;
      std::string why;
      if (!caller_validates) {
        Schedule probe = s;
        apply_plan(probe, *plans[i]);
        if (!valid(probe, &why)) {
          out[i].assumption += " (not applied: the rewritten schedule is not valid: " + why + ")";
          continue;
        }
      }
      out[i].legal = true;
      out[i].assumption.clear();
      out[i].rewrite = [p = *plans[i]](Schedule& x) { apply_plan(x, p); };
    }
    return out;
  }

 private:
  // The rewrite by op ids, per member j of the TP group (index j in both groups).
  struct MemberPlan {
    int64_t ar = -1, via = -1, send = -1, recv = -1;
    int64_t insert_before = -1;  // the receiver's first reader of the data; -1: right after recv
    int index = 0;
  };
  struct Plan {
    std::vector<MemberPlan> members;
    std::string next_comm;
    int t = 0;
  };

  static std::optional<Plan> make_plan(const Dataflow& df, Replicas& replicas, const MatchGroup& ar,
                                       const std::vector<const MatchGroup*>& sends,
                                       const std::vector<std::vector<OpRef>>& via_of,
                                       const Comm& next_tp, int t, std::string& why) {
    const Schedule& s = df.schedule();
    const Comm& tp = *s.find_comm(s.op(ar.members[0]).collective()->comm);
    Plan plan{{}, next_tp.id, t};
    std::vector<std::pair<OpRef, Slice>> sent;
    for (size_t j = 0; j < ar.members.size(); ++j) {
      const OpRef m = ar.members[j];
      const Collective& c = *s.op(m).collective();
      const OpRef send = sends[j]->members[0], recv = sends[j]->members[1];
      const Collective& sc = *s.op(send).collective();
      const Collective& rc = *s.op(recv).collective();
      MemberPlan mp;
      mp.index = tp.index_of(m.rank);
      if (next_tp.index_of(recv.rank) != mp.index) {
        why = "sender " + std::to_string(mp.index) + " of '" + tp.id + "' feeds member " +
              std::to_string(next_tp.index_of(recv.rank)) + " of '" + next_tp.id + "'";
        return std::nullopt;
      }
      mp.ar = s.op(m).id;
      mp.send = s.op(send).id;
      mp.recv = s.op(recv).id;
      // The sender's chain: all-reduce [-> one compute] -> send, nothing else reading the full
      // values, and the compute's reads split by rows.
      Slice sent_value = c.out;
      OpRef last = m;
      if (via_of[j].size() > 1) {
        why = "more than one compute between the all-reduce and the send";
        return std::nullopt;
      }
      if (!via_of[j].empty()) {
        const OpRef v = via_of[j][0];
        const Compute& vc = *s.op(v).compute();
        if (vc.writes.size() != 1 || vc.writes[0].count != c.count) {
          why = "'" + vc.label + "' does not write one activation-sized slice";
          return std::nullopt;
        }
        const int64_t shard = c.count / t;
        for (const Slice& r : vc.reads)
          if (r.count < c.count && (r.count == 0 || shard % r.count != 0)) {
            why = "'" + vc.label + "' reads '" + r.buffer + "' in a way a row split cannot follow";
            return std::nullopt;
          }
        if (!only_reader(df, m, c.out, v, why)) return std::nullopt;
        mp.via = s.op(v).id;
        sent_value = vc.writes[0];
        last = v;
      }
      if (!(sc.in == sent_value)) {
        why = "the send does not carry the whole activation";
        return std::nullopt;
      }
      if (!only_reader(df, last, sent_value, send, why)) return std::nullopt;
      sent.push_back({send, sc.in});
      // The receiver: the all-gather goes right before its first reader of the data (all on one
      // stream), or right after the receive when nothing reads it.
      Uses u = df.uses_after(recv, rc.out);
      if (!u.known()) {
        why = "the receiver's uses of '" + rc.out.buffer + "' cannot be known";
        return std::nullopt;
      }
      std::optional<OpRef> first;
      for (const auto& r : u.readers) {
        if (first && r.op.stream != first->stream) {
          why = "the receiver reads '" + rc.out.buffer + "' on two streams";
          return std::nullopt;
        }
        if (!first || r.op.index < first->index) first = r.op;
      }
      if (first) mp.insert_before = s.op(*first).id;
      plan.members.push_back(mp);
    }
    if (!replicas.same(sent)) {
      why = "the sent activations are not provably identical on the ranks of '" + tp.id + "'";
      return std::nullopt;
    }
    return plan;
  }

  // True when `reader` is the only op reading the value `at` leaves in `slice`, and the value
  // is not a result of the step.
  static bool only_reader(const Dataflow& df, OpRef at, const Slice& slice, OpRef reader,
                          std::string& why) {
    Uses u = df.uses_after(at, slice);
    if (!u.known() || !u.live_at_end.empty()) {
      why = "'" + slice.buffer + "' is " + (u.known() ? "a result of the step" : "used in ways not known");
      return false;
    }
    for (const auto& r : u.readers)
      if (r.op != reader) {
        why = "'" + slice.buffer + "' is also read by " + describe(df.schedule(), r.op);
        return false;
      }
    return true;
  }

  static void apply_plan(Schedule& x, const Plan& p) {
    int64_t& next = x.op_id_counter();
    for (const MemberPlan& m : p.members) {
      Collective& ar = *x.op(must_find(x, m.ar)).collective();
      const int64_t shard = ar.count / p.t, at = m.index * shard;
      ar.op = CollOp::ReduceScatter;
      ar.count = shard;
      ar.out = ar.out.sub(at, shard);
      if (m.via >= 0) {
        Op& vo = x.op(must_find(x, m.via));
        Compute& v = *vo.compute();
        const int64_t full = v.writes[0].count;
        for (Slice& r : v.reads)
          if (r.count >= full) r = r.sub(at, shard);
        v.writes[0] = v.writes[0].sub(at, shard);
        v.duration_ns /= p.t;
      }
      Collective& sc = *x.op(must_find(x, m.send)).collective();
      sc.count = shard;
      sc.in = sc.in.sub(at, shard);
      const OpRef rr = must_find(x, m.recv);
      Collective& rc = *x.op(rr).collective();
      rc.count = shard;
      const Slice full = rc.out;
      rc.out = full.sub(at, shard);
      Collective ag;
      ag.op = CollOp::AllGather;
      ag.comm = p.next_comm;
      ag.dtype = rc.dtype;
      ag.count = shard;
      ag.in = full.sub(at, shard);
      ag.out = full;
      ag.label = rc.label + ".allgather";
      Op op = make_op(next, ag, {m.ar, m.send});
      if (m.insert_before >= 0) {
        const OpRef b = must_find(x, m.insert_before);
        insert_op(x, b.rank, b.stream, b.index, std::move(op));
      } else {
        insert_op(x, rr.rank, rr.stream, rr.index + 1, std::move(op));
      }
    }
  }

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

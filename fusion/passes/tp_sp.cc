// tp-sp: an All-Reduce whose later readers (on every member, before the next write) read only
// the rank's own shard becomes a Reduce-Scatter; the All-Gather disappears, or moves to just
// before the first op that reads the full tensor. Also removes an all-gather (e.g. one left by
// decompose) whose gathered part nobody reads. Backward is the same rule on the gradient's
// all-reduce (its all-gather lands before the row-parallel GEMM's backward).
#include <cmath>

#include "fusion/labels.h"
#include "fusion/lift.h"
#include "fusion/passes/passes.h"

namespace braid::fusion::passes {
namespace {

struct MemberUse {
  OpRef ref;
  Slice out, shard;
  std::vector<OpRef> full;  // readers outside the shard
  bool full_at_end = false;
  std::vector<OpRef> opaque;
  bool unordered = false;
};

MemberUse use_of(const Dataflow& df, OpRef ref, const Slice& out, const Slice& shard) {
  MemberUse m{ref, out, shard, {}, false, {}, false};
  Uses u = df.uses_after(ref, out);
  m.opaque = u.opaque;
  // Opaque compute not ordered with the collective (a lifted kernel on another stream with no
  // event seen between them) is an unknown reader like ordered opaque compute: it makes the
  // finding advice. A declared op racing with it makes the uses unknowable: no finding.
  for (OpRef r : u.unordered) {
    const Compute* c = df.schedule().op(r).compute();
    if (c && c->opaque)
      m.opaque.push_back(r);
    else
      m.unordered = true;
  }
  for (const auto& r : u.readers)
    if (!r.elems.within(shard.offset, shard.end())) m.full.push_back(r.op);
  m.full_at_end = !u.live_at_end.within(shard.offset, shard.end());
  return m;
}

// Why the all-reduce cannot become a reduce-scatter on this member: the first known reader of
// elements outside the member's shard, with what it reads, or the buffer being a result of the
// step. "" when neither.
std::string breaks_shard(const Schedule& s, const MemberUse& m, bool readers) {
  const std::string shard = "rank " + std::to_string(m.ref.rank) + "'s shard (elements " +
                            std::to_string(m.shard.offset) + "-" +
                            std::to_string(m.shard.end() - 1) + ")";
  for (OpRef r : readers ? m.full : std::vector<OpRef>{}) {
    Access a = access_of(s, r.rank, s.op(r));
    for (const Slice& x : a.reads) {
      if (!x.overlaps(m.out)) continue;
      const int64_t lo = std::max(x.offset, m.out.offset), hi = std::min(x.end(), m.out.end());
      const Op& op = s.op(r);
      std::string name = op.compute() ? short_label(op.compute()->label) : op_name(op);
      return "op " + std::to_string(op.id) + " " + name + " reads elements " + std::to_string(lo) +
             "-" + std::to_string(hi - 1) + " of '" + m.out.buffer + "', outside " + shard;
    }
  }
  if (!readers && m.full_at_end)
    return "'" + m.out.buffer + "' is a result of the step on rank " + std::to_string(m.ref.rank) +
           " (kept whole after it), outside " + shard;
  return "";
}

// Where the all-gather goes on one member: before the first full reader, or at the end of the
// all-reduce's stream when only the buffer's final contents need the full tensor.
struct Placement {
  int32_t stream = -1;
  int64_t before_id = -1;  // -1: append at the end of the stream
  int seq = 0;             // collectives of the communicator before it on this rank
};

std::optional<Placement> place(const Dataflow& df, const MemberUse& m, const std::string& comm) {
  const Schedule& s = df.schedule();
  const auto& hb = df.hb();
  OpRef at;
  Placement p;
  if (!m.full.empty()) {
    // The earliest full reader must come before every other one.
    std::optional<OpRef> first;
    for (OpRef r : m.full) {
      bool earliest = true;
      for (OpRef o : m.full)
        if (o != r && !hb.before(r, o)) earliest = false;
      if (earliest) first = r;
    }
    if (!first) return std::nullopt;
    at = *first;
    p.stream = at.stream;
    p.before_id = s.op(at).id;
  } else {
    const auto& ops = s.ranks[m.ref.rank].streams[m.ref.stream].ops;
    at = {m.ref.rank, m.ref.stream, static_cast<int32_t>(ops.size()) - 1};
    if (at == m.ref) return std::nullopt;  // right after the reduce-scatter: nothing gained
    p.stream = at.stream;
  }
  // Nothing may write the tensor between the all-reduce and the all-gather.
  Slice whole = m.out;
  for (OpRef w : df.writers_between(m.ref, at, whole))
    if (!(m.full.empty() && w == at)) return std::nullopt;
  if (m.full.empty()) {
    Access a = access_of(s, at.rank, s.op(at));
    for (const Slice& x : a.writes)
      if (x.overlaps(whole)) return std::nullopt;
  }
  // The communicator's order on this rank must stay total, and the new op's place in it known.
  const bool append = p.before_id < 0;
  for (OpRef z : df.collectives_on(m.ref.rank, comm)) {
    const Collective* c = s.op(z).collective();
    if (c->op == CollOp::Send || c->op == CollOp::Recv) continue;
    // On at's own stream the order is the position (no happens-before lookup: a rank's TP
    // communicator carries thousands of collectives, checked for every finding).
    const bool same = z.stream == at.stream;
    bool before =
        z == m.ref || (same ? z.index < at.index : hb.before(z, at)) || (append && z == at);
    bool after = !append && (z == at || (same ? z.index > at.index : hb.before(at, z)));
    if (!before && !after) return std::nullopt;
    if (before) ++p.seq;
  }
  return p;
}

class TpSp : public DataflowPass {
 public:
  TpSp()
      : DataflowPass(
            "tp-sp",
            "All-Reduce read only shard-wise -> Reduce-Scatter; the All-Gather disappears or "
            "moves to the first full consumer") {}
  bool rewrites_advice() const override { return true; }

  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    const bool only_worth = focus && focus->only_worth;
    const bool caller_validates = focus && focus->caller_validates;
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->hits(s, g.members)) continue;
      if (g.op == CollOp::AllReduce) all_reduce(df, g, cm, out, only_worth, caller_validates);
      if (g.op == CollOp::AllGather) dead_all_gather(df, g, cm, out);
    }
    return out;
  }

 private:
  void all_reduce(const Dataflow& df, const MatchGroup& g, const analysis::CostModel& cm,
                  std::vector<Finding>& out, bool only_worth, bool caller_validates) const {
    const Schedule& s = df.schedule();
    const Collective& c0 = *s.op(g.members[0]).collective();
    const Comm* comm = s.find_comm(c0.comm);
    const int64_t t = static_cast<int64_t>(comm->ranks.size());
    if (t < 2 || c0.count == 0 || c0.count % t != 0) return;
    const int64_t shard = c0.count / t;
    std::vector<MemberUse> uses;
    bool any_full = false, unknown = false, unordered = false;
    bool known_full_reader = false, live_at_end = false;
    std::vector<OpRef> opaque;
    for (const OpRef& r : g.members) {
      const Collective& c = *s.op(r).collective();
      int64_t idx = comm->index_of(r.rank);
      uses.push_back(use_of(df, r, c.out, c.out.sub(idx * shard, shard)));
      const MemberUse& m = uses.back();
      any_full = any_full || !m.full.empty() || m.full_at_end;
      known_full_reader = known_full_reader || !m.full.empty();
      live_at_end = live_at_end || m.full_at_end;
      unknown = unknown || !m.opaque.empty();
      unordered = unordered || m.unordered;
      opaque.insert(opaque.end(), m.opaque.begin(), m.opaque.end());
    }
    if (unordered) return;
    // On a lifted schedule, a known reader outside its shard rejects the rewrite by fact: say
    // which (the enabling form below may still move the all-gather to it).
    if (!unknown && any_full && !only_worth && s.lifted.run >= 0) {
      Finding rej;
      rej.pass = std::string(name());
      rej.ranks = member_ranks(g);
      rej.ops = member_ids(s, g);
      rej.summary = op_name(s.op(g.members[0])) + " -> reduce-scatter: rejected";
      for (bool readers : {true, false})
        for (size_t k = 0; k < uses.size() && rej.rejection.empty(); ++k)
          rej.rejection = breaks_shard(s, uses[k], readers);
      out.push_back(std::move(rej));
    }
    const int64_t bytes = c0.count * dtype_bytes_of(c0.dtype);
    Ns ar = group_ns(s, g, cm);
    Ns rs =
        cm.collective_ns(CollOp::ReduceScatter, bytes, static_cast<int>(t), c0.comm, comm->ranks);
    Ns ag = cm.collective_ns(CollOp::AllGather, bytes, static_cast<int>(t), c0.comm, comm->ranks);
    const int64_t ar_wire = group_wire_bytes(s, g);
    const int64_t rs_wire = static_cast<int64_t>(
        std::llround(analysis::wire_factor(CollOp::ReduceScatter, static_cast<int>(t),
                                           analysis::Algorithm::Ring) *
                     static_cast<double>(bytes)));
    Finding f = finding_on(s, g);
    const std::string what = op_name(s.op(g.members[0]));
    if (unknown || !any_full) {
      f.saving_ns = ar - rs;
      f.saving_bytes = ar_wire - rs_wire;
      f.summary = what +
                  " -> reduce-scatter; the all-gather disappears (every reader uses only "
                  "its own shard)";
      // Advice when opaque compute reads the output: the same rewrite, under its assumption
      // (none when a known reader needs the full tensor: the assumption could not hold). A
      // buffer that is an output of the schedule (a lifted step's, whose later readers are the
      // next steps' opaque compute) is part of the assumption.
      f.legal = !unknown;
      if (unknown)
        f.assumption = "assumes " + name_ops(s, opaque) + " read only the rank's own 1/" +
                       std::to_string(t) + " shard of '" + c0.out.buffer + "'" +
                       (live_at_end ? " and nothing after the schedule reads the rest" : "") +
                       " (then the all-gather disappears)";
      std::vector<int64_t> ids = f.ops;
      if (!known_full_reader && (!any_full || unknown)) f.rewrite = [ids, shard](Schedule& x) {
        int64_t& next = x.op_id_counter();
        for (int64_t id : ids) {
          OpRef r = must_find(x, id);
          Collective c = *x.op(r).collective();
          int64_t idx = x.find_comm(c.comm)->index_of(r.rank);
          c.op = CollOp::ReduceScatter;
          c.count = shard;
          c.out = c.out.sub(idx * shard, shard);
          x.op(r) = make_op(next, c, {id});
        }
      };
      out.push_back(std::move(f));
      return;
    }
    // Some member needs the full tensor later: the all-gather moves there, on every member.
    if (only_worth) return;
    std::vector<Placement> places;
    for (const MemberUse& m : uses) {
      auto p = place(df, m, c0.comm);
      if (!p) return;
      if (!places.empty() && places.front().seq != p->seq) return;
      places.push_back(*p);
    }
    f.saving_ns = ar - rs - ag;
    f.saving_bytes = 0;
    f.legal = true;
    f.enabling = true;  // the bytes are the all-reduce's; only a later fusion gains
    f.summary = what +
                " -> reduce-scatter; the all-gather moves to the first op that reads the "
                "full tensor";
    std::vector<int64_t> ids = f.ops;
    f.rewrite = [ids, shard, places](Schedule& x) {
      int64_t& next = x.op_id_counter();
      for (size_t k = 0; k < ids.size(); ++k) {
        OpRef r = must_find(x, ids[k]);
        Collective c = *x.op(r).collective();
        int64_t idx = x.find_comm(c.comm)->index_of(r.rank);
        Collective rs = c, ag = c;
        rs.op = CollOp::ReduceScatter;
        rs.count = shard;
        rs.out = c.out.sub(idx * shard, shard);
        ag.op = CollOp::AllGather;
        ag.count = shard;
        ag.in = rs.out;
        x.op(r) = make_op(next, rs, {ids[k]});
        const Placement& p = places[k];
        if (p.before_id >= 0) {
          OpRef b = must_find(x, p.before_id);
          insert_op(x, b.rank, b.stream, b.index, make_op(next, ag, {ids[k]}));
        } else {
          auto& ops = x.ranks[r.rank].streams[p.stream].ops;
          insert_op(x, r.rank, p.stream, static_cast<int32_t>(ops.size()),
                    make_op(next, ag, {ids[k]}));
        }
      }
    };
    // A moved collective can close a wait cycle with other ranks' P2P: check (unless the
    // caller validates the result before using it).
    if (!caller_validates) {
      Schedule probe = s;
      f.rewrite(probe);
      if (!valid(probe)) return;
    }
    out.push_back(std::move(f));
  }

  // An in-place all-gather (in = the rank's shard of out) whose gathered part is never read.
  void dead_all_gather(const Dataflow& df, const MatchGroup& g, const analysis::CostModel& cm,
                       std::vector<Finding>& out) const {
    const Schedule& s = df.schedule();
    const Collective& c0 = *s.op(g.members[0]).collective();
    const Comm* comm = s.find_comm(c0.comm);
    std::vector<OpRef> opaque;
    for (const OpRef& r : g.members) {
      const Collective& c = *s.op(r).collective();
      int64_t idx = comm->index_of(r.rank);
      Slice mine = c.out.sub(idx * c.count, c.count);
      if (c.in != mine) return;
      MemberUse m = use_of(df, r, c.out, mine);
      if (m.unordered || !m.full.empty() || m.full_at_end) return;
      opaque.insert(opaque.end(), m.opaque.begin(), m.opaque.end());
    }
    Finding f = finding_on(s, g);
    f.saving_ns = group_ns(s, g, cm);
    f.saving_bytes = group_wire_bytes(s, g);
    f.summary = op_name(s.op(g.members[0])) + " removed: no op reads the gathered shards";
    // Advice when opaque compute reads the output: the same removal, under its assumption.
    f.legal = opaque.empty();
    if (!f.legal)
      f.assumption = "assumes " + name_ops(s, opaque) + " read only the rank's own shard of '" +
                     c0.out.buffer + "'";
    std::vector<int64_t> ids = f.ops;
    f.rewrite = [ids](Schedule& x) {
      for (int64_t id : ids) remove_op(x, id);
    };
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Pass> make_tp_sp() { return std::make_unique<TpSp>(); }

}  // namespace braid::fusion::passes

// pp-ep: a pipeline P2P followed by the MoE dispatch All-to-All becomes one many-to-many
// scatter from the previous stage straight to the experts' ranks; mirrored on the combine side
// (All-to-All followed by the P2P to the next stage becomes a many-to-many gather).
#include <map>
#include <set>

#include "fusion/passes/chimera_util.h"

namespace braid::fusion::passes {
namespace {

// Row length (elements per token row) of `sl` as row-wise compute `c` reads or writes it; 0 when
// `c` is positional or does not touch it.
int64_t row_length(const Compute& c, const Slice& sl) {
  if (!c.row_wise()) return 0;
  for (size_t k = 0; k < c.reads.size(); ++k)
    if (c.reads[k].overlaps(sl) && c.read_rows[k] > 0) return c.reads[k].count / c.read_rows[k];
  for (size_t w = 0; w < c.writes.size(); ++w)
    if (c.writes[w].overlaps(sl) && c.write_rows[w] > 0) return c.writes[w].count / c.write_rows[w];
  return 0;
}

// True when the value reaching the collective at the end of `r` still holds the tokens that
// `start` held (same row length through row-wise compute), or when row lengths are unknown.
bool carries_tokens(const Schedule& s, const Reach& r, const Slice& start) {
  if (r.via.empty()) return true;
  const Compute& first = *s.op(r.via.front()).compute();
  const Compute& last = *s.op(r.via.back()).compute();
  const int64_t in = row_length(first, start);
  int64_t out = 0;
  for (size_t w = 0; w < last.writes.size() && last.row_wise(); ++w)
    if (last.write_rows[w] > 0) out = last.writes[w].count / last.write_rows[w];
  return in == 0 || out == 0 || in == out;
}

class PpEp : public DataflowPass {
 public:
  PpEp()
      : DataflowPass(
            "pp-ep",
            "P2P + dispatch All-to-All -> many-to-many scatter; combine All-to-All + P2P -> "
            "many-to-many gather") {}
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    // A focused search (the pipeline's look-ahead after an enabling rewrite) wants patterns
    // holding one of focus->ops; a pattern's ops are its P2P and All-to-All groups, so when no
    // All-to-All (no send) is among them, only P2P (All-to-All) groups that are can start one.
    const bool by_ops = focus && !focus->ops.empty();
    bool a2a_hit = !by_ops, send_hit = !by_ops;
    if (by_ops)
      for (const MatchGroup& g : df.matching().groups) {
        if (g.op == CollOp::AllToAll && focus->hits(s, g.members)) a2a_hit = true;
        if (g.op == CollOp::Send && focus->hits(s, g.members)) send_hit = true;
      }
    // Dispatch: P2P receives whose data reaches an all-to-all (directly, or through compute such
    // as the un-permute in backward).
    std::map<const MatchGroup*, std::vector<std::pair<const MatchGroup*, std::vector<OpRef>>>> fed;
    for (const MatchGroup& p : df.matching().groups) {
      if (focus && !focus->any(p.members)) continue;
      if (!a2a_hit && !focus->hits(s, p.members)) continue;
      if (p.op != CollOp::Send) continue;
      OpRef recv = p.members[1];
      auto r = reach(df, recv, s.op(recv).collective()->out, CollOp::AllToAll, 2);
      while (!r.empty() && !carries_tokens(s, r[0], s.op(recv).collective()->out)) r.erase(r.begin());
      if (!r.empty()) fed[r[0].group].push_back({&p, r[0].via});  // the nearest all-to-all
    }
    for (const auto& [a, feeds] : fed) {
      std::set<int32_t> covered;
      std::vector<const MatchGroup*> p2p;
      std::vector<OpRef> via;
      for (const auto& [p, v] : feeds) {
        covered.insert(p->members[1].rank);
        if (std::find(p2p.begin(), p2p.end(), p) == p2p.end()) p2p.push_back(p);
        via.insert(via.end(), v.begin(), v.end());
      }
      bool all = true;
      for (const OpRef& m : a->members) all = all && covered.count(m.rank);
      if (!all) continue;
      std::string summary = "P2P + " + op_name(s.op(a->members[0])) +
                            " -> many-to-many scatter from the sending stage";
      emit(df, copy_groups(p2p), {*a}, *a, via, cm, summary, "m2m-scatter", out);
    }
    // Combine: the all-to-all's output reaches a P2P send on every member.
    for (const MatchGroup& a : df.matching().groups) {
      if (focus && !focus->any(a.members)) continue;
      if (!send_hit && !focus->hits(s, a.members)) continue;
      if (a.op != CollOp::AllToAll) continue;
      std::vector<const MatchGroup*> sends;
      std::vector<OpRef> via;
      bool all = true;
      for (const OpRef& m : a.members) {
        auto r = reach(df, m, s.op(m).collective()->out, CollOp::Send, 2);
        // The send must carry the tokens, not a per-token by-product (the routing
        // probabilities' gradient computed from the combined tokens in backward).
        while (!r.empty() && !carries_tokens(s, r[0], s.op(m).collective()->out)) r.erase(r.begin());
        all = all && !r.empty();
        if (r.size() > 1) r.resize(1);  // the nearest send
        for (const Reach& x : r) {
          if (std::find(sends.begin(), sends.end(), x.group) == sends.end()) sends.push_back(x.group);
          via.insert(via.end(), x.via.begin(), x.via.end());
        }
      }
      if (!all || sends.empty()) continue;
      std::string summary = op_name(s.op(a.members[0])) +
                            " + P2P -> many-to-many gather into the receiving stage";
      emit(df, {a}, copy_groups(sends), a, via, cm, summary, "m2m-gather", out);
    }
    return out;
  }

 private:
  // A direct chain becomes a many-to-many (or advice when the plan needs an assumption); with
  // compute in between (the MoE un-permute), advice with Chimera's closed form: the all-to-all
  // hop disappears (the P2P's b·s·h stays as the many-to-many's).
  void emit(const Dataflow& df, const std::vector<MatchGroup>& st1,
            const std::vector<MatchGroup>& st2, const MatchGroup& a2a,
            const std::vector<OpRef>& via, const analysis::CostModel& cm,
            const std::string& summary, const std::string& stem, std::vector<Finding>& out) const {
    const Schedule& s = df.schedule();
    Finding f;
    if (via.empty()) {
      MovementPlan p = plan_movement(df, st1, st2, cm, stem);
      if (finding_from_plan(p, std::string(name()), summary, f)) out.push_back(std::move(f));
      return;
    }
    std::vector<MatchGroup> all = st1;
    all.insert(all.end(), st2.begin(), st2.end());
    f.pass = std::string(name());
    f.ranks = group_ranks(all);
    f.ops = group_ids(s, all);
    f.saving_bytes = group_wire_bytes(s, a2a);
    f.saving_ns = group_ns(s, a2a, cm);
    f.legal = false;
    f.summary = summary;
    f.assumption = "assumes " + name_ops(s, via) +
                   " can run on the other side of the P2P (Chimera moves the MoE gate / "
                   "un-permute across the stage boundary) so the all-to-all reads the received "
                   "data directly";
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Pass> make_pp_ep() { return std::make_unique<PpEp>(); }

}  // namespace braid::fusion::passes

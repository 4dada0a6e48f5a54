// coalesce: two collectives of the same kind on one communicator, adjacent on every member's
// stream, on contiguous slices and independent of each other, become one (one launch, one
// latency instead of two). All-Reduce, Broadcast, Reduce and P2P send/recv qualify: their
// element order is the slices' order. (All-Gather / Reduce-Scatter / All-to-All of two slices
// interleave by rank, so they do not merge without a copy.)
#include <map>

#include "fusion/passes/passes.h"

namespace braid::fusion::passes {
namespace {

bool joins(const Slice& a, const Slice& b) {
  if (a.empty() && b.empty()) return true;
  return !a.empty() && !b.empty() && a.buffer == b.buffer && a.end() == b.offset;
}

Slice span(const Slice& a, const Slice& b) {
  if (a.empty()) return a;
  return {a.buffer, a.offset, a.count + b.count};
}

class Coalesce : public DataflowPass {
 public:
  Coalesce()
      : DataflowPass("coalesce",
                     "adjacent independent collectives on one communicator -> one collective") {}
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    const auto& groups = df.matching().groups;
    // Groups by (comm, channel) in sequence order.
    std::map<std::tuple<std::string, int32_t, int32_t>, std::vector<const MatchGroup*>> lists;
    for (const MatchGroup& g : groups) {
      if (g.op == CollOp::Send)
        lists[{g.comm, g.members[0].rank, g.members[1].rank}].push_back(&g);
      else
        lists[{g.comm, -1, -1}].push_back(&g);
    }
    for (auto& [key, v] : lists) {
      std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
      for (size_t i = 0; i + 1 < v.size(); ++i) {
        const MatchGroup& a = *v[i];
        const MatchGroup& b = *v[i + 1];
        if (a.op != b.op) continue;
        if (focus && !focus->hits(s, a.members) && !focus->hits(s, b.members)) continue;
        if (a.op != CollOp::AllReduce && a.op != CollOp::Broadcast && a.op != CollOp::Reduce &&
            a.op != CollOp::Send)
          continue;
        if (b.seq != a.seq + 1 || a.members.size() != b.members.size()) continue;
        bool ok = true;
        for (size_t m = 0; m < a.members.size() && ok; ++m) {
          OpRef x = a.members[m], y = b.members[m];
          const Collective& cx = *s.op(x).collective();
          const Collective& cy = *s.op(y).collective();
          ok = x.rank == y.rank && x.stream == y.stream && y.index == x.index + 1 &&
               cx.dtype == cy.dtype && cx.root == cy.root && cx.peer == cy.peer &&
               joins(cx.in, cy.in) && joins(cx.out, cy.out) &&
               !(cy.in.overlaps(cx.out)) && !(cx.out.overlaps(cy.out));
        }
        if (!ok) continue;
        Finding f;
        f.pass = std::string(name());
        f.ranks = member_ranks(a);
        for (const MatchGroup* g : {&a, &b})
          for (int64_t id : member_ids(s, *g)) f.ops.push_back(id);
        const Collective& c0 = *s.op(a.members[0]).collective();
        const Collective& c1 = *s.op(b.members[0]).collective();
        Collective merged = c0;
        merged.count = c0.count + c1.count;
        merged.in = span(c0.in, c1.in);
        merged.out = span(c0.out, c1.out);
        MatchGroup mg = a;
        Schedule probe;  // cost of the merged op: same comm, bytes of both
        const Comm* comm = s.find_comm(c0.comm);
        std::vector<int32_t> members = comm->ranks;
        if (a.op == CollOp::Send) members = {a.members[0].rank, a.members[1].rank};
        Ns merged_ns = cm.collective_ns(a.op, collective_bytes(s, merged),
                                        static_cast<int>(members.size()), c0.comm, members);
        f.saving_ns = group_ns(s, a, cm) + group_ns(s, b, cm) - merged_ns;
        f.saving_bytes = 0;
        f.legal = true;
        f.summary = op_name(s.op(a.members[0])) + " + " + op_name(s.op(b.members[0])) +
                    " -> one " + std::string(to_string(a.op)) + " of " +
                    std::to_string(merged.count) + " elements";
        std::vector<std::pair<int64_t, int64_t>> pairs;
        for (size_t m = 0; m < a.members.size(); ++m)
          pairs.push_back({s.op(a.members[m]).id, s.op(b.members[m]).id});
        f.rewrite = [pairs](Schedule& x) {
          int64_t& next = x.op_id_counter();
          for (auto [ia, ib] : pairs) {
            OpRef ra = must_find(x, ia);
            Collective c = *x.op(ra).collective();
            Collective d = *x.op(must_find(x, ib)).collective();
            c.count += d.count;
            c.in = span(c.in, d.in);
            c.out = span(c.out, d.out);
            if (c.label != d.label && !d.label.empty()) c.label += "+" + d.label;
            x.op(ra) = make_op(next, c, {ia, ib});
            remove_op(x, ib);
          }
        };
        out.push_back(std::move(f));
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Pass> make_coalesce() { return std::make_unique<Coalesce>(); }

}  // namespace braid::fusion::passes

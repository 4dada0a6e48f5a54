// dedup: a collective that recomputes a value already present. Same op, communicator, count,
// dtype and root as an earlier one, the same input and output slices on every member, and
// nothing (not even the first one) writes its input or output in between: it rewrites the same
// values, so it is removed.
#include <map>
#include <set>
#include <tuple>

#include "fusion/passes/passes.h"

namespace braid::fusion::passes {
namespace {

// (reader op id, index of its read slice, the slice it reads instead)
using Redirects = std::vector<std::tuple<int64_t, size_t, Slice>>;

// Every later reader of y's output is declared compute reading only y's value; each is pointed
// at x's output, which nothing overwrites before it. False when that does not hold.
bool redirect(const Dataflow& df, OpRef x, OpRef y, Redirects& out, std::vector<OpRef>& opaque) {
  const Schedule& s = df.schedule();
  const Collective& cx = *s.op(x).collective();
  const Collective& cy = *s.op(y).collective();
  if (cy.out.empty() || cx.out.empty() || cy.out.overlaps(cx.out) || cy.out.overlaps(cx.in))
    return false;
  Uses u = df.uses_after(y, cy.out);
  if (!u.known() || !u.live_at_end.empty()) return false;
  for (const auto& use : u.readers) {
    const Compute* c = s.op(use.op).compute();
    if (!c) return false;
    for (OpRef w : df.writers_between(x, use.op, cx.out)) {
      if (!s.op(w).compute() || !s.op(w).compute()->opaque) return false;
      opaque.push_back(w);
    }
    for (size_t k = 0; k < c->reads.size(); ++k) {
      const Slice& r = c->reads[k];
      if (!r.overlaps(cy.out)) continue;
      if (r.offset < cy.out.offset || r.end() > cy.out.end()) return false;
      if (use.elems.size() != r.count || !use.elems.within(r.offset, r.end())) return false;
      out.push_back({s.op(use.op).id, k,
                     Slice{cx.out.buffer, cx.out.offset + (r.offset - cy.out.offset), r.count}});
    }
  }
  return true;
}

class Dedup : public DataflowPass {
 public:
  Dedup() : DataflowPass("dedup", "remove a collective that recomputes a value already present") {}
  bool rewrites_advice() const override { return true; }
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    const auto& groups = df.matching().groups;
    std::map<std::string, std::vector<const MatchGroup*>> by_comm;
    for (const MatchGroup& g : groups)
      if (g.op != CollOp::Send && g.op != CollOp::ManyToMany) by_comm[g.comm].push_back(&g);
    std::set<const MatchGroup*> taken;
    for (auto& [comm, v] : by_comm) {
      std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
      for (size_t j = 0; j < v.size(); ++j) {
        if (taken.count(v[j]) || (focus && !focus->any(v[j]->members))) continue;
        for (size_t i = j; i-- > 0;) {
          const MatchGroup& a = *v[i];
          const MatchGroup& b = *v[j];
          if (a.op != b.op) continue;
          std::vector<OpRef> opaque;
          bool ok = true;
          Redirects redirects;
          for (size_t m = 0; m < a.members.size() && ok; ++m) {
            OpRef x = a.members[m], y = b.members[m];
            const Collective& cx = *s.op(x).collective();
            const Collective& cy = *s.op(y).collective();
            ok = cx.count == cy.count && cx.dtype == cy.dtype && cx.root == cy.root &&
                 cx.in == cy.in && df.hb().before(x, y);
            // The first op must not change its own input (an in-place all-reduce does).
            Access ax = access_of(s, x.rank, s.op(x));
            for (const Slice& w : ax.writes)
              for (const Slice& r : ax.reads) ok = ok && !w.overlaps(r);
            if (!ok) break;
            for (const Slice* sl : {&cx.in, &cx.out}) {
              if (sl->empty()) continue;
              for (OpRef w : df.writers_between(x, y, *sl)) {
                if (s.op(w).compute() && s.op(w).compute()->opaque)
                  opaque.push_back(w);
                else
                  ok = false;
              }
            }
            // Different outputs: the second one's readers read the first one's output instead.
            if (ok && cx.out != cy.out) ok = redirect(df, x, y, redirects, opaque);
          }
          if (!ok) continue;
          Finding f = finding_on(s, b);
          f.saving_ns = group_ns(s, b, cm);
          f.saving_bytes = group_wire_bytes(s, b);
          f.summary = op_name(s.op(b.members[0])) + " recomputes the value of op " +
                      std::to_string(s.op(a.members[0]).id) + "; removed";
          // Advice when opaque compute may write the inputs in between: the same removal,
          // under its assumption.
          f.legal = opaque.empty();
          if (!f.legal)
            f.assumption = "assumes " + name_ops(s, opaque) + " do not write '" +
                           s.op(a.members[0]).collective()->in.buffer + "' or '" +
                           s.op(a.members[0]).collective()->out.buffer + "'";
          std::vector<int64_t> ids = f.ops;
          f.rewrite = [ids, redirects](Schedule& x) {
            for (const auto& [id, k, to] : redirects) {
              OpRef r = must_find(x, id);
              x.op(r).compute()->reads[k] = to;
            }
            for (int64_t id : ids) remove_op(x, id);
          };
          taken.insert(v[j]);
          out.push_back(std::move(f));
          break;
        }
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Pass> make_dedup() { return std::make_unique<Dedup>(); }

}  // namespace braid::fusion::passes

// reorder: moves a collective up across independent compute so that it becomes adjacent to the
// communication it can fuse with (Chimera's reorder step, e.g. past the MoE gate): a collective
// on the same communicator (coalesce) or the one producing its input. Only compute that neither
// writes what the collective reads or writes nor reads what it writes is crossed, and no event,
// so every stream's view of the data and the communicator's order stay as they were.
#include "fusion/passes/passes.h"

namespace braid::fusion::passes {
namespace {

bool overlap_any(const std::vector<Slice>& a, const std::vector<Slice>& b) {
  for (const Slice& x : a)
    for (const Slice& y : b)
      if (x.overlaps(y)) return true;
  return false;
}

class Reorder : public DataflowPass {
 public:
  Reorder()
      : DataflowPass(
            "reorder",
            "move a collective across independent compute next to the collective it fuses with") {}
  bool rewrites_advice() const override { return true; }
  bool enabling_only() const override { return true; }
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel&,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->any(g.members)) continue;
      std::vector<std::pair<int64_t, int64_t>> moves;  // (op to move, op to follow)
      std::vector<OpRef> opaque;
      std::vector<int64_t> crossed;
      bool ok = true;
      for (const OpRef& y : g.members) {
        const Op& yo = s.op(y);
        const Collective& cy = *yo.collective();
        Access ay = access_of(s, y.rank, yo);
        const auto& ops = s.ranks[y.rank].streams[y.stream].ops;
        int32_t i = y.index - 1;
        bool moved_any = false;
        for (; i >= 0; --i) {
          const Op& o = ops[i];
          if (o.delay()) continue;
          const Compute* c = o.compute();
          if (!c) break;
          if (c->opaque) {
            opaque.push_back({y.rank, y.stream, i});
          } else if (overlap_any(c->writes, ay.reads) || overlap_any(c->writes, ay.writes) ||
                     overlap_any(c->reads, ay.writes)) {
            ok = false;
            break;
          }
          crossed.push_back(o.id);
          moved_any = true;
        }
        if (!ok || i < 0 || !moved_any) {
          ok = false;
          break;
        }
        const Op& xo = ops[i];
        const Collective* cx = xo.collective();
        if (!cx) {
          ok = false;
          break;
        }
        Access ax = access_of(s, y.rank, xo);
        bool fusable = (cx->comm == cy.comm && cx->op == cy.op) || overlap_any(ax.writes, ay.reads);
        if (!fusable) {
          ok = false;
          break;
        }
        moves.push_back({yo.id, xo.id});
      }
      if (!ok || moves.empty()) continue;
      Finding f = finding_on(s, g);
      for (int64_t id : crossed) f.ops.push_back(id);
      sort_unique(f.ops);
      f.saving_ns = 0;
      f.saving_bytes = 0;
      f.enabling = true;
      f.summary = op_name(s.op(g.members[0])) + " moved up across " +
                  std::to_string(crossed.size()) + " independent compute op(s)";
      // Advice when opaque compute is crossed: the same move, under its assumption.
      f.legal = opaque.empty();
      if (!f.legal)
        f.assumption = "assumes " + name_ops(s, opaque) + " do not touch the data of " +
                       op_name(s.op(g.members[0]));
      f.rewrite = [moves](Schedule& x) {
        for (auto [id, after] : moves) {
          Op op = remove_op(x, id);
          OpRef a = must_find(x, after);
          insert_op(x, a.rank, a.stream, a.index + 1, std::move(op));
        }
      };
      out.push_back(std::move(f));
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Pass> make_reorder() { return std::make_unique<Reorder>(); }

}  // namespace braid::fusion::passes

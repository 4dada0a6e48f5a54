// decompose: All-Reduce = Reduce-Scatter + All-Gather (Chimera's enabling step). Always legal
// when the count divides by the communicator size: the reduce-scatter leaves the rank's shard of
// the sum in place in `out`, the all-gather fills the rest.
#include "fusion/passes/passes.h"
#include "fusion/symmetry.h"

namespace braid::fusion::passes {
namespace {

class Decompose : public DataflowPass {
 public:
  Decompose()
      : DataflowPass(
            "decompose",
            "All-Reduce -> Reduce-Scatter + All-Gather in place (enables tp-sp, sp-ep, pp-sp)") {}
  bool enabling_only() const override { return true; }
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->any(g.members)) continue;
      if (g.op != CollOp::AllReduce) continue;
      const Collective& c = *s.op(g.members[0]).collective();
      const Comm* comm = s.find_comm(c.comm);
      const int64_t t = static_cast<int64_t>(comm->ranks.size());
      if (t < 2 || c.count % t != 0 || c.count == 0) continue;
      if (has_images(s, *comm)) continue;  // each image's shard is elsewhere (symmetry.h)
      const int64_t shard = c.count / t;
      const int64_t bytes = c.count * dtype_bytes_of(c.dtype);
      Ns ar = group_ns(s, g, cm);
      Ns rs = cm.collective_ns(CollOp::ReduceScatter, bytes, static_cast<int>(t), c.comm, comm->ranks);
      Ns ag = cm.collective_ns(CollOp::AllGather, bytes, static_cast<int>(t), c.comm, comm->ranks);
      Finding f = finding_on(s, g);
      f.saving_ns = ar - rs - ag;
      f.saving_bytes = 0;  // ring: 2(t-1)M/t either way
      f.legal = true;
      f.enabling = true;
      f.summary = op_name(s.op(g.members[0])) + " -> reduce-scatter + all-gather";
      std::vector<int64_t> ids = f.ops;
      f.rewrite = [ids, shard, t](Schedule& x) {
        int64_t& next = x.op_id_counter();
        for (int64_t id : ids) {
          OpRef r = must_find(x, id);
          Collective ar = *x.op(r).collective();
          const Comm* comm = x.find_comm(ar.comm);
          const int64_t idx = comm->index_of(r.rank);
          Slice mine = ar.out.sub(idx * shard, shard);
          Collective rs = ar, ag = ar;
          rs.op = CollOp::ReduceScatter;
          rs.count = shard;
          rs.out = mine;
          ag.op = CollOp::AllGather;
          ag.count = shard;
          ag.in = mine;
          (void)t;
          x.op(r) = make_op(next, rs, {id});
          insert_op(x, r.rank, r.stream, r.index + 1, make_op(next, ag, {id}));
        }
      };
      out.push_back(std::move(f));
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Pass> make_decompose() { return std::make_unique<Decompose>(); }

}  // namespace braid::fusion::passes

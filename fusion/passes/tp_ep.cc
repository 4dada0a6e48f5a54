// tp-ep (Chimera TP+EP): an All-Reduce over the tensor-parallel group whose result reaches the
// MoE dispatch All-to-All on every member. The MoE block is not split by TP, so every TP rank
// routes, dispatches, runs the experts on and combines the same tokens. Reduce-scatter instead,
// run the block (the residual and norm before it, the router, permute, experts, un-permute and
// the residual after it, and their backward) on the rank's 1/t of the tokens, so the
// All-to-Alls carry 1/t, and all-gather what the rest of the step reads in full (the layer's
// output, the input gradient); the block's weight gradients become partial sums added by one
// All-Reduce over the TP group (fusion/passes/moe_block.h).
#include "fusion/passes/moe_block.h"

namespace braid::fusion::passes {
namespace {

class TpEp : public DataflowPass {
 public:
  TpEp()
      : DataflowPass(
            "tp-ep",
            "All-Reduce + All-to-All -> Reduce-Scatter, the MoE block on 1/t of the tokens "
            "(All-to-Alls of 1/t), All-Gather after it") {}
  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    find_moe_rewrites(df, cm, focus, CollOp::AllReduce, std::string(name()), true, out);
    return out;
  }
};

}  // namespace

std::unique_ptr<Pass> make_tp_ep() { return std::make_unique<TpEp>(); }

}  // namespace braid::fusion::passes

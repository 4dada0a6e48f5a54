// Rewriting a replicated MoE block onto each tensor-parallel rank's 1/t of the tokens: the
// shared part of Chimera's TP+EP (tp-ep) and SP+EP (sp-ep) rules.
//
// Megatron's MoE block is not split by TP: after the attention All-Reduce (TP) or the
// sequence-parallel All-Gather (SP) every TP rank holds all T tokens and routes, dispatches,
// runs the experts on and combines all of them. The rewrite runs the block on the rank's own
// 1/t of the tokens instead, so the dispatch and combine All-to-Alls (forward and backward)
// carry 1/t:
//   - the seed: an All-Reduce becomes a Reduce-Scatter into the rank's rows (tp-ep); an
//     All-Gather whose full output only the block reads disappears (sp-ep), its readers reading
//     the rank's own shard, its input;
//   - the region, found from data flow on each rank: the positional compute on the way from the
//     seed to the dispatch (residual, norm), the row-wise compute (Compute::read_rows) and the
//     All-to-Alls reached from there (router, permute, experts, un-permute and their backward),
//     and the positional compute right after a row-wise output (the residual add, the norm's
//     backward); each runs on its 1/t of the rows;
//   - values the rest of the step reads in full get an All-Gather after their writer (tp-ep's
//     layer output and input gradient); other All-Gathers over the TP group read only by the
//     region go (sp-ep's gathered output gradient); a Reduce-Scatter over the TP group of a
//     region value that is the same on every rank becomes t local additions of the rank's own
//     shard (sp-ep's input gradient, summed over t identical copies in the baseline);
//   - the weight gradients of the block (Compute::sum_rows) become partial sums over the rank's
//     tokens, added up by one All-Reduce over the TP group, then added into the gradients.
// Legal when every region compute is declared replicated over the TP group, every value it
// reads from outside is provably the same on the TP ranks (fusion/passes/replicas.h), the
// routing transposes exactly the t x ep grid of token segments (Compute::transpose), and every
// All-to-All in it has all its members inside the rewrite; otherwise advice with the reason.
#pragma once

#include <string>
#include <vector>

#include "fusion/passes/passes.h"

namespace braid::fusion::passes {

// Findings, one per component (seed groups whose ranks dispatch to each other), for seeds of
// kind `seed` (AllReduce or AllGather) over groups of t >= 2 ranks whose every member reaches an
// All-to-All through a routing transpose. Seeds reaching it with no row-wise compute on the way
// are advice (`pass`'s closed form), those reaching it directly only when `direct`; with
// row-wise compute but no transpose, nothing.
void find_moe_rewrites(const Dataflow& df, const analysis::CostModel& cm, const Focus* focus,
                       CollOp seed, const std::string& pass, bool direct,
                       std::vector<Finding>& out);

}  // namespace braid::fusion::passes

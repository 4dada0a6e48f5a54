// The schedule synthesizer: the per-rank schedule of one training step of a transformer under a
// Megatron-style parallel layout (TP with or without SP, PP with 1F1B, EP, DP with bucketed
// gradient reduction or ZeRO stages 1-3), with exact buffer reads and writes and compute
// durations from the cost model's roofline (docs/synth.md).
//
// Every collective reads and writes the slices its data really flows through, so the fusion
// passes can find the Chimera patterns (an All-Reduce whose consumers read one sequence shard,
// an All-Gather feeding a P2P send, a P2P receive feeding an All-to-All, ...) by following data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/ir.h"

namespace braid::fusion {

// The model and the batch one DP rank processes in one step. Embedding and LM head are left
// out (stage 0 starts from the embedded input, the last stage ends with a loss over the final
// hidden states); norms have no parameters and GEMMs no biases (docs/synth.md).
struct ModelShape {
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t seq = 32;
  int64_t micro_batch = 1;    // sequences per micro-batch (b)
  int64_t micro_batches = 1;  // micro-batches per step per DP rank (gradient accumulation)
  int64_t heads = 4;
  int64_t ffn = 0;            // FFN / expert inner size; 0: 4 * hidden
  int64_t experts = 0;        // 0: dense MLP; > 0: every layer's MLP is an MoE block
  int64_t top_k = 1;
  std::string dtype = "bfloat16";

  int64_t ffn_size() const { return ffn > 0 ? ffn : 4 * hidden; }
  int64_t tokens() const { return micro_batch * seq; }  // tokens per micro-batch
  bool moe() const { return experts > 0; }
  bool operator==(const ModelShape&) const = default;
};

// How the row-parallel outputs (attention out-projection, MLP fc2) reach the sequence-parallel
// region when SP is on.
enum class SpMode : uint8_t {
  None,           // no SP: All-Reduce, the residual stream is replicated on the TP group
  ReduceScatter,  // Megatron SP: Reduce-Scatter into the sequence shard, All-Gather before GEMMs
  AllReduce,      // unfused baseline (Chimera TP+SP): All-Reduce, then each rank reads its shard
};
std::string_view to_string(SpMode m);

struct ParallelLayout {
  int tp = 1;
  int pp = 1;
  int ep = 1;  // expert parallel; EP groups are carved out of DP (ep divides dp)
  int dp = 1;
  SpMode sp = SpMode::None;
  // Megatron SP re-gathers a column-parallel GEMM's input in backward instead of keeping it
  // (the "recomputing" All-Gather a pass may remove).
  bool sp_recompute_allgather = true;
  // With SP and PP: all-gather the stage's output sequence shards and send the full activation
  // (the unfused Chimera PP+SP baseline) instead of sending each rank's shard.
  bool pp_send_full = false;
  // MoE with PP: cut every stage boundary at an MoE block's dispatch (Chimera PP+EP after its
  // gating adjustment): the sending stage runs its last layer's attention and gate (router,
  // permute) and sends the routed tokens, the residual and the routing probabilities; the
  // receiving stage runs that block's dispatch, experts, combine, un-permute and residual add
  // (and holds its experts). Backward mirrored.
  bool pp_moe_cut = false;
  int zero = 0;  // 0: bucketed All-Reduce; 1, 2, 3: ZeRO stages (distributed optimizer / FSDP)
  int64_t bucket_elems = 40'000'000;  // gradient bucket size (elements), Megatron's default

  int world() const { return tp * pp * dp; }
  bool sp_on() const { return sp != SpMode::None; }
  bool operator==(const ParallelLayout&) const = default;
};

// Parameters one rank holds (before ZeRO sharding), per layer and in all.
struct ParamCounts {
  int64_t dense_per_layer = 0;   // attention (+ dense MLP), split by TP
  int64_t router_per_layer = 0;  // the MoE router, replicated on the TP group
  int64_t expert_per_layer = 0;  // the rank's local experts (E / ep of them)
  int64_t layers_per_stage = 0;
  int64_t dense() const { return dense_per_layer * layers_per_stage; }
  int64_t router() const { return router_per_layer * layers_per_stage; }
  int64_t expert() const { return expert_per_layer * layers_per_stage; }
};
ParamCounts param_counts(const ModelShape& m, const ParallelLayout& p);

// Throws braid::Error(Usage) naming what is impossible (heads not divisible by tp, layers not
// divisible by pp, experts not divisible by ep, ...).
void check_layout(const ModelShape& m, const ParallelLayout& p);

// The schedule of one training step (valid by construction, which the tests check with
// validate(); every rank's `outputs` set). Global rank
// r = tp_index + tp * (dp_index + dp * stage).
Schedule synthesize(const ModelShape& m, const ParallelLayout& p,
                    const analysis::CostModel& cost = analysis::CostModel());

// The same step held as rank classes (fusion/symmetry.h): the DP replicas are one symmetry,
// pi moving every rank to the next DP index (to the next EP group's with expert parallelism:
// shift tp * ep within each stage's block of tp * dp ranks), so only the ranks of the first
// replica (first EP group) are built. Checked before it is returned: the second and the last
// replica of every class are built too and must be the images of the first (braid::Error
// (Internal) otherwise). Without DP replicas (dp == ep), and under ZeRO (each DP rank holds its
// own shard), it is synthesize()'s schedule. Memory
// and time are one replica's whatever dp is; expand() gives synthesize()'s schedule but for
// the op ids of the images.
Schedule synthesize_classes(const ModelShape& m, const ParallelLayout& p,
                            const analysis::CostModel& cost = analysis::CostModel());

struct Preset {
  std::string name;
  std::string description;
  ModelShape model;
  ParallelLayout layout;
};
// tp-sp, tp-ep, tp-pp, pp-ep, pp-sp, sp-ep (the Chimera cases), dense, moe.
const std::vector<std::string>& preset_names();
// Throws braid::Error(Usage) listing the names for an unknown one.
Preset preset(std::string_view name);

// Where a rank sits in the layout.
struct RankCoord {
  int tp = 0, dp = 0, pp = 0;
  int ep = 0;     // index in its EP group (dp % ep)
  int group = 0;  // which EP group (dp / ep)
};
RankCoord coord_of(const ParallelLayout& p, int32_t rank);
int32_t rank_of(const ParallelLayout& p, int tp, int dp, int pp);

}  // namespace braid::fusion

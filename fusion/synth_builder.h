// Internal to the synthesizer (synth*.cc): builds one rank's part of the step schedule.
#pragma once

#include <map>
#include <unordered_map>
#include <string>
#include <vector>

#include "fusion/synth.h"

namespace braid::fusion::synth_detail {

// A weight's place inside its layer's block of a parameter group.
struct WeightRef {
  int64_t offset = 0;
  int64_t count = 0;
};

// A contiguous run of a group's gradients reduced by one collective (DP bucket, or one layer
// under ZeRO-2/3). Layers [first_layer, last_layer] (global indices); ready once the backward
// of first_layer in the last micro-batch is done.
struct Bucket {
  int64_t offset = 0;        // in the full (unsharded) group
  int64_t count = 0;
  int64_t shard_offset = 0;  // in the sharded buffers (ZeRO): offset / n
  int first_layer = 0;
  int last_layer = 0;
};

// Dense (attention, dense MLP: reduced over DP), router (replicated on the TP group, reduced over
// DP) or expert parameters (replicated on the TP group, reduced over the expert-data-parallel
// group, dp / ep ranks holding the same experts).
struct ParamGroup {
  std::string name;   // "dense" / "expert"
  std::string prefix; // buffer name prefix: "" / "expert_"
  std::string comm;   // empty when the group has one member
  std::string replicated;  // the TP communicator when every TP rank holds the same copy
  int n = 1;          // members of the reduction group
  int index = 0;      // this rank's position in it
  int zero = 0;       // ZeRO stage in effect (0 when n == 1)
  int64_t per_layer = 0;
  int64_t total = 0;  // per_layer * its layers on this rank
  // The layers whose parameters this rank holds: the stage's, except that with
  // ParallelLayout::pp_moe_cut the experts of a cut layer live on the receiving stage.
  int first_layer = 0, end_layer = 0;
  std::vector<Bucket> buckets;  // in the order they become ready (last layers first)

  bool sharded() const { return zero >= 1; }
  std::string buf(std::string_view what) const { return prefix + std::string(what); }
};

class RankBuilder {
 public:
  RankBuilder(Schedule& s, const ModelShape& m, const ParallelLayout& p,
              const analysis::CostModel& cost, int32_t rank);
  // Emits the whole step for this rank and sets its outputs.
  void build();

 private:
  // --- buffers, streams, ops
  Slice buffer(const std::string& name, int64_t size, const std::string& dtype = {});
  int stream(const std::string& name);
  void compute(int st, const std::string& label, std::vector<Slice> reads, std::vector<Slice> writes,
               Ns duration);
  void gemm(const std::string& label, std::vector<Slice> reads, std::vector<Slice> writes,
            int64_t m, int64_t n, int64_t k);
  void elementwise(const std::string& label, std::vector<Slice> reads, std::vector<Slice> writes,
                   double flops_per_out = 4);
  // A token-row compute of the MoE block (Compute::read_rows / write_rows, 0 for a whole read
  // such as weights), run identically by every TP rank (replicated over the TP group): the MoE
  // block is not split by TP, each TP rank routes all tokens.
  void moe_op(const std::string& label, std::vector<Slice> reads, std::vector<int64_t> read_rows,
              std::vector<Slice> writes, std::vector<int64_t> write_rows, Ns duration);
  // Sets the transpose between token order and the dispatch's destination order on the op just
  // added (TP > 1 and EP > 1): writes in destination order when `to_destinations`, reading the
  // token-order reads (`transposed_reads`) through it; else token-order writes reading the
  // destination-order reads (`transposed_reads`) through it.
  void route(bool to_destinations, std::vector<int64_t> transposed_reads);
  // The duration of a GEMM [m x k] * [k x n] and of an elementwise op, from the cost model.
  Ns gemm_ns(int64_t m, int64_t n, int64_t k) const;
  Ns elementwise_ns(const std::vector<Slice>& reads, const std::vector<Slice>& writes,
                    double flops_per_out) const;
  // An elementwise op of the residual stream (norm, residual add, loss). Under TP without SP
  // every TP rank runs it on its full copy of the activation: marked replicated over the TP
  // group (Compute::replicated), so data flow can show the copies stay identical.
  void residual_op(const std::string& label, std::vector<Slice> reads, std::vector<Slice> writes,
                   double flops_per_out = 4);
  bool replicated_residual() const { return p_.tp > 1 && !p_.sp_on(); }
  void collective(int st, CollOp op, const std::string& comm, int64_t count, Slice in, Slice out,
                  const std::string& label, const std::string& dtype = {});
  void p2p(int st, CollOp op, const std::string& comm, int32_t peer, Slice s,
           const std::string& label);
  void record(int st, const std::string& event);
  void wait(int st, const std::string& event);

  // --- names
  std::string name(int layer, std::string_view what, int mb) const;
  std::string label(int layer, std::string_view what) const;

  // --- communicators of this rank
  std::string tp_comm() const;
  std::string ep_comm() const;
  std::string pp_fwd_comm(int from_stage) const;  // channel from_stage -> from_stage + 1
  std::string pp_bwd_comm(int from_stage) const;  // channel from_stage + 1 -> from_stage

  // --- layers (synth_layers.cc)
  Slice layer_input(int l, int mb);
  Slice weight(int l, const WeightRef& w, const ParamGroup& g);
  Slice grad(int l, const WeightRef& w, const ParamGroup& g);
  // The gathered copy of a layer's weights under ZeRO-3: "L<l>.<prefix>w.<phase>.mb<mb>".
  std::string gathered_name(int l, const ParamGroup& g, bool backward, int mb) const;
  std::vector<ParamGroup*> groups() { return {&dense_, &router_, &expert_}; }
  Slice row_parallel_output(int l, int mb, std::string_view block, Slice partial);
  Slice column_parallel_input_grad(int l, int mb, std::string_view block, Slice partial);
  Slice sp_gather(int l, int mb, std::string_view what, Slice shard, std::string_view lab);
  // A layer is a head (attention, the norm before the MLP / MoE block, the MoE gate) and a tail
  // (the MLP, or the MoE dispatch, experts, combine, un-permute; the residual add); with
  // pp_moe_cut a stage boundary falls between the two. Backward: tail first, then head.
  void forward_layer(int l, int mb);
  void forward_layer_head(int l, int mb);
  void forward_layer_tail(int l, int mb);
  void backward_layer(int l, int mb);
  void backward_layer_tail(int l, int mb);
  void backward_layer_head(int l, int mb);
  Slice mlp_forward(int l, int mb, Slice ln2);
  void moe_gate(int l, int mb, Slice ln2);
  Slice moe_experts(int l, int mb);
  void moe_backward_experts(int l, int mb, Slice dy);
  Slice moe_backward_gate(int l, int mb);
  Slice mlp_backward(int l, int mb, Slice dy);

  // --- step (synth_step.cc)
  void setup_groups();
  void forward_microbatch(int mb);
  void backward_microbatch(int mb);
  void gather_weights(int l, int mb, bool backward);  // ZeRO-3
  std::vector<Slice> cut_forward_values(int l, int mb);   // pp_moe_cut: sent forward
  std::vector<Slice> cut_backward_values(int l, int mb);  // ... and backward
  void layer_grads_ready(int l);
  void backward_done();
  void optimizer_and_param_gather();
  void set_outputs();

  Schedule& s_;
  const ModelShape& m_;
  const ParallelLayout& p_;
  const analysis::CostModel& cost_;
  const int32_t rank_;
  RankCoord c_;
  std::string dtype_;
  int dbytes_ = 2;

  // Derived sizes (elements on this rank).
  int64_t T_ = 0;   // tokens per micro-batch
  int64_t M_ = 0;   // T * hidden: one full activation
  int64_t Ms_ = 0;  // M / tp: one sequence shard
  int64_t X_ = 0;   // residual stream held by this rank (Ms with SP, else M)
  int first_layer_ = 0, end_layer_ = 0;
  // pp_moe_cut: this stage runs the tail of layer first_layer_ - 1 / only the head of its last.
  bool cut_before_ = false, cut_after_ = false;

  // Weights inside a layer's dense / expert block.
  WeightRef w_qkv_, w_o_, w_fc1_, w_fc2_, w_router_, w_efc1_, w_efc2_;
  ParamGroup dense_, router_, expert_;
  bool backward_phase_ = false;  // which ZeRO-3 gathered weights the GEMMs read
  int weight_mb_ = 0;            // ... and of which micro-batch
  int compute_ = 0;              // the compute stream's index
  int dp_stream_ = -1;
  bool dp_used_ = false;
  std::unordered_map<std::string, int64_t> buffer_sizes_;  // declared buffers (lookups stay O(1))
};

}  // namespace braid::fusion::synth_detail

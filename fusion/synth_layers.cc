// One transformer layer's forward and backward for one micro-batch on one rank, Megatron-style:
// column-parallel QKV / fc1, row-parallel out-projection / fc2, TP collectives on the compute
// stream (the critical path), SP regions on sequence shards, MoE dispatch / combine over EP.
#include "fusion/synth_builder.h"

namespace braid::fusion::synth_detail {

Slice RankBuilder::layer_input(int l, int mb) {
  // A stage that receives the full activation (PP+SP baseline) reads its sequence shard of it.
  if (l == first_layer_ && c_.pp > 0 && p_.sp_on() && p_.pp_send_full)
    return buffer(name(l, "x_full", mb), M_).sub(c_.tp * Ms_, Ms_);
  Slice x = buffer(name(l, "x", mb), X_);
  // The first stage's input (the embedding's output) is the same on every TP rank.
  if (l == 0 && replicated_residual())
    for (Buffer& b : s_.ranks[rank_].buffers)
      if (b.name == x.buffer) b.replicated = tp_comm();
  return x;
}

Slice RankBuilder::weight(int l, const WeightRef& w, const ParamGroup& g) {
  int local = l - g.first_layer;
  if (g.zero == 3)
    return buffer(gathered_name(l, g, backward_phase_, weight_mb_), g.per_layer)
        .sub(w.offset, w.count);
  return buffer(g.buf("params"), g.total).sub(local * g.per_layer + w.offset, w.count);
}

Slice RankBuilder::grad(int l, const WeightRef& w, const ParamGroup& g) {
  return buffer(g.buf("grads"), g.total).sub((l - g.first_layer) * g.per_layer + w.offset, w.count);
}

// The row-parallel GEMM's partial sums reach the residual stream: All-Reduce (no SP),
// Reduce-Scatter into the sequence shard (Megatron SP), or All-Reduce with the residual reading
// only this rank's shard (the unfused TP+SP baseline).
Slice RankBuilder::row_parallel_output(int l, int mb, std::string_view block, Slice partial) {
  if (p_.tp == 1) return partial;
  std::string out = name(l, std::string(block) + "_out", mb);
  switch (p_.sp) {
    case SpMode::ReduceScatter: {
      Slice o = buffer(out, Ms_);
      collective(compute_, CollOp::ReduceScatter, tp_comm(), Ms_, partial, o,
                 label(l, std::string(block) + ".reducescatter"));
      return o;
    }
    case SpMode::AllReduce: {
      Slice o = buffer(out, M_);
      collective(compute_, CollOp::AllReduce, tp_comm(), M_, partial, o,
                 label(l, std::string(block) + ".allreduce"));
      return o.sub(c_.tp * Ms_, Ms_);
    }
    case SpMode::None:
      break;
  }
  Slice o = buffer(out, M_);
  collective(compute_, CollOp::AllReduce, tp_comm(), M_, partial, o,
             label(l, std::string(block) + ".allreduce"));
  return o;
}

// Backward of a column-parallel GEMM's input: the partial input gradients of the TP ranks are
// summed (All-Reduce), or reduce-scattered into the sequence shard with SP.
Slice RankBuilder::column_parallel_input_grad(int l, int mb, std::string_view block,
                                              Slice partial) {
  if (p_.tp == 1) return partial;
  std::string out = name(l, "d_" + std::string(block) + "_in", mb);
  if (p_.sp_on()) {
    Slice o = buffer(out, Ms_);
    collective(compute_, CollOp::ReduceScatter, tp_comm(), Ms_, partial, o,
               label(l, std::string(block) + ".bwd.reducescatter"));
    return o;
  }
  Slice o = buffer(out, M_);
  collective(compute_, CollOp::AllReduce, tp_comm(), M_, partial, o,
             label(l, std::string(block) + ".bwd.allreduce"));
  return o;
}

// All-Gather of sequence shards over the TP group into a full activation.
Slice RankBuilder::sp_gather(int l, int mb, std::string_view what, Slice shard,
                             std::string_view lab) {
  Slice full = buffer(name(l, what, mb), M_);
  collective(compute_, CollOp::AllGather, tp_comm(), Ms_, shard, full, label(l, lab));
  return full;
}

void RankBuilder::forward_layer(int l, int mb) {
  forward_layer_head(l, mb);
  forward_layer_tail(l, mb);
}

void RankBuilder::forward_layer_head(int l, int mb) {
  const int64_t t = p_.tp, h = m_.hidden;
  Slice x = layer_input(l, mb);
  Slice ln1 = buffer(name(l, "ln1", mb), X_);
  residual_op(label(l, "attn.ln"), {x}, {ln1}, 8);
  Slice a_in = p_.sp_on() ? sp_gather(l, mb, "ln1_full", ln1, "attn.allgather") : ln1;
  Slice qkv = buffer(name(l, "qkv", mb), 3 * M_ / t);
  gemm(label(l, "attn.qkv"), {a_in, weight(l, w_qkv_, dense_)}, {qkv}, T_, 3 * h / t, h);
  Slice ctx = buffer(name(l, "ctx", mb), M_ / t);
  // Flash attention: QK^T and PV, 2 * 2 * b * s^2 * h / t FLOPs (no causal halving).
  double attn_flops = 4.0 * m_.micro_batch * m_.seq * m_.seq * h / t;
  compute(compute_, label(l, "attn.core"), {qkv}, {ctx},
          cost_.compute_ns(attn_flops, double(qkv.count + ctx.count) * dbytes_, dbytes_));
  Slice partial = buffer(name(l, "attn_partial", mb), M_);
  gemm(label(l, "attn.out_proj"), {ctx, weight(l, w_o_, dense_)}, {partial}, T_, h, h / t);
  Slice attn_out = row_parallel_output(l, mb, "attn", partial);
  Slice hres = buffer(name(l, "h", mb), X_);
  residual_op(label(l, "attn.residual"), {x, attn_out}, {hres}, 2);
  Slice ln2 = buffer(name(l, "ln2", mb), X_);
  std::string block = m_.moe() ? "moe" : "mlp";
  residual_op(label(l, block + ".ln"), {hres}, {ln2}, 8);
  if (m_.moe()) moe_gate(l, mb, ln2);
}

void RankBuilder::forward_layer_tail(int l, int mb) {
  Slice hres = buffer(name(l, "h", mb), X_);
  std::string block = m_.moe() ? "moe" : "mlp";
  Slice out = m_.moe() ? moe_experts(l, mb) : mlp_forward(l, mb, buffer(name(l, "ln2", mb), X_));
  Slice y = buffer(name(l + 1, "x", mb), X_);
  residual_op(label(l, block + ".residual"), {hres, out}, {y}, 2);
}

Slice RankBuilder::mlp_forward(int l, int mb, Slice ln2) {
  const int64_t t = p_.tp, h = m_.hidden, d = m_.ffn_size();
  Slice in = p_.sp_on() ? sp_gather(l, mb, "ln2_full", ln2, "mlp.allgather") : ln2;
  Slice fc1 = buffer(name(l, "fc1", mb), T_ * d / t);
  gemm(label(l, "mlp.fc1"), {in, weight(l, w_fc1_, dense_)}, {fc1}, T_, d / t, h);
  Slice partial = buffer(name(l, "mlp_partial", mb), M_);
  gemm(label(l, "mlp.fc2"), {fc1, weight(l, w_fc2_, dense_)}, {partial}, T_, h, d / t);
  return row_parallel_output(l, mb, "mlp", partial);
}

// MoE block: every TP rank routes all T tokens of the micro-batch (replicated after the
// attention All-Reduce, or all-gathered from the sequence shards with SP), dispatches them to
// the experts over EP and combines them back; its compute is row-wise over tokens and the same
// on every TP rank (router and expert weights are replicated on the TP group). With SP each
// rank keeps its sequence shard of the combined output.
//
// Balanced routing: the tokens form g * ep equal segments (g = tp, each TP rank's sequence
// shard cut into ep parts), segment i * ep + e goes to EP rank e, k copies of each token to
// experts there. The dispatch buffers are destination-major (block e * g + i), so the permute
// and un-permute transpose the g x ep grid of segments (Compute::transpose).
void RankBuilder::moe_gate(int l, int mb, Slice ln2) {
  const int64_t h = m_.hidden, E = m_.experts, k = m_.top_k;
  const int64_t routed = T_ * k * h;  // elements dispatched by this rank (and received by it)
  const int64_t R = T_ * k;           // dispatched rows
  Slice in = p_.sp_on() ? sp_gather(l, mb, "ln2_full", ln2, "moe.allgather") : ln2;
  Slice probs = buffer(name(l, "probs", mb), T_ * E);
  Slice w_router = weight(l, w_router_, router_);
  moe_op(label(l, "moe.router"), {in, w_router}, {T_, 0}, {probs}, {T_}, gemm_ns(T_, E, h));
  Slice disp_in = buffer(name(l, "dispatch_in", mb), routed);
  moe_op(label(l, "moe.permute"), {in, probs}, {T_, T_}, {disp_in}, {R},
         elementwise_ns({in, probs}, {disp_in}, 1));
  route(/*to_destinations=*/true, {0, 1});
}

Slice RankBuilder::moe_experts(int l, int mb) {
  const int64_t h = m_.hidden, E = m_.experts, k = m_.top_k, de = m_.ffn_size();
  const int64_t routed = T_ * k * h;
  const int64_t R = T_ * k;
  Slice probs = buffer(name(l, "probs", mb), T_ * E);
  Slice disp_in = buffer(name(l, "dispatch_in", mb), routed);
  Slice disp_out = disp_in;
  if (p_.ep > 1) {
    disp_out = buffer(name(l, "dispatch_out", mb), routed);
    collective(compute_, CollOp::AllToAll, ep_comm(), routed / p_.ep, disp_in, disp_out,
               label(l, "moe.dispatch"));
  }
  Slice act = buffer(name(l, "expert_act", mb), R * de);
  moe_op(label(l, "moe.experts.fc1"), {disp_out, weight(l, w_efc1_, expert_)}, {R, 0}, {act},
         {R}, gemm_ns(R, de, h));
  Slice comb_in = buffer(name(l, "combine_in", mb), routed);
  moe_op(label(l, "moe.experts.fc2"), {act, weight(l, w_efc2_, expert_)}, {R, 0}, {comb_in},
         {R}, gemm_ns(R, h, de));
  Slice comb_out = comb_in;
  if (p_.ep > 1) {
    comb_out = buffer(name(l, "combine_out", mb), routed);
    collective(compute_, CollOp::AllToAll, ep_comm(), routed / p_.ep, comb_in, comb_out,
               label(l, "moe.combine"));
  }
  Slice out = buffer(name(l, "moe_out", mb), M_);
  moe_op(label(l, "moe.unpermute"), {comb_out, probs}, {R, T_}, {out}, {T_},
         elementwise_ns({comb_out, probs}, {out}, 2.0 * k));
  route(/*to_destinations=*/false, {0});
  return p_.sp_on() ? out.sub(c_.tp * Ms_, Ms_) : out;
}

void RankBuilder::route(bool to_destinations, std::vector<int64_t> transposed_reads) {
  const int64_t g = p_.tp;
  if (p_.ep == 1 || g == 1) return;
  Compute& c = *s_.ranks[rank_].streams[compute_].ops.back().compute();
  // Token order's segment i * ep + e <-> destination order's block e * g + i.
  c.transpose = to_destinations ? std::vector<int64_t>{p_.ep, g} : std::vector<int64_t>{g, p_.ep};
  c.transposed_reads = std::move(transposed_reads);
}

void RankBuilder::backward_layer(int l, int mb) {
  backward_layer_tail(l, mb);
  backward_layer_head(l, mb);
}

void RankBuilder::backward_layer_tail(int l, int mb) {
  if (m_.moe()) moe_backward_experts(l, mb, buffer(name(l + 1, "dx", mb), X_));
}

void RankBuilder::backward_layer_head(int l, int mb) {
  const int64_t t = p_.tp, h = m_.hidden;
  Slice x = layer_input(l, mb);
  Slice dy = buffer(name(l + 1, "dx", mb), X_);
  Slice hres = buffer(name(l, "h", mb), X_);
  std::string block = m_.moe() ? "moe" : "mlp";
  Slice d_ln2 = m_.moe() ? moe_backward_gate(l, mb) : mlp_backward(l, mb, dy);
  Slice d_h = buffer(name(l, "d_h", mb), X_);
  residual_op(label(l, block + ".ln.bwd"), {d_ln2, hres, dy}, {d_h}, 10);

  Slice g = p_.sp_on() ? sp_gather(l, mb, "d_attn_out", d_h, "attn.bwd.allgather") : d_h;
  Slice ctx = buffer(name(l, "ctx", mb), M_ / t);
  Slice d_ctx = buffer(name(l, "d_ctx", mb), M_ / t);
  gemm(label(l, "attn.out_proj.dgrad"), {g, weight(l, w_o_, dense_)}, {d_ctx}, T_, h / t, h);
  Slice go = grad(l, w_o_, dense_);
  gemm(label(l, "attn.out_proj.wgrad"), {g, ctx, go}, {go}, h / t, h, T_);
  Slice qkv = buffer(name(l, "qkv", mb), 3 * M_ / t);
  Slice d_qkv = buffer(name(l, "d_qkv", mb), 3 * M_ / t);
  double attn_flops = 8.0 * m_.micro_batch * m_.seq * m_.seq * h / t;
  compute(compute_, label(l, "attn.core.bwd"), {d_ctx, qkv}, {d_qkv},
          cost_.compute_ns(attn_flops, double(d_ctx.count + qkv.count + d_qkv.count) * dbytes_,
                           dbytes_));
  Slice a_in = p_.sp_on() ? buffer(name(l, "ln1_full", mb), M_) : buffer(name(l, "ln1", mb), X_);
  if (p_.sp_on() && p_.sp_recompute_allgather)
    a_in = sp_gather(l, mb, "ln1_regather", buffer(name(l, "ln1", mb), X_),
                     "attn.qkv.bwd.allgather");
  Slice d_partial = buffer(name(l, "d_ln1_partial", mb), M_);
  gemm(label(l, "attn.qkv.dgrad"), {d_qkv, weight(l, w_qkv_, dense_)}, {d_partial}, T_, h,
       3 * h / t);
  Slice d_ln1 = column_parallel_input_grad(l, mb, "attn", d_partial);
  Slice gq = grad(l, w_qkv_, dense_);
  gemm(label(l, "attn.qkv.wgrad"), {d_qkv, a_in, gq}, {gq}, 3 * h / t, h, T_);
  Slice dx = buffer(name(l, "dx", mb), X_);
  residual_op(label(l, "attn.ln.bwd"), {d_ln1, x, d_h}, {dx}, 10);
}

Slice RankBuilder::mlp_backward(int l, int mb, Slice dy) {
  const int64_t t = p_.tp, h = m_.hidden, d = m_.ffn_size();
  Slice g = p_.sp_on() ? sp_gather(l, mb, "d_mlp_out", dy, "mlp.bwd.allgather") : dy;
  Slice fc1 = buffer(name(l, "fc1", mb), T_ * d / t);
  Slice d_fc1 = buffer(name(l, "d_fc1", mb), T_ * d / t);
  gemm(label(l, "mlp.fc2.dgrad"), {g, weight(l, w_fc2_, dense_)}, {d_fc1}, T_, d / t, h);
  Slice g2 = grad(l, w_fc2_, dense_);
  gemm(label(l, "mlp.fc2.wgrad"), {g, fc1, g2}, {g2}, d / t, h, T_);
  Slice in = p_.sp_on() ? buffer(name(l, "ln2_full", mb), M_) : buffer(name(l, "ln2", mb), X_);
  if (p_.sp_on() && p_.sp_recompute_allgather)
    in = sp_gather(l, mb, "ln2_regather", buffer(name(l, "ln2", mb), X_), "mlp.fc1.bwd.allgather");
  Slice d_partial = buffer(name(l, "d_ln2_partial", mb), M_);
  gemm(label(l, "mlp.fc1.dgrad"), {d_fc1, fc1, weight(l, w_fc1_, dense_)}, {d_partial}, T_, h,
       d / t);
  Slice d_ln2 = column_parallel_input_grad(l, mb, "mlp", d_partial);
  Slice g1 = grad(l, w_fc1_, dense_);
  gemm(label(l, "mlp.fc1.wgrad"), {d_fc1, in, g1}, {g1}, d / t, h, T_);
  return d_ln2;
}

void RankBuilder::moe_backward_experts(int l, int mb, Slice dy) {
  const int64_t h = m_.hidden, E = m_.experts, k = m_.top_k, de = m_.ffn_size();
  const int64_t routed = T_ * k * h;
  const int64_t R = T_ * k;
  Slice g = p_.sp_on() ? sp_gather(l, mb, "d_moe_out", dy, "moe.bwd.allgather") : dy;
  Slice probs = buffer(name(l, "probs", mb), T_ * E);
  Slice comb_out = buffer(name(l, p_.ep > 1 ? "combine_out" : "combine_in", mb), routed);
  Slice d_comb_out = buffer(name(l, "d_combine_out", mb), routed);
  Slice d_probs = buffer(name(l, "d_probs", mb), T_ * E);
  // The un-permute's backward: the token gradients weighted by the routing probabilities go
  // back to the experts' order; the probabilities' gradients need the experts' outputs.
  moe_op(label(l, "moe.unpermute.bwd"), {g, probs}, {T_, T_}, {d_comb_out}, {R},
         elementwise_ns({g, probs}, {d_comb_out}, 1.0 * k));
  route(/*to_destinations=*/true, {0, 1});
  moe_op(label(l, "moe.probs.bwd"), {g, comb_out}, {T_, R}, {d_probs}, {T_},
         elementwise_ns({g, comb_out}, {d_probs}, 1.0 * k));
  route(/*to_destinations=*/false, {1});
  Slice d_comb_in = d_comb_out;
  if (p_.ep > 1) {
    d_comb_in = buffer(name(l, "d_combine_in", mb), routed);
    collective(compute_, CollOp::AllToAll, ep_comm(), routed / p_.ep, d_comb_out, d_comb_in,
               label(l, "moe.combine.bwd"));
  }
  Slice act = buffer(name(l, "expert_act", mb), R * de);
  Slice d_act = buffer(name(l, "d_expert_act", mb), R * de);
  moe_op(label(l, "moe.experts.fc2.dgrad"), {d_comb_in, weight(l, w_efc2_, expert_)}, {R, 0},
         {d_act}, {R}, gemm_ns(R, de, h));
  // Weight gradients are sums over the rows (Compute::sum_rows), accumulated in place.
  Slice g2 = grad(l, w_efc2_, expert_);
  moe_op(label(l, "moe.experts.fc2.wgrad"), {d_comb_in, act, g2}, {R, R, 0}, {g2}, {1},
         gemm_ns(de, h, R));
  s_.ranks[rank_].streams[compute_].ops.back().compute()->sum_rows = true;
  Slice disp_out = buffer(name(l, p_.ep > 1 ? "dispatch_out" : "dispatch_in", mb), routed);
  Slice d_disp_out = buffer(name(l, "d_dispatch_out", mb), routed);
  moe_op(label(l, "moe.experts.fc1.dgrad"), {d_act, act, weight(l, w_efc1_, expert_)},
         {R, R, 0}, {d_disp_out}, {R}, gemm_ns(R, h, de));
  Slice g1 = grad(l, w_efc1_, expert_);
  moe_op(label(l, "moe.experts.fc1.wgrad"), {d_act, disp_out, g1}, {R, R, 0}, {g1}, {1},
         gemm_ns(h, de, R));
  s_.ranks[rank_].streams[compute_].ops.back().compute()->sum_rows = true;
  Slice d_disp_in = d_disp_out;
  if (p_.ep > 1) {
    d_disp_in = buffer(name(l, "d_dispatch_in", mb), routed);
    collective(compute_, CollOp::AllToAll, ep_comm(), routed / p_.ep, d_disp_out, d_disp_in,
               label(l, "moe.dispatch.bwd"));
  }
}

Slice RankBuilder::moe_backward_gate(int l, int mb) {
  const int64_t h = m_.hidden, E = m_.experts, k = m_.top_k;
  const int64_t routed = T_ * k * h;
  const int64_t R = T_ * k;
  Slice d_probs = buffer(name(l, "d_probs", mb), T_ * E);
  Slice d_disp_in = buffer(name(l, p_.ep > 1 ? "d_dispatch_in" : "d_dispatch_out", mb), routed);
  // Un-permute the token gradients and add the router's input gradient (d_probs x W_router^T).
  Slice d_in = buffer(name(l, "d_moe_in", mb), M_);
  Slice w_router = weight(l, w_router_, router_);
  moe_op(label(l, "moe.permute.bwd"), {d_disp_in, d_probs, w_router}, {R, T_, 0}, {d_in}, {T_},
         cost_.compute_ns(2.0 * T_ * E * h + double(routed),
                          double(routed + T_ * E + h * E + M_) * dbytes_, dbytes_));
  route(/*to_destinations=*/false, {0});
  Slice in = p_.sp_on() ? buffer(name(l, "ln2_full", mb), M_) : buffer(name(l, "ln2", mb), X_);
  Slice gr = grad(l, w_router_, router_);
  moe_op(label(l, "moe.router.wgrad"), {d_probs, in, gr}, {T_, T_, 0}, {gr}, {1},
         gemm_ns(h, E, T_));
  s_.ranks[rank_].streams[compute_].ops.back().compute()->sum_rows = true;
  if (!p_.sp_on()) return d_in;
  Slice d_ln2 = buffer(name(l, "d_moe_in_shard", mb), Ms_);
  collective(compute_, CollOp::ReduceScatter, tp_comm(), Ms_, d_in, d_ln2,
             label(l, "moe.bwd.reducescatter"));
  return d_ln2;
}

}  // namespace braid::fusion::synth_detail

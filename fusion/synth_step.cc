// One rank's training step: the 1F1B order of forward and backward micro-batches, pipeline
// point-to-point transfers on their own streams, and gradient reduction on the DP stream
// (bucketed All-Reduce overlapping backward, or ZeRO 1/2/3) followed by the optimizer.
#include <algorithm>

#include "fusion/synth_builder.h"
#include "trace/error.h"

namespace braid::fusion::synth_detail {

RankBuilder::RankBuilder(Schedule& s, const ModelShape& m, const ParallelLayout& p,
                         const analysis::CostModel& cost, int32_t rank)
    : s_(s), m_(m), p_(p), cost_(cost), rank_(rank), c_(coord_of(p, rank)) {
  dtype_ = normalize_dtype(m.dtype);
  dbytes_ = dtype_size(dtype_);
  T_ = m.tokens();
  M_ = T_ * m.hidden;
  Ms_ = M_ / p.tp;
  X_ = p.sp_on() ? Ms_ : M_;
  int64_t per_stage = m.layers / p.pp;
  first_layer_ = static_cast<int>(c_.pp * per_stage);
  end_layer_ = static_cast<int>(first_layer_ + per_stage);
  cut_before_ = p.pp_moe_cut && c_.pp > 0;
  cut_after_ = p.pp_moe_cut && c_.pp + 1 < p.pp;

  const int64_t t = p.tp, h = m.hidden, d = m.ffn_size();
  int64_t off = 0;
  auto place = [&off](int64_t n) {
    WeightRef w{off, n};
    off += n;
    return w;
  };
  w_qkv_ = place(3 * h * h / t);
  w_o_ = place(h * h / t);
  if (!m.moe()) {
    w_fc1_ = place(h * d / t);
    w_fc2_ = place(d * h / t);
  }
  int64_t dense_per_layer = off;
  off = 0;
  if (m.moe()) w_router_ = place(h * m.experts);
  router_.per_layer = off;
  off = 0;
  if (m.moe()) {
    int64_t local = m.experts / p.ep;
    w_efc1_ = place(local * h * d);
    w_efc2_ = place(local * d * h);
  }
  dense_.per_layer = dense_per_layer;
  expert_.per_layer = off;
}

// ---------------------------------------------------------------- buffers, streams, ops

Slice RankBuilder::buffer(const std::string& nm, int64_t size, const std::string& dtype) {
  auto [it, added] = buffer_sizes_.emplace(nm, size);
  if (!added) {
    if (it->second != size)
      throw Error(ErrorCode::Internal, "synth: buffer '" + nm + "' declared with sizes " +
                                           std::to_string(it->second) + " and " + std::to_string(size));
    return Slice{nm, 0, size};
  }
  s_.add_buffer(rank_, nm, dtype.empty() ? dtype_ : dtype, size);
  return Slice{nm, 0, size};
}

int RankBuilder::stream(const std::string& nm) {
  const RankSchedule& rs = s_.ranks[rank_];
  for (size_t i = 0; i < rs.streams.size(); ++i)
    if (rs.streams[i].name == nm) return static_cast<int>(i);
  return s_.add_stream(rank_, nm);
}

void RankBuilder::compute(int st, const std::string& lab, std::vector<Slice> reads,
                          std::vector<Slice> writes, Ns duration) {
  Compute c;
  c.label = lab;
  c.duration_ns = duration;
  c.reads = std::move(reads);
  c.writes = std::move(writes);
  s_.append(rank_, st, std::move(c));
}

// A GEMM [m x k] * [k x n]: 2mnk FLOPs, reading both operands and writing the result once.
Ns RankBuilder::gemm_ns(int64_t m, int64_t n, int64_t k) const {
  double flops = 2.0 * double(m) * double(n) * double(k);
  double bytes = (double(m) * k + double(k) * n + double(m) * n) * dbytes_;
  return cost_.compute_ns(flops, bytes, dbytes_);
}

void RankBuilder::gemm(const std::string& lab, std::vector<Slice> reads, std::vector<Slice> writes,
                       int64_t m, int64_t n, int64_t k) {
  compute(compute_, lab, std::move(reads), std::move(writes), gemm_ns(m, n, k));
}

// A memory-bound kernel: reads every read slice and writes every written slice once.
Ns RankBuilder::elementwise_ns(const std::vector<Slice>& reads, const std::vector<Slice>& writes,
                               double flops_per_out) const {
  double in = 0, out = 0;
  for (const Slice& r : reads) in += double(r.count);
  for (const Slice& w : writes) out += double(w.count);
  return cost_.compute_ns(flops_per_out * out, (in + out) * dbytes_, dbytes_);
}

void RankBuilder::elementwise(const std::string& lab, std::vector<Slice> reads,
                              std::vector<Slice> writes, double flops_per_out) {
  Ns ns = elementwise_ns(reads, writes, flops_per_out);
  compute(compute_, lab, std::move(reads), std::move(writes), ns);
}

void RankBuilder::moe_op(const std::string& lab, std::vector<Slice> reads,
                         std::vector<int64_t> read_rows, std::vector<Slice> writes,
                         std::vector<int64_t> write_rows, Ns duration) {
  compute(compute_, lab, std::move(reads), std::move(writes), duration);
  Compute& c = *s_.ranks[rank_].streams[compute_].ops.back().compute();
  c.read_rows = std::move(read_rows);
  c.write_rows = std::move(write_rows);
  if (p_.tp > 1) c.replicated = tp_comm();
}

void RankBuilder::residual_op(const std::string& lab, std::vector<Slice> reads,
                              std::vector<Slice> writes, double flops_per_out) {
  elementwise(lab, std::move(reads), std::move(writes), flops_per_out);
  if (replicated_residual())
    s_.ranks[rank_].streams[compute_].ops.back().compute()->replicated = tp_comm();
}

void RankBuilder::collective(int st, CollOp op, const std::string& comm, int64_t count, Slice in,
                             Slice out, const std::string& lab, const std::string& dtype) {
  Collective c;
  c.op = op;
  c.comm = comm;
  c.dtype = dtype.empty() ? dtype_ : dtype;
  c.count = count;
  c.in = std::move(in);
  c.out = std::move(out);
  c.label = lab;
  s_.append(rank_, st, std::move(c));
}

void RankBuilder::p2p(int st, CollOp op, const std::string& comm, int32_t peer, Slice sl,
                      const std::string& lab) {
  Collective c;
  c.op = op;
  c.comm = comm;
  c.dtype = dtype_;
  c.count = sl.count;
  (op == CollOp::Send ? c.in : c.out) = std::move(sl);
  c.peer = peer;
  c.label = lab;
  s_.append(rank_, st, std::move(c));
}

void RankBuilder::record(int st, const std::string& event) { s_.append(rank_, st, Record{event}); }
void RankBuilder::wait(int st, const std::string& event) { s_.append(rank_, st, Wait{event}); }

std::string RankBuilder::name(int layer, std::string_view what, int mb) const {
  return "L" + std::to_string(layer) + "." + std::string(what) + ".mb" + std::to_string(mb);
}
std::string RankBuilder::label(int layer, std::string_view what) const {
  return "L" + std::to_string(layer) + "." + std::string(what);
}

std::string RankBuilder::tp_comm() const {
  return "tp.pp" + std::to_string(c_.pp) + ".dp" + std::to_string(c_.dp);
}
std::string RankBuilder::ep_comm() const {
  return "ep.pp" + std::to_string(c_.pp) + ".tp" + std::to_string(c_.tp) + ".g" +
         std::to_string(c_.group);
}
std::string RankBuilder::pp_fwd_comm(int from) const {
  return "pp.fwd" + std::to_string(from) + ".tp" + std::to_string(c_.tp) + ".dp" +
         std::to_string(c_.dp);
}
std::string RankBuilder::pp_bwd_comm(int from) const {
  return "pp.bwd" + std::to_string(from) + ".tp" + std::to_string(c_.tp) + ".dp" +
         std::to_string(c_.dp);
}

// ---------------------------------------------------------------- parameter groups

void RankBuilder::setup_groups() {
  dense_.name = "dense";
  dense_.n = p_.dp;
  dense_.index = c_.dp;
  if (p_.dp > 1)
    dense_.comm = "dp.pp" + std::to_string(c_.pp) + ".tp" + std::to_string(c_.tp);
  router_.name = "router";
  router_.prefix = "router_";
  router_.n = dense_.n;
  router_.index = dense_.index;
  router_.comm = dense_.comm;
  expert_.name = "expert";
  expert_.prefix = "expert_";
  expert_.n = p_.dp / p_.ep;
  expert_.index = c_.group;
  if (expert_.n > 1)
    expert_.comm = "edp.pp" + std::to_string(c_.pp) + ".tp" + std::to_string(c_.tp) + ".ep" +
                   std::to_string(c_.ep);
  if (p_.tp > 1) router_.replicated = expert_.replicated = tp_comm();
  for (ParamGroup* g : groups()) {
    g->first_layer = first_layer_;
    g->end_layer = end_layer_;
  }
  expert_.first_layer -= cut_before_ ? 1 : 0;
  expert_.end_layer -= cut_after_ ? 1 : 0;
  for (ParamGroup* g : groups()) {
    g->total = g->per_layer * (g->end_layer - g->first_layer);
    g->zero = g->n > 1 ? p_.zero : 0;
    if (g->per_layer == 0) continue;
    // Buckets in backward order: whole layers from the last, closed once they reach
    // bucket_elems (Megatron); one layer each under ZeRO-2/3.
    bool per_layer = g->zero >= 2;
    int last = g->end_layer - 1;
    int64_t acc = 0;
    for (int l = g->end_layer - 1; l >= g->first_layer; --l) {
      acc += g->per_layer;
      if (per_layer || acc >= p_.bucket_elems || l == g->first_layer) {
        Bucket b;
        b.first_layer = l;
        b.last_layer = last;
        b.offset = (l - g->first_layer) * g->per_layer;
        b.count = acc;
        b.shard_offset = b.offset / g->n;
        g->buckets.push_back(b);
        acc = 0;
        last = l - 1;
      }
    }
  }
}

// ---------------------------------------------------------------- micro-batches

void RankBuilder::gather_weights(int l, int mb, bool backward) {
  for (ParamGroup* g : groups()) {
    if (g->zero != 3 || g->per_layer == 0) continue;
    std::string phase = backward ? "bwd" : "fwd";
    // One gathered copy per (layer, phase) is reused by every micro-batch only after the
    // compute that read it has finished, so each micro-batch gathers into its own name.
    std::string full = gathered_name(l, *g, backward, mb);
    int64_t shard = g->per_layer / g->n;
    Slice in = buffer(g->buf("params"), g->total / g->n).sub((l - g->first_layer) * shard, shard);
    Slice out = buffer(full, g->per_layer);
    collective(dp_stream_, CollOp::AllGather, g->comm, shard, in, out,
               label(l, g->name + ".params." + phase + ".allgather"));
    record(dp_stream_, full + ".ready");
    dp_used_ = true;
  }
}

void RankBuilder::forward_microbatch(int mb) {
  const int stage = c_.pp;
  if (stage > 0) {
    bool full = p_.sp_on() && p_.pp_send_full;
    int st = stream("p2p_recv_fwd");
    const int32_t from = rank_of(p_, c_.tp, c_.dp, stage - 1);
    const std::string lab = "pp.fwd.mb" + std::to_string(mb);
    if (cut_before_) {
      for (const Slice& in : cut_forward_values(first_layer_ - 1, mb))
        p2p(st, CollOp::Recv, pp_fwd_comm(stage - 1), from, in, lab);
    } else {
      Slice in = full ? buffer(name(first_layer_, "x_full", mb), M_)
                      : buffer(name(first_layer_, "x", mb), X_);
      p2p(st, CollOp::Recv, pp_fwd_comm(stage - 1), from, in, lab);
    }
    std::string ev = "pp.fwd.mb" + std::to_string(mb) + ".received";
    record(st, ev);
    wait(compute_, ev);
  }
  // The tail of the layer the previous stage cut (its MoE dispatch onwards).
  if (cut_before_) forward_layer_tail(first_layer_ - 1, mb);
  for (int l = first_layer_; l < end_layer_; ++l) {
    if (p_.zero == 3) {
      // Prefetch: the next layer's weights are gathered while this one computes.
      if (l == first_layer_) gather_weights(l, mb, false);
      if (l + 1 < end_layer_) gather_weights(l + 1, mb, false);
      for (const ParamGroup* g : groups())
        if (g->zero == 3 && g->per_layer > 0)
          wait(compute_, gathered_name(l, *g, false, mb) + ".ready");
    }
    backward_phase_ = false;
    weight_mb_ = mb;
    if (l + 1 == end_layer_ && cut_after_)
      forward_layer_head(l, mb);
    else
      forward_layer(l, mb);
  }
  std::string out_label = "pp.fwd.mb" + std::to_string(mb);
  if (stage + 1 < p_.pp) {
    std::vector<Slice> outs;
    if (cut_after_) {
      outs = cut_forward_values(end_layer_ - 1, mb);
    } else {
      Slice out = buffer(name(end_layer_, "x", mb), X_);
      if (p_.sp_on() && p_.pp_send_full)
        out = sp_gather(end_layer_ - 1, mb, "output_full", out, "output.allgather");
      outs = {out};
    }
    std::string ev = "pp.fwd.mb" + std::to_string(mb) + ".ready";
    record(compute_, ev);
    int st = stream("p2p_send_fwd");
    wait(st, ev);
    for (const Slice& out : outs)
      p2p(st, CollOp::Send, pp_fwd_comm(stage), rank_of(p_, c_.tp, c_.dp, stage + 1), out,
          out_label);
  } else {
    Slice y = buffer(name(end_layer_, "x", mb), X_);
    Slice loss = buffer("loss.mb" + std::to_string(mb), 1);
    residual_op("loss", {y}, {loss}, 4);
  }
}

void RankBuilder::backward_microbatch(int mb) {
  const int stage = c_.pp;
  Slice dy = buffer(name(end_layer_, "dx", mb), X_);
  if (stage + 1 < p_.pp) {
    int st = stream("p2p_recv_bwd");
    const std::vector<Slice> ins =
        cut_after_ ? cut_backward_values(end_layer_ - 1, mb) : std::vector<Slice>{dy};
    for (const Slice& in : ins)
      p2p(st, CollOp::Recv, pp_bwd_comm(stage), rank_of(p_, c_.tp, c_.dp, stage + 1), in,
          "pp.bwd.mb" + std::to_string(mb));
    std::string ev = "pp.bwd.mb" + std::to_string(mb) + ".received";
    record(st, ev);
    wait(compute_, ev);
  } else {
    residual_op("loss.bwd", {buffer(name(end_layer_, "x", mb), X_)}, {dy}, 4);
  }
  const bool last_mb = mb + 1 == m_.micro_batches;
  for (int l = end_layer_ - 1; l >= first_layer_; --l) {
    if (p_.zero == 3) {
      if (l == end_layer_ - 1) gather_weights(l, mb, true);
      if (l - 1 >= first_layer_) gather_weights(l - 1, mb, true);
      for (const ParamGroup* g : groups())
        if (g->zero == 3 && g->per_layer > 0)
          wait(compute_, gathered_name(l, *g, true, mb) + ".ready");
    }
    backward_phase_ = true;
    weight_mb_ = mb;
    if (l + 1 == end_layer_ && cut_after_)
      backward_layer_head(l, mb);
    else
      backward_layer(l, mb);
    if (last_mb) layer_grads_ready(l);
  }
  if (cut_before_) {
    backward_layer_tail(first_layer_ - 1, mb);
    if (last_mb) layer_grads_ready(first_layer_ - 1);
  }
  if (stage > 0) {
    const std::vector<Slice> outs = cut_before_
                                        ? cut_backward_values(first_layer_ - 1, mb)
                                        : std::vector<Slice>{buffer(name(first_layer_, "dx", mb), X_)};
    std::string ev = "pp.bwd.mb" + std::to_string(mb) + ".ready";
    record(compute_, ev);
    int st = stream("p2p_send_bwd");
    wait(st, ev);
    for (const Slice& dx : outs)
      p2p(st, CollOp::Send, pp_bwd_comm(stage - 1), rank_of(p_, c_.tp, c_.dp, stage - 1), dx,
          "pp.bwd.mb" + std::to_string(mb));
  }
  if (last_mb) backward_done();
}

// ---------------------------------------------------------------- gradients and optimizer

// Called after the last micro-batch's backward of layer l: buckets (ZeRO 0), layers (ZeRO 2/3)
// whose gradients are complete go to the DP stream, overlapping the rest of the backward.
void RankBuilder::layer_grads_ready(int l) {
  for (ParamGroup* g : groups()) {
    if (g->comm.empty() || g->zero == 1) continue;
    for (size_t k = 0; k < g->buckets.size(); ++k) {
      const Bucket& b = g->buckets[k];
      if (b.first_layer != l) continue;
      std::string ev = g->name + ".bucket" + std::to_string(k) + ".ready";
      record(compute_, ev);
      wait(dp_stream_, ev);
      Slice grads = buffer(g->buf("grads"), g->total).sub(b.offset, b.count);
      std::string lab = "dp." + g->name + ".bucket" + std::to_string(k);
      if (g->zero == 0) {
        collective(dp_stream_, CollOp::AllReduce, g->comm, b.count, grads, grads, lab + ".allreduce");
      } else {
        Slice shard = buffer(g->buf("grad_shard"), g->total / g->n).sub(b.shard_offset, b.count / g->n);
        collective(dp_stream_, CollOp::ReduceScatter, g->comm, b.count / g->n, grads, shard,
                   lab + ".reducescatter");
      }
      dp_used_ = true;
    }
  }
}

// ZeRO-1 reduce-scatters the gradients once the whole backward is done (seed 002).
void RankBuilder::backward_done() {
  bool announced = false;
  for (ParamGroup* g : groups()) {
    if (g->comm.empty() || g->zero != 1 || g->per_layer == 0) continue;
    if (!announced) {
      record(compute_, "backward.done");
      wait(dp_stream_, "backward.done");
      announced = true;
    }
    for (size_t k = 0; k < g->buckets.size(); ++k) {
      const Bucket& b = g->buckets[k];
      Slice grads = buffer(g->buf("grads"), g->total).sub(b.offset, b.count);
      Slice shard = buffer(g->buf("grad_shard"), g->total / g->n).sub(b.shard_offset, b.count / g->n);
      collective(dp_stream_, CollOp::ReduceScatter, g->comm, b.count / g->n, grads, shard,
                 "dp." + g->name + ".bucket" + std::to_string(k) + ".reducescatter");
      dp_used_ = true;
    }
  }
}

void RankBuilder::optimizer_and_param_gather() {
  if (dp_used_) {
    record(dp_stream_, "grads.reduced");
    wait(compute_, "grads.reduced");
  }
  // Adam: fp32 master weights, momentum and variance (3 floats per parameter) next to the
  // model-precision parameters and gradients; about 12 FLOPs and 32 bytes moved per parameter.
  auto adam = [&](const std::string& lab, Slice g, Slice w, Slice state) {
    double n = double(w.count);
    compute(compute_, lab, {g, w, state}, {w, state},
            cost_.compute_ns(12 * n, n * (2.0 * dbytes_ + dbytes_ + 24.0), 4));
  };
  bool gather = false;
  for (ParamGroup* g : groups()) {
    if (g->per_layer == 0) continue;
    std::string lab = "optimizer." + g->name;
    if (!g->sharded()) {
      adam(lab, buffer(g->buf("grads"), g->total), buffer(g->buf("params"), g->total),
           buffer(g->buf("opt_state"), 3 * g->total, "float32"));
      continue;
    }
    const int64_t shard_total = g->total / g->n;
    Slice shard = buffer(g->buf("grad_shard"), shard_total);
    Slice state = buffer(g->buf("opt_state"), 3 * shard_total, "float32");
    if (g->zero == 3) {
      adam(lab, shard, buffer(g->buf("params"), shard_total), state);
      continue;
    }
    gather = true;
    Slice params = buffer(g->buf("params"), g->total);
    for (const Bucket& b : g->buckets) {
      int64_t c = b.count / g->n;
      adam(lab, shard.sub(b.shard_offset, c), params.sub(b.offset + g->index * c, c),
           state.sub(3 * b.shard_offset, 3 * c));
    }
  }
  if (!gather) return;
  record(compute_, "optimizer.done");
  wait(dp_stream_, "optimizer.done");
  for (ParamGroup* g : groups()) {
    if (g->per_layer == 0 || !g->sharded() || g->zero == 3) continue;
    Slice params = buffer(g->buf("params"), g->total);
    for (size_t k = 0; k < g->buckets.size(); ++k) {
      const Bucket& b = g->buckets[k];
      int64_t c = b.count / g->n;
      collective(dp_stream_, CollOp::AllGather, g->comm, c, params.sub(b.offset + g->index * c, c),
                 params.sub(b.offset, b.count),
                 "dp." + g->name + ".bucket" + std::to_string(k) + ".params.allgather");
    }
  }
}

void RankBuilder::set_outputs() {
  RankSchedule& rs = s_.ranks[rank_];
  std::vector<std::string> out;
  if (c_.pp + 1 == p_.pp)
    for (int mb = 0; mb < m_.micro_batches; ++mb) out.push_back("loss.mb" + std::to_string(mb));
  if (c_.pp == 0)  // gradients w.r.t. the embedded input, for the embedding's backward
    for (int mb = 0; mb < m_.micro_batches; ++mb) out.push_back(name(0, "dx", mb));
  for (const ParamGroup* g : groups()) {
    if (g->per_layer == 0) continue;
    out.push_back(g->buf(g->sharded() ? "grad_shard" : "grads"));
    out.push_back(g->buf("params"));
    out.push_back(g->buf("opt_state"));
  }
  rs.outputs = std::move(out);
}

void RankBuilder::build() {
  s_.add_rank(rank_);
  compute_ = stream("compute");
  setup_groups();
  if (!dense_.comm.empty() || !expert_.comm.empty()) dp_stream_ = stream("dp");
  // 1F1B: stage s runs min(pp - s - 1, m) warm-up forwards, then alternates one forward and
  // one backward, then drains the remaining backwards. pp == 1 gives F0 B0 F1 B1 ...
  const int m = static_cast<int>(m_.micro_batches);
  const int warmup = std::min(p_.pp - c_.pp - 1, m);
  for (int i = 0; i < warmup; ++i) forward_microbatch(i);
  for (int i = 0; i < m - warmup; ++i) {
    forward_microbatch(warmup + i);
    backward_microbatch(i);
  }
  for (int i = m - warmup; i < m; ++i) backward_microbatch(i);
  optimizer_and_param_gather();
  set_outputs();
  // Replicated parameter groups start with the same data on every TP rank.
  for (const ParamGroup* g : groups()) {
    if (g->replicated.empty() || g->per_layer == 0) continue;
    for (const char* what : {"params", "grads", "opt_state", "grad_shard"}) {
      const std::string nm = g->buf(what);
      for (Buffer& b : s_.ranks[rank_].buffers)
        if (b.name == nm) b.replicated = g->replicated;
    }
  }
}

// What crosses a stage boundary cut inside layer l's MoE block: the residual stream after the
// attention, the routing probabilities and the routed tokens (forward); the gradients of the
// routed tokens and of the probabilities, and the layer output's gradient (backward).
std::vector<Slice> RankBuilder::cut_forward_values(int l, int mb) {
  const int64_t routed = T_ * m_.top_k * m_.hidden;
  return {buffer(name(l, "h", mb), X_), buffer(name(l, "probs", mb), T_ * m_.experts),
          buffer(name(l, "dispatch_in", mb), routed)};
}

std::vector<Slice> RankBuilder::cut_backward_values(int l, int mb) {
  const int64_t routed = T_ * m_.top_k * m_.hidden;
  return {buffer(name(l, p_.ep > 1 ? "d_dispatch_in" : "d_dispatch_out", mb), routed),
          buffer(name(l, "d_probs", mb), T_ * m_.experts), buffer(name(l + 1, "dx", mb), X_)};
}

std::string RankBuilder::gathered_name(int l, const ParamGroup& g, bool backward, int mb) const {
  return "L" + std::to_string(l) + "." + g.prefix + "w." + (backward ? "bwd" : "fwd") + ".mb" +
         std::to_string(mb);
}

}  // namespace braid::fusion::synth_detail

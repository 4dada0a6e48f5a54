// Hand-built schedules for the fusion pass tests: one per pattern, small enough for the
// reference interpreter, with `outputs` declared so scratch buffers may change.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/ir.h"
#include "fusion/synth.h"
#include "fusion/schedules.h"

namespace braid::fusion::testing {

// A cost model whose links are slow (1 MB/s, no latency) so that tiny test messages show the
// same trade-offs as real ones.
inline analysis::CostModel slow_links(double latency_ns = 0, double gbps = 0.001) {
  analysis::HardwareProfile p = analysis::default_profile();
  p.intra_node = {"slow", latency_ns, gbps};
  p.inter_node = {"slow", latency_ns, gbps};
  p.gpu.kernel_overhead_ns = 1000;
  return analysis::CostModel(p);
}

// TP+SP: t ranks; out_proj writes `partial` (M), all-reduce into `out`, and the residual reads
// only the rank's shard of `out`. With `full_reader`, a later op reads all of `out`; with
// `opaque`, the residual is opaque (lifted) compute.
inline Schedule tp_sp(int t = 4, int64_t M = 16, bool full_reader = false, bool opaque = false,
                      bool out_is_output = false) {
  Schedule s;
  s.name = "tp-sp";
  std::vector<int32_t> all;
  for (int r = 0; r < t; ++r) all.push_back(r);
  s.comms.push_back({"tp", all});
  const int64_t Ms = M / t;
  for (int32_t r = 0; r < t; ++r) {
    s.add_buffer(r, "x", "float32", M);
    s.add_buffer(r, "partial", "float32", M);
    s.add_buffer(r, "out", "float32", M);
    s.add_buffer(r, "res", "float32", Ms);
    s.add_buffer(r, "res2", "float32", M);
    s.ranks[r].outputs = {"res"};
    if (full_reader) s.ranks[r].outputs.push_back("res2");
    if (out_is_output) s.ranks[r].outputs.push_back("out");
    int st = s.add_stream(r, "compute");
    s.append(r, st, comp("out_proj", 4000, {sl("x", 0, M)}, {sl("partial", 0, M)}));
    s.append(r, st, coll(CollOp::AllReduce, "tp", M, sl("partial", 0, M), sl("out", 0, M), "attn.ar"));
    s.append(r, st, comp("residual", 500, opaque ? std::vector<Slice>{} : std::vector<Slice>{sl("out", r * Ms, Ms)},
                         opaque ? std::vector<Slice>{} : std::vector<Slice>{sl("res", 0, Ms)}, opaque));
    s.append(r, st, Delay{100});
    if (full_reader) s.append(r, st, comp("qkv", 800, {sl("out", 0, M)}, {sl("res2", 0, M)}));
  }
  return s;
}

// PP+EP: stage 0 = ranks 0..e-1 sends `x` (M) to stage 1 = ranks e..2e-1 (rank i -> e + i), which
// receive into `x` and dispatch it with an all-to-all on `ep` into `y`. With `gate`, stage 1
// computes the MoE gate from `x` (a reader of the intermediate); with `combine`, the mirror:
// stage 0 combines with an all-to-all and sends the result on.
inline Schedule pp_ep(int e = 2, int64_t M = 8, bool gate = false) {
  Schedule s;
  s.name = "pp-ep";
  std::vector<int32_t> ep;
  for (int i = 0; i < e; ++i) ep.push_back(e + i);
  s.comms.push_back({"ep", ep});
  for (int i = 0; i < e; ++i) s.comms.push_back({"pp" + std::to_string(i), {i, e + i}});
  for (int32_t r = 0; r < 2 * e; ++r) {
    s.add_buffer(r, "x", "float32", M);
    s.add_buffer(r, "y", "float32", M);
    s.add_buffer(r, "scores", "float32", M);
    int st = s.add_stream(r, "main");
    if (r < e) {
      s.ranks[r].outputs = {"x"};
      s.append(r, st, comp("prev", 1000, {}, {sl("x", 0, M)}));
      s.append(r, st, p2p(CollOp::Send, "pp" + std::to_string(r), e + r, M, sl("x", 0, M), "pp.fwd"));
    } else {
      s.ranks[r].outputs = {"y"};
      if (gate) s.ranks[r].outputs.push_back("scores");
      s.append(r, st, p2p(CollOp::Recv, "pp" + std::to_string(r - e), r - e, M, sl("x", 0, M), "pp.fwd"));
      if (gate) s.append(r, st, comp("gate", 300, {sl("x", 0, M)}, {sl("scores", 0, M)}));
      s.append(r, st, coll(CollOp::AllToAll, "ep", M / e, sl("x", 0, M), sl("y", 0, M), "dispatch"));
      s.append(r, st, comp("experts", 1000, {sl("y", 0, M)}, {sl("y", 0, M)}));
    }
  }
  return s;
}

// PP+SP: stage 0 = ranks 0..t-1 all-gather their shards `x` (Ms) into `full` (M) and each sends
// `full` to its peer t + i, which receives into `xin`.
inline Schedule pp_sp(int t = 2, int64_t Ms = 4) {
  Schedule s;
  s.name = "pp-sp";
  std::vector<int32_t> sp;
  for (int i = 0; i < t; ++i) sp.push_back(i);
  s.comms.push_back({"sp", sp});
  for (int i = 0; i < t; ++i) s.comms.push_back({"pp" + std::to_string(i), {i, t + i}});
  const int64_t M = Ms * t;
  for (int32_t r = 0; r < 2 * t; ++r) {
    s.add_buffer(r, "x", "float32", Ms);
    s.add_buffer(r, "full", "float32", M);
    s.add_buffer(r, "xin", "float32", M);
    s.add_buffer(r, "h", "float32", M);
    int st = s.add_stream(r, "main");
    if (r < t) {
      s.ranks[r].outputs = {"x"};
      s.append(r, st, comp("residual", 500, {}, {sl("x", 0, Ms)}));
      s.append(r, st, coll(CollOp::AllGather, "sp", Ms, sl("x", 0, Ms), sl("full", 0, M), "output.ag"));
      s.append(r, st, p2p(CollOp::Send, "pp" + std::to_string(r), t + r, M, sl("full", 0, M), "pp.fwd"));
    } else {
      s.ranks[r].outputs = {"h"};
      s.append(r, st, p2p(CollOp::Recv, "pp" + std::to_string(r - t), r - t, M, sl("xin", 0, M), "pp.fwd"));
      s.append(r, st, comp("attn", 700, {sl("xin", 0, M)}, {sl("h", 0, M)}));
    }
  }
  return s;
}

// SP+EP on one group of t ranks: all-gather the shard, all-to-all the gathered tokens.
inline Schedule sp_ep(int t = 2, int64_t Ms = 4) {
  Schedule s;
  s.name = "sp-ep";
  std::vector<int32_t> g;
  for (int i = 0; i < t; ++i) g.push_back(i);
  s.comms.push_back({"sp", g});
  s.comms.push_back({"ep", g});
  const int64_t M = Ms * t;
  for (int32_t r = 0; r < t; ++r) {
    s.add_buffer(r, "x", "float32", Ms);
    s.add_buffer(r, "full", "float32", M);
    s.add_buffer(r, "y", "float32", M);
    s.ranks[r].outputs = {"y"};
    int st = s.add_stream(r, "main");
    s.append(r, st, comp("ln", 200, {}, {sl("x", 0, Ms)}));
    s.append(r, st, coll(CollOp::AllGather, "sp", Ms, sl("x", 0, Ms), sl("full", 0, M), "moe.ag"));
    s.append(r, st, coll(CollOp::AllToAll, "ep", M / t, sl("full", 0, M), sl("y", 0, M), "dispatch"));
  }
  return s;
}

// TP+EP: 4 ranks, TP groups {0,1}, {2,3}; EP groups {0,2}, {1,3}. All-reduce over TP, then
// every TP rank dispatches the full result over its EP group.
inline Schedule tp_ep(int64_t M = 8) {
  Schedule s;
  s.name = "tp-ep";
  s.comms.push_back({"tp0", {0, 1}});
  s.comms.push_back({"tp1", {2, 3}});
  s.comms.push_back({"ep0", {0, 2}});
  s.comms.push_back({"ep1", {1, 3}});
  for (int32_t r = 0; r < 4; ++r) {
    s.add_buffer(r, "partial", "float32", M);
    s.add_buffer(r, "h", "float32", M);
    s.add_buffer(r, "y", "float32", M);
    s.ranks[r].outputs = {"y"};
    int st = s.add_stream(r, "main");
    s.append(r, st, comp("out_proj", 1000, {}, {sl("partial", 0, M)}));
    s.append(r, st, coll(CollOp::AllReduce, r < 2 ? "tp0" : "tp1", M, sl("partial", 0, M), sl("h", 0, M), "attn.ar"));
    s.append(r, st, coll(CollOp::AllToAll, (r % 2) ? "ep1" : "ep0", M / 2, sl("h", 0, M), sl("y", 0, M), "dispatch"));
  }
  return s;
}

// Coalescing: two all-reduces of adjacent slices of `g`, back to back on every rank. With
// `dependent`, the second reads what the first wrote.
inline Schedule two_allreduces(int t = 2, int64_t n = 4, bool dependent = false) {
  Schedule s;
  s.name = "two-ar";
  std::vector<int32_t> all;
  for (int i = 0; i < t; ++i) all.push_back(i);
  s.comms.push_back({"dp", all});
  for (int32_t r = 0; r < t; ++r) {
    s.add_buffer(r, "g", "float32", 2 * n);
    int st = s.add_stream(r, "main");
    s.append(r, st, comp("bwd", 500, {}, {sl("g", 0, 2 * n)}));
    s.append(r, st, coll(CollOp::AllReduce, "dp", n, sl("g", 0, n), sl("g", 0, n), "bucket0"));
    if (dependent)
      s.append(r, st, coll(CollOp::AllReduce, "dp", n, sl("g", 0, n), sl("g", n, n), "bucket1"));
    else
      s.append(r, st, coll(CollOp::AllReduce, "dp", n, sl("g", n, n), sl("g", n, n), "bucket1"));
  }
  return s;
}

// Dedup: all-gather `x` into `a`, compute, all-gather `x` again into `b` (the recomputing
// all-gather), read `b`. With `write_between`, `x` changes in between.
inline Schedule regather(int t = 2, int64_t n = 4, bool write_between = false, bool opaque_between = false) {
  Schedule s;
  s.name = "regather";
  std::vector<int32_t> all;
  for (int i = 0; i < t; ++i) all.push_back(i);
  s.comms.push_back({"tp", all});
  for (int32_t r = 0; r < t; ++r) {
    s.add_buffer(r, "x", "float32", n);
    s.add_buffer(r, "a", "float32", t * n);
    s.add_buffer(r, "b", "float32", t * n);
    s.add_buffer(r, "y", "float32", t * n);
    s.add_buffer(r, "z", "float32", t * n);
    s.ranks[r].outputs = {"y", "z", "x"};
    int st = s.add_stream(r, "main");
    s.append(r, st, coll(CollOp::AllGather, "tp", n, sl("x", 0, n), sl("a", 0, t * n), "fwd.ag"));
    s.append(r, st, comp("qkv", 500, {sl("a", 0, t * n)}, {sl("y", 0, t * n)}));
    if (write_between) s.append(r, st, comp("update", 100, {}, {sl("x", 0, n)}));
    if (opaque_between) s.append(r, st, comp("kernel", 100, {}, {}, true));
    s.append(r, st, coll(CollOp::AllGather, "tp", n, sl("x", 0, n), sl("b", 0, t * n), "bwd.regather"));
    s.append(r, st, comp("wgrad", 500, {sl("b", 0, t * n)}, {sl("z", 0, t * n)}));
  }
  return s;
}

// CoC: a GEMM writes `y`, then its reduction over the TP group, on one stream or (two_stream)
// handed to a comm stream through an event. Without `scatter`: the all-reduce of `y` (n) in
// place, then the residual reads `y` into `z`. With `scatter` (Megatron SP): `y` is t x n, its
// reduce-scatter writes the rank's shard `z` (n), then the residual reads `z` into `out`.
inline Schedule gemm_reduction(bool scatter, int t, int64_t n, Ns gemm_ns, bool two_stream,
                               bool opaque) {
  Schedule s;
  s.name = scatter ? "gemm-rs" : "gemm-ar";
  std::vector<int32_t> all;
  for (int i = 0; i < t; ++i) all.push_back(i);
  s.comms.push_back({"tp", all});
  const int64_t full = scatter ? t * n : n;  // the GEMM's output
  const char* done = scatter ? "rs_done" : "ar_done";
  for (int32_t r = 0; r < t; ++r) {
    s.add_buffer(r, "x", "float32", full);
    s.add_buffer(r, "w", "float32", 8);
    s.add_buffer(r, "y", "float32", full);
    s.add_buffer(r, "z", "float32", n);
    if (scatter) s.add_buffer(r, "out", "float32", n);
    s.ranks[r].outputs = scatter ? std::vector<std::string>{"z", "out"} : std::vector<std::string>{"z"};
    int st = s.add_stream(r, "compute");
    int cs = two_stream ? s.add_stream(r, "comm") : st;
    s.append(r, st, comp("fc2", gemm_ns, opaque ? std::vector<Slice>{} : std::vector<Slice>{sl("x", 0, full), sl("w", 0, 8)},
                         opaque ? std::vector<Slice>{} : std::vector<Slice>{sl("y", 0, full)}, opaque));
    if (two_stream) {
      s.append(r, st, Record{"y_ready"});
      s.append(r, cs, Wait{"y_ready"});
    }
    if (scatter)
      s.append(r, cs, coll(CollOp::ReduceScatter, "tp", n, sl("y", 0, full), sl("z", 0, n), "mlp.rs"));
    else
      s.append(r, cs, coll(CollOp::AllReduce, "tp", n, sl("y", 0, n), sl("y", 0, n), "mlp.ar"));
    if (two_stream) {
      s.append(r, cs, Record{done});
      s.append(r, st, Wait{done});
    }
    if (scatter)
      s.append(r, st, comp("residual", 1000, {sl("z", 0, n)}, {sl("out", 0, n)}));
    else
      s.append(r, st, comp("residual", 1000, {sl("y", 0, n)}, {sl("z", 0, n)}));
  }
  return s;
}
inline Schedule gemm_allreduce(int t = 2, int64_t n = 64, Ns gemm_ns = 2'000'000,
                               bool two_stream = false, bool opaque = false) {
  return gemm_reduction(false, t, n, gemm_ns, two_stream, opaque);
}
inline Schedule gemm_reducescatter(int t = 2, int64_t n = 32, Ns gemm_ns = 2'000'000,
                                   bool two_stream = false) {
  return gemm_reduction(true, t, n, gemm_ns, two_stream, false);
}

// CoC, Megatron SP: the all-gather of the rank's shard `x` (n) into `full` (t x n), then a GEMM
// that reads `full` and writes `y` (`y_count`, at most t x n to pipeline; more makes it read
// `full` whole), then the residual reads `y`. With `writes_input`, the GEMM writes `x`.
inline Schedule allgather_gemm(int t = 2, int64_t n = 32, Ns gemm_ns = 2'000'000,
                               int64_t y_count = 0, bool writes_input = false) {
  if (y_count == 0) y_count = t * n;
  Schedule s;
  s.name = "ag-gemm";
  std::vector<int32_t> all;
  for (int i = 0; i < t; ++i) all.push_back(i);
  s.comms.push_back({"tp", all});
  for (int32_t r = 0; r < t; ++r) {
    s.add_buffer(r, "x", "float32", n);
    s.add_buffer(r, "w", "float32", 8);
    s.add_buffer(r, "full", "float32", t * n);
    s.add_buffer(r, "y", "float32", y_count);
    s.add_buffer(r, "z", "float32", y_count);
    s.ranks[r].outputs = {"full", "z"};
    int st = s.add_stream(r, "compute");
    s.append(r, st, comp("ln", 1000, {}, {sl("x", 0, n)}));
    s.append(r, st, coll(CollOp::AllGather, "tp", n, sl("x", 0, n), sl("full", 0, t * n), "attn.ag"));
    std::vector<Slice> writes{sl("y", 0, y_count)};
    if (writes_input) writes = {sl("x", 0, n)};
    s.append(r, st, comp("qkv", gemm_ns, {sl("full", 0, t * n), sl("w", 0, 8)}, writes));
    s.append(r, st, comp("residual", 1000, {sl("y", 0, y_count)}, {sl("z", 0, y_count)}));
  }
  return s;
}

// A synthesizer preset shrunk to the fusion tests' shape (2 layers per stage, hidden 16, seq 8,
// 4 heads, ffn 32, at most 2 micro-batches, at most 4 experts and EP 4); its layout otherwise as
// the preset says. The fusion benchmark (bench/bench_fuse.cc) times the pipeline on it too.
// The preset `name` at that shape (its layout unchanged).
inline Preset preset_test_shape(const std::string& name) {
  Preset p = preset(name);
  p.model.layers = p.layout.pp * 2;
  p.model.hidden = 16;
  p.model.seq = 8;
  p.model.heads = 4;
  p.model.ffn = 32;
  p.model.micro_batches = std::min<int64_t>(p.model.micro_batches, 2);
  if (p.model.experts > 0) p.model.experts = 4;
  if (p.model.experts > 0 && p.layout.ep > 4) p.layout.ep = 4;
  p.layout.bucket_elems = 1 << 20;
  return p;
}

inline Schedule preset_at_test_shape(const std::string& name,
                                     const analysis::CostModel& cm = analysis::CostModel()) {
  const Preset p = preset_test_shape(name);
  return synthesize(p.model, p.layout, cm);
}

// A preset at the shapes of Chimera's experiments (issue 22): hidden 2048, 16 heads, sequence
// 8192, float32, one micro-batch, the preset's FFN size (as `braid synth --preset P` with those
// flags), and per preset: tp-pp tp 4, pp 2, micro-batch 64, 2 layers;
// tp-ep and sp-ep tp 4, dp 2, ep 2, micro-batch 128, 1 layer, 8 experts, top-1; pp-ep tp 1,
// pp 2, dp 4, ep 4, micro-batch 64, 2 layers; pp-sp tp 4, pp 2, micro-batch 112, 2 layers.
// Other presets: their own layout at micro-batch 64, 2 layers per stage.
inline Preset preset_at_chimera_shape(const std::string& name) {
  Preset p = preset(name);
  p.model.hidden = 2048;
  p.model.heads = 16;
  p.model.seq = 8192;
  p.model.dtype = "float32";
  p.model.micro_batches = 1;
  p.model.micro_batch = 64;
  p.model.layers = 2 * p.layout.pp;
  if (p.model.experts > 0) {
    p.model.experts = 8;
    p.model.top_k = 1;
  }
  if (name == "tp-pp") {
    p.layout.tp = 4, p.layout.pp = 2, p.layout.dp = 1, p.model.layers = 2;
  } else if (name == "tp-ep" || name == "sp-ep") {
    p.layout.tp = 4, p.layout.dp = 2, p.layout.ep = 2, p.model.micro_batch = 128,
    p.model.layers = 1;
  } else if (name == "pp-ep") {
    p.layout.tp = 1, p.layout.pp = 2, p.layout.dp = 4, p.layout.ep = 4, p.model.layers = 2;
  } else if (name == "pp-sp") {
    p.layout.tp = 4, p.layout.pp = 2, p.layout.dp = 1, p.model.micro_batch = 112,
    p.model.layers = 2;
  }
  return p;
}

}  // namespace braid::fusion::testing

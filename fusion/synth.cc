// The synthesizer's entry points: layout checks, communicators, presets (docs/synth.md).
#include "fusion/synth.h"

#include <sstream>

#include "fusion/symmetry.h"
#include "fusion/synth_builder.h"
#include "fusion/validate.h"
#include "trace/error.h"

namespace braid::fusion {

std::string_view to_string(SpMode m) {
  switch (m) {
    case SpMode::None: return "none";
    case SpMode::ReduceScatter: return "reducescatter";
    case SpMode::AllReduce: return "allreduce";
  }
  return "none";
}

RankCoord coord_of(const ParallelLayout& p, int32_t rank) {
  RankCoord c;
  c.tp = rank % p.tp;
  c.dp = (rank / p.tp) % p.dp;
  c.pp = rank / (p.tp * p.dp);
  c.ep = c.dp % p.ep;
  c.group = c.dp / p.ep;
  return c;
}

int32_t rank_of(const ParallelLayout& p, int tp, int dp, int pp) {
  return tp + p.tp * (dp + p.dp * pp);
}

ParamCounts param_counts(const ModelShape& m, const ParallelLayout& p) {
  ParamCounts c;
  const int64_t h = m.hidden, d = m.ffn_size(), t = p.tp;
  c.dense_per_layer = 4 * h * h / t + (m.moe() ? 0 : 2 * h * d / t);
  c.router_per_layer = m.moe() ? h * m.experts : 0;
  c.expert_per_layer = m.moe() ? (m.experts / p.ep) * 2 * h * d : 0;
  c.layers_per_stage = m.layers / p.pp;
  return c;
}

namespace {

[[noreturn]] void usage(const std::string& msg) { throw Error(ErrorCode::Usage, msg); }

std::string n(int64_t v) { return std::to_string(v); }

}  // namespace

void check_layout(const ModelShape& m, const ParallelLayout& p) {
  auto positive = [](const char* what, int64_t v) {
    if (v < 1) usage(std::string(what) + " must be at least 1 (got " + n(v) + ")");
  };
  positive("--layers", m.layers);
  positive("--hidden", m.hidden);
  positive("--seq", m.seq);
  positive("--micro-batch", m.micro_batch);
  positive("--micro-batches", m.micro_batches);
  positive("--heads", m.heads);
  positive("--tp", p.tp);
  positive("--pp", p.pp);
  positive("--ep", p.ep);
  positive("--dp", p.dp);
  positive("--bucket", p.bucket_elems);
  if (m.ffn < 0) usage("--ffn must not be negative (0 means 4 x hidden)");
  if (m.experts < 0) usage("--experts must not be negative (0 means a dense MLP)");
  if (dtype_size(normalize_dtype(m.dtype)) <= 0)
    usage("unknown --dtype '" + m.dtype + "' (expected bfloat16, float16, float32, ...)");
  if (m.hidden % m.heads)
    usage("hidden size " + n(m.hidden) + " is not divisible by the " + n(m.heads) + " heads");
  if (m.heads % p.tp)
    usage(n(m.heads) + " attention heads are not divisible by tp=" + n(p.tp));
  if (!m.moe() && m.ffn_size() % p.tp)
    usage("FFN size " + n(m.ffn_size()) + " is not divisible by tp=" + n(p.tp));
  if (m.layers % p.pp)
    usage(n(m.layers) + " layers are not divisible by pp=" + n(p.pp) + " pipeline stages");
  if (p.sp_on()) {
    if (p.tp < 2) usage("sequence parallelism needs tp > 1 (it shards the sequence over TP)");
    if (m.seq % p.tp)
      usage("sequence length " + n(m.seq) + " is not divisible by tp=" + n(p.tp) +
            " (SP shards the sequence)");
  }
  if (p.pp_moe_cut) {
    if (!m.moe() || p.pp < 2 || p.ep < 2)
      usage("cutting stages at the MoE dispatch (--pp-moe-cut) needs an MoE model, pp > 1 and "
            "ep > 1");
    if (p.tp > 1) usage("--pp-moe-cut is built for tp = 1 (the gate's input is the residual "
                        "stream, not a TP-gathered one)");
    if (p.zero == 3) usage("--pp-moe-cut does not support ZeRO-3 (the receiving stage would "
                           "gather the cut layer's experts)");
  }
  if (p.pp_send_full && !p.sp_on())
    usage("sending the full stage output (PP+SP baseline) needs sequence parallelism (--sp)");
  if (p.ep > 1 && !m.moe()) usage("ep=" + n(p.ep) + " needs an MoE model (--experts > 0)");
  if (m.moe()) {
    if (m.experts % p.ep)
      usage(n(m.experts) + " experts are not divisible by ep=" + n(p.ep));
    if (p.dp % p.ep)
      usage("ep=" + n(p.ep) + " does not divide dp=" + n(p.dp) +
            " (expert-parallel groups are carved out of the data-parallel ranks)");
    if (m.top_k < 1 || m.top_k > m.experts)
      usage("top-k " + n(m.top_k) + " must be between 1 and the " + n(m.experts) + " experts");
    if ((m.tokens() * m.top_k) % m.experts)
      usage("balanced routing needs tokens x top-k (" + n(m.tokens()) + " x " + n(m.top_k) +
            ") divisible by the " + n(m.experts) + " experts");
    if (p.ep > 1 && m.tokens() % (int64_t(p.tp) * p.ep))
      usage("balanced routing sends an equal part of every TP rank's tokens to each EP rank: "
            "tokens per micro-batch (" + n(m.tokens()) + ") must be divisible by tp x ep (" +
            n(int64_t(p.tp) * p.ep) + ")");
  }
  if (p.zero < 0 || p.zero > 3) usage("--zero must be 0, 1, 2 or 3 (got " + n(p.zero) + ")");
  if (p.zero == 3 && p.pp > 1)
    usage("ZeRO-3 is synthesized without pipeline parallelism (use --zero 1 or 2 with --pp)");
  if (p.zero >= 1) {
    ParamCounts c = param_counts(m, p);
    if (p.dp > 1 && c.dense_per_layer % p.dp)
      usage("ZeRO shards each layer's " + n(c.dense_per_layer) +
            " parameters per rank over dp=" + n(p.dp) + ", which does not divide them");
    if (p.dp > 1 && c.router_per_layer % p.dp)
      usage("ZeRO shards each layer's " + n(c.router_per_layer) +
            " router parameters over dp=" + n(p.dp) + ", which does not divide them");
    int edp = p.dp / p.ep;
    if (m.moe() && edp > 1 && c.expert_per_layer % edp)
      usage("ZeRO shards each layer's " + n(c.expert_per_layer) +
            " expert parameters per rank over dp/ep=" + n(edp) + ", which does not divide them");
  }
}

namespace {

std::vector<Comm> communicators(const ModelShape& m, const ParallelLayout& p) {
  std::vector<Comm> comms;
  auto add = [&](std::string id, std::vector<int32_t> ranks) {
    if (ranks.size() > 1) comms.push_back(Comm{std::move(id), std::move(ranks)});
  };
  for (int s = 0; s < p.pp; ++s)
    for (int d = 0; d < p.dp; ++d) {
      std::vector<int32_t> r;
      for (int t = 0; t < p.tp; ++t) r.push_back(rank_of(p, t, d, s));
      add("tp.pp" + n(s) + ".dp" + n(d), r);
    }
  for (int s = 0; s < p.pp; ++s)
    for (int t = 0; t < p.tp; ++t) {
      std::vector<int32_t> r;
      for (int d = 0; d < p.dp; ++d) r.push_back(rank_of(p, t, d, s));
      add("dp.pp" + n(s) + ".tp" + n(t), r);
    }
  if (m.moe()) {
    for (int s = 0; s < p.pp; ++s)
      for (int t = 0; t < p.tp; ++t) {
        for (int g = 0; g < p.dp / p.ep; ++g) {
          std::vector<int32_t> r;
          for (int e = 0; e < p.ep; ++e) r.push_back(rank_of(p, t, g * p.ep + e, s));
          add("ep.pp" + n(s) + ".tp" + n(t) + ".g" + n(g), r);
        }
        for (int e = 0; e < p.ep; ++e) {
          std::vector<int32_t> r;
          for (int g = 0; g < p.dp / p.ep; ++g) r.push_back(rank_of(p, t, g * p.ep + e, s));
          add("edp.pp" + n(s) + ".tp" + n(t) + ".ep" + n(e), r);
        }
      }
  }
  // Pipeline channels: one communicator per direction between adjacent stages, so each
  // stream's P2P ops have their own issue order (Megatron's batched isend/irecv).
  for (int s = 0; s + 1 < p.pp; ++s)
    for (int t = 0; t < p.tp; ++t)
      for (int d = 0; d < p.dp; ++d) {
        std::vector<int32_t> r{rank_of(p, t, d, s), rank_of(p, t, d, s + 1)};
        add("pp.fwd" + n(s) + ".tp" + n(t) + ".dp" + n(d), r);
        add("pp.bwd" + n(s) + ".tp" + n(t) + ".dp" + n(d), r);
      }
  return comms;
}

std::string layout_name(const ParallelLayout& p) {
  std::string s = "tp" + n(p.tp);
  if (p.sp == SpMode::ReduceScatter) s += "+sp";
  if (p.sp == SpMode::AllReduce) s += "+sp(allreduce)";
  s += "-pp" + n(p.pp);
  if (p.pp_send_full) s += "(full)";
  if (p.pp_moe_cut) s += "(moe-cut)";
  s += "-ep" + n(p.ep) + "-dp" + n(p.dp);
  if (p.zero) s += "-zero" + n(p.zero);
  return s;
}

}  // namespace

namespace {

// The schedule's header: name, provenance and communicators, no ranks yet.
Schedule header(const ModelShape& m, const ParallelLayout& p, const analysis::CostModel& cost) {
  check_layout(m, p);
  Schedule s;
  s.name = "synth " + layout_name(p);
  std::ostringstream shape;
  shape << "model: " << m.layers << " layers, hidden " << m.hidden << ", ffn " << m.ffn_size()
        << ", " << m.heads << " heads, seq " << m.seq << ", micro-batch " << m.micro_batch << " x "
        << m.micro_batches << " micro-batches, " << normalize_dtype(m.dtype);
  if (m.moe()) shape << ", " << m.experts << " experts top-" << m.top_k;
  s.provenance.push_back("synthesized by braid synth (Megatron-style schedule, docs/synth.md)");
  s.provenance.push_back(shape.str());
  s.provenance.push_back("layout: " + layout_name(p) + ", world " + n(p.world()) +
                         ", rank = tp + tp*(dp + dp*stage), gradient bucket " +
                         n(p.bucket_elems) + " elements");
  s.provenance.push_back("compute durations: roofline of profile " + cost.profile().name +
                         " (GEMM 2mnk FLOPs; memory-bound kernels bytes / bandwidth)");
  s.provenance.push_back(
      "assumptions: no embedding / LM head, parameter-free norms, no biases, balanced MoE "
      "routing (tokens x top-k / experts per expert), full flash attention (no causal halving)");
  s.comms = communicators(m, p);
  return s;
}

}  // namespace

Schedule synthesize(const ModelShape& m, const ParallelLayout& p, const analysis::CostModel& cost) {
  Schedule s = header(m, p, cost);
  for (int32_t r = 0; r < p.world(); ++r) {
    synth_detail::RankBuilder b(s, m, p, cost, r);
    b.build();
  }
  return s;
}

Schedule synthesize_classes(const ModelShape& m, const ParallelLayout& p,
                            const analysis::CostModel& cost) {
  const int ep = std::max(p.ep, 1);
  // ZeRO gives each DP rank its own shard of the parameters, gradients and optimizer state (at
  // its own offsets): the replicas differ, and every rank is built.
  if (p.dp / ep < 2 || p.zero > 0) return synthesize(m, p, cost);
  Schedule s = header(m, p, cost);
  Symmetry sym{p.tp * p.dp, p.tp * ep, 0};
  s.add_rank(p.world() - 1);
  for (int32_t r = 0; r < p.world(); ++r)
    if (sym.stored(r)) {
      synth_detail::RankBuilder b(s, m, p, cost, r);
      b.build();
    }
  sym.id_stride = id_stride_for(s.next_op_id());
  s.symmetry = sym;
  // The check: replicas 1 and orbit - 1 of every representative built in a scratch schedule
  // (same header) and compared with the representative's images.
  Schedule probe = header(m, p, cost);
  probe.add_rank(p.world() - 1);
  SymmetryMap map(s, sym);
  for (int64_t i : {int64_t{1}, int64_t{sym.orbit() - 1}}) {
    const std::vector<int> comms = map.comms_after(i);
    for (int32_t r = 0; r < p.world(); ++r) {
      if (!sym.stored(r)) continue;
      const int32_t y = sym.image(r, i);
      synth_detail::RankBuilder b(probe, m, p, cost, y);
      b.build();
      RankSchedule want = map.image(s.ranks[r], i, comms);
      RankSchedule& got = probe.ranks[y];
      for (size_t st = 0; st < got.streams.size() && st < want.streams.size(); ++st)
        for (size_t k = 0; k < got.streams[st].ops.size() && k < want.streams[st].ops.size(); ++k)
          got.streams[st].ops[k].id = want.streams[st].ops[k].id;
      if (!(got == want))
        throw Error(ErrorCode::Internal, "synthesize_classes: rank " + n(y) + " of layout " +
                                             layout_name(p) + " is not the image of rank " + n(r) +
                                             " under the DP symmetry");
      got = RankSchedule{y, {}, {}, {}};
    }
  }
  return s;
}

// ---------------------------------------------------------------- presets

namespace {

// A 7B-class dense shape (GPT-style, 4h FFN) and a Mixtral-8x7B-like MoE shape.
ModelShape dense_shape() {
  ModelShape m;
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.seq = 4096;
  m.micro_batch = 1;
  m.micro_batches = 1;
  m.ffn = 16384;
  return m;
}

ModelShape moe_shape() {
  ModelShape m = dense_shape();
  m.ffn = 14336;
  m.experts = 8;
  m.top_k = 2;
  return m;
}

std::vector<Preset> make_presets() {
  std::vector<Preset> v;
  auto add = [&](std::string name, std::string desc, ModelShape m, ParallelLayout p) {
    v.push_back(Preset{std::move(name), std::move(desc), std::move(m), p});
  };
  {
    ParallelLayout p;
    p.tp = 4;
    p.sp = SpMode::AllReduce;
    add("tp-sp", "Chimera TP+SP: row-parallel All-Reduce whose consumer (the SP region) reads one "
                 "sequence shard",
        dense_shape(), p);
  }
  {
    ParallelLayout p;
    p.tp = 2;
    p.ep = 4;
    p.dp = 4;
    add("tp-ep", "Chimera TP+EP: attention All-Reduce feeding the MoE All-to-All dispatch",
        moe_shape(), p);
  }
  {
    ParallelLayout p;
    p.tp = 4;
    p.pp = 4;
    ModelShape m = dense_shape();
    m.micro_batches = 8;
    add("tp-pp", "Chimera TP+PP: the stage's last All-Reduce feeding the P2P send of a replicated "
                 "activation",
        m, p);
  }
  {
    ParallelLayout p;
    p.pp = 4;
    p.ep = 2;
    p.dp = 2;
    p.pp_moe_cut = true;
    ModelShape m = moe_shape();
    m.micro_batches = 8;
    add("pp-ep", "Chimera PP+EP: stages cut at the MoE dispatch with the gate on the sending "
                 "stage; the P2P of the routed tokens feeds the dispatch All-to-All (backward: "
                 "the All-to-All feeds the P2P)",
        m, p);
  }
  {
    ParallelLayout p;
    p.tp = 4;
    p.sp = SpMode::ReduceScatter;
    p.pp = 2;
    p.pp_send_full = true;
    ModelShape m = dense_shape();
    m.micro_batches = 4;
    add("pp-sp", "Chimera PP+SP: All-Gather of the stage output's sequence shards feeding the P2P "
                 "send",
        m, p);
  }
  {
    ParallelLayout p;
    p.tp = 2;
    p.sp = SpMode::ReduceScatter;
    p.ep = 4;
    p.dp = 4;
    add("sp-ep", "Chimera SP+EP: All-Gather of the sequence shards feeding the All-to-All "
                 "dispatch; combine All-to-All read by shard",
        moe_shape(), p);
  }
  {
    ParallelLayout p;
    p.tp = 4;
    p.sp = SpMode::ReduceScatter;
    p.pp = 2;
    p.dp = 2;
    p.zero = 1;
    ModelShape m = dense_shape();
    m.micro_batches = 4;
    add("dense", "Megatron dense: TP+SP, PP 1F1B, DP with ZeRO-1 (distributed optimizer)", m, p);
  }
  {
    ParallelLayout p;
    p.tp = 2;
    p.sp = SpMode::ReduceScatter;
    p.pp = 2;
    p.ep = 4;
    p.dp = 4;
    p.zero = 1;
    ModelShape m = moe_shape();
    m.micro_batches = 4;
    add("moe", "Megatron MoE: TP+SP, PP 1F1B, EP within DP, ZeRO-1", m, p);
  }
  return v;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> v = make_presets();
  return v;
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> names;
    for (const Preset& p : presets()) names.push_back(p.name);
    return names;
  }();
  return v;
}

Preset preset(std::string_view name) {
  for (const Preset& p : presets())
    if (p.name == name) return p;
  std::string list;
  for (const std::string& nm : preset_names()) list += (list.empty() ? "" : ", ") + nm;
  throw Error(ErrorCode::Usage, "unknown preset '" + std::string(name) + "' (expected " + list + ")");
}

}  // namespace braid::fusion

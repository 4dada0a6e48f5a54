// The schedule synthesizer: every preset at several degree settings validates and runs in the
// interpreter, each rank's collective volumes equal Megatron's closed forms (docs/synth.md),
// GEMM durations equal the roofline, 1F1B order per stage, the Chimera patterns are present in
// the data flow, fused forms are data-equivalent to the baselines, a JSON golden, and the CLI.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "analysis/cost_model.h"
#include "fusion/interpreter.h"
#include "fusion/schedule_store.h"
#include "fusion/synth.h"
#include "fusion/validate.h"
#include "trace/error.h"
#include "trace/test_util.h"

namespace braid::fusion {
namespace {

using ::testing::HasSubstr;

// A preset shrunk to a tiny model (the interpreter holds every element as an int64), with the
// layout's degrees overridden.
struct Setting {
  std::string preset;
  int tp = 0, pp = 0, ep = 0, dp = 0, zero = -1;
  int64_t micro_batches = 0;
  int64_t bucket = 0;
};

std::pair<ModelShape, ParallelLayout> tiny(const Setting& st) {
  Preset p = preset(st.preset);
  ParallelLayout l = p.layout;
  if (st.tp) l.tp = st.tp;
  if (st.pp) l.pp = st.pp;
  if (st.ep) l.ep = st.ep;
  if (st.dp) l.dp = st.dp;
  if (st.zero >= 0) l.zero = st.zero;
  if (st.bucket) l.bucket_elems = st.bucket;
  if (l.tp == 1) {  // no sequence to shard
    l.sp = SpMode::None;
    l.pp_send_full = false;
  }
  ModelShape m = p.model;
  m.layers = 2 * l.pp;
  m.hidden = 16;
  m.heads = 4;
  m.seq = 8;
  m.micro_batch = 1;
  m.ffn = 32;
  if (m.moe()) {
    m.experts = 4;
    m.top_k = 2;
  }
  m.micro_batches = st.micro_batches ? st.micro_batches : (l.pp > 1 ? 2 * l.pp : 2);
  return {m, l};
}

std::string describe(const Setting& s) {
  std::ostringstream o;
  o << s.preset << " tp" << s.tp << " pp" << s.pp << " ep" << s.ep << " dp" << s.dp << " zero"
    << s.zero << " m" << s.micro_batches;
  return o.str();
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> v = {
      {"tp-sp", 2}, {"tp-sp", 4}, {"tp-sp", 2, 1, 1, 2, 1},
      {"tp-ep", 2, 1, 2, 2}, {"tp-ep", 2, 1, 4, 4}, {"tp-ep", 4, 1, 2, 4, 2},
      {"tp-pp", 2, 2, 1, 1, -1, 4}, {"tp-pp", 2, 4, 1, 1, -1, 8}, {"tp-pp", 4, 2, 1, 1, -1, 2},
      {"pp-ep", 1, 2, 2, 2}, {"pp-ep", 1, 4, 2, 2, -1, 3}, {"pp-ep", 1, 2, 4, 4, 0, 2},
      {"pp-sp", 2, 2}, {"pp-sp", 4, 2}, {"pp-sp", 2, 4, 1, 1, -1, 4},
      {"sp-ep", 2, 1, 2, 2}, {"sp-ep", 4, 1, 2, 2}, {"sp-ep", 2, 1, 2, 4, 3},
      {"dense", 2, 2, 1, 2, 1}, {"dense", 2, 1, 1, 4, 3}, {"dense", 1, 2, 1, 2, 0, 0, 3000},
      {"moe", 2, 2, 4, 4, 1}, {"moe", 1, 1, 2, 4, 2}, {"moe", 2, 2, 2, 2, 0},
  };
  return v;
}

// ---------------------------------------------------------------- closed forms

// Sum of `count` per (communicator kind, op) on one rank; the kind is the communicator id's
// first component (tp, dp, ep, edp, pp).
std::map<std::string, int64_t> collective_counts(const Schedule& s, int32_t rank) {
  std::map<std::string, int64_t> out;
  for (const Stream& st : s.ranks[rank].streams)
    for (const Op& op : st.ops)
      if (const Collective* c = op.collective())
        out[c->comm.substr(0, c->comm.find('.')) + " " + std::string(to_string(c->op))] +=
            c->count;
  return out;
}

// Megatron's per-rank volumes (docs/synth.md, "Closed forms"), written independently of the
// builder.
std::map<std::string, int64_t> expected_counts(const ModelShape& m, const ParallelLayout& p,
                                               int32_t rank) {
  std::map<std::string, int64_t> e;
  RankCoord c = coord_of(p, rank);
  const int64_t t = p.tp, Ls = m.layers / p.pp, mb = m.micro_batches;
  const int64_t M = m.tokens() * m.hidden, Ms = M / t, X = p.sp_on() ? Ms : M;
  const int64_t r = p.sp_recompute_allgather ? 1 : 0;
  const int64_t per = Ls * mb;  // layer passes of this rank
  if (t > 1) {
    if (p.sp == SpMode::None) {
      e["tp allreduce"] = (m.moe() ? 2 : 4) * M * per;
    } else if (p.sp == SpMode::ReduceScatter) {
      e["tp allgather"] = (m.moe() ? 4 + r : 4 + 2 * r) * Ms * per;
      e["tp reducescatter"] = (m.moe() ? 3 : 4) * Ms * per;
    } else {
      e["tp allreduce"] = (m.moe() ? 1 : 2) * M * per;
      e["tp allgather"] = (m.moe() ? 4 + r : 4 + 2 * r) * Ms * per;
      e["tp reducescatter"] = 2 * Ms * per;
    }
    if (p.pp_send_full && c.pp + 1 < p.pp) e["tp allgather"] += Ms * mb;
  }
  // With pp_moe_cut a stage runs the MoE block (and holds the experts) of the layer before its
  // first and not of its last.
  const int64_t moe_layers = Ls + (p.pp_moe_cut && c.pp > 0) - (p.pp_moe_cut && c.pp + 1 < p.pp);
  if (m.moe() && p.ep > 1)
    e["ep alltoall"] = 4 * (m.tokens() * m.top_k * m.hidden / p.ep) * moe_layers * mb;
  if (p.pp > 1) {
    int64_t act = p.pp_send_full ? M : X, grad = X;
    if (p.pp_moe_cut) {  // the residual, the probabilities and the routed tokens (and grads)
      act = X + m.tokens() * m.experts + m.tokens() * m.top_k * m.hidden;
      grad = act;
    }
    if (c.pp + 1 < p.pp) {
      e["pp send"] += act * mb;
      e["pp recv"] += grad * mb;
    }
    if (c.pp > 0) {
      e["pp recv"] += act * mb;
      e["pp send"] += grad * mb;
    }
  }
  ParamCounts pc = param_counts(m, p);
  auto group = [&](const std::string& kind, int64_t params, int64_t n) {
    if (n < 2 || params == 0) return;
    switch (p.zero) {
      case 0: e[kind + " allreduce"] = params; break;
      case 1:
      case 2:
        e[kind + " reducescatter"] = params / n;
        e[kind + " allgather"] = params / n;
        break;
      case 3:
        e[kind + " allgather"] = 2 * mb * params / n;
        e[kind + " reducescatter"] = params / n;
        break;
    }
  };
  group("dp", pc.dense() + pc.router(), p.dp);  // the router is its own group, also over DP
  group("edp", pc.expert_per_layer * moe_layers, p.dp / p.ep);
  return e;
}

class SynthSetting : public ::testing::TestWithParam<Setting> {};

TEST_P(SynthSetting, ValidatesInterpretsAndMatchesClosedForms) {
  auto [m, p] = tiny(GetParam());
  Schedule s = synthesize(m, p);
  ASSERT_EQ(static_cast<int>(s.ranks.size()), p.world());
  auto problems = validate(s);
  ASSERT_TRUE(problems.empty()) << problems.front();
  Interpretation run = interpret(s);
  ASSERT_FALSE(run.deadlocked) << run.deadlock_message();
  EXPECT_EQ(static_cast<size_t>(run.executed), s.op_count());
  for (const RankSchedule& r : s.ranks) {
    ASSERT_FALSE(r.outputs.empty()) << "rank " << r.rank;
    for (const std::string& o : r.outputs) EXPECT_NE(r.find_buffer(o), nullptr) << o;
    EXPECT_EQ(collective_counts(s, r.rank), expected_counts(m, p, r.rank)) << "rank " << r.rank;
    EXPECT_EQ(r.streams.front().name, "compute");
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, SynthSetting, ::testing::ValuesIn(settings()),
                         [](const ::testing::TestParamInfo<Setting>& i) {
                           std::string n = describe(i.param);
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(Synth, EveryPresetAtItsRealShapeHasTheClosedFormVolumes) {
  for (const std::string& name : preset_names()) {
    Preset p = preset(name);
    Schedule s = synthesize(p.model, p.layout);
    ASSERT_EQ(static_cast<int>(s.ranks.size()), p.layout.world()) << name;
    for (const RankSchedule& r : s.ranks)
      EXPECT_EQ(collective_counts(s, r.rank), expected_counts(p.model, p.layout, r.rank))
          << name << " rank " << r.rank;
  }
}

TEST(Synth, RealPresetsValidate) {
  // The big presets are validated at their real sizes too (counts in the hundreds of millions of
  // elements); the interpreter runs only tiny shapes.
  for (const char* name : {"tp-sp", "tp-ep", "sp-ep"}) {
    Preset p = preset(name);
    auto problems = validate(synthesize(p.model, p.layout));
    EXPECT_TRUE(problems.empty()) << name << ": " << problems.front();
  }
}

TEST(Synth, DpBucketsSumToTheStageParametersPerTpRank) {
  // Dense 2-stage TP2 DP2, bucket of one layer: one All-Reduce per layer, in backward order,
  // together the parameter count / tp / pp.
  auto [m, p] = tiny({"dense", 2, 2, 1, 2, 0, 2, 1});
  Schedule s = synthesize(m, p);
  const int64_t h = m.hidden, d = m.ffn_size();
  const int64_t full_model = m.layers * (4 * h * h + 2 * h * d);
  for (const RankSchedule& r : s.ranks) {
    std::vector<int64_t> counts;
    for (const Stream& st : r.streams)
      for (const Op& op : st.ops)
        if (const Collective* c = op.collective(); c && c->op == CollOp::AllReduce)
          counts.push_back(c->count);
    ASSERT_EQ(counts.size(), 2u);  // two layers per stage
    int64_t sum = 0;
    for (int64_t c : counts) sum += c;
    EXPECT_EQ(sum, full_model / p.tp / p.pp);
  }
}

// Position of the first record of `event` on the compute stream, and of the last compute op.
std::pair<int, int> record_and_last_compute(const Schedule& s, int32_t rank, const std::string& ev) {
  const auto& ops = s.ranks[rank].streams[0].ops;
  int rec = -1, last = -1;
  for (int i = 0; i < int(ops.size()); ++i) {
    if (ops[i].record() && ops[i].record()->event == ev && rec < 0) rec = i;
    if (ops[i].compute() && ops[i].compute()->label.rfind("L", 0) == 0) last = i;
  }
  return {rec, last};
}

TEST(Synth, DpReductionOverlapsBackwardExceptZeroOne) {
  for (int zero : {0, 1, 2}) {
    auto [m, p] = tiny({"dense", 2, 1, 1, 2, zero, 2, 1});
    Schedule s = synthesize(m, p);
    int dp_stream = -1;
    for (size_t i = 0; i < s.ranks[0].streams.size(); ++i)
      if (s.ranks[0].streams[i].name == "dp") dp_stream = int(i);
    ASSERT_GE(dp_stream, 0);
    int reductions = 0;
    for (const Op& op : s.ranks[0].streams[dp_stream].ops)
      if (const Collective* c = op.collective();
          c && (c->op == CollOp::AllReduce || c->op == CollOp::ReduceScatter))
        ++reductions;
    EXPECT_EQ(reductions, m.layers) << "zero " << zero;  // bucket of one layer each
    // The last layer's bucket is handed over while the first layer's backward still runs
    // (ZeRO 0 and 2); ZeRO-1 reduces after the whole backward.
    auto [rec, last] = record_and_last_compute(
        s, 0, zero == 1 ? "backward.done" : "dense.bucket0.ready");
    ASSERT_GE(rec, 0);
    if (zero == 1)
      EXPECT_GT(rec, last);  // after the last layer kernel
    else
      EXPECT_LT(rec, last - 10);
  }
}

TEST(Synth, GemmDurationsAreTheRoofline) {
  // tp-sp at its real shape: fc1 is [T x h] x [h x d/t] with T = b*s tokens.
  Preset p = preset("tp-sp");
  analysis::CostModel cost(analysis::load_profile("h100-nvlink"));
  Schedule s = synthesize(p.model, p.layout, cost);
  const double T = double(p.model.tokens()), h = double(p.model.hidden),
               n = double(p.model.ffn_size()) / p.layout.tp;
  const double flops = 2 * T * n * h;
  const double bytes = (T * h + h * n + T * n) * 2;
  const analysis::GpuSpec& gpu = cost.profile().gpu;
  const Ns expected = static_cast<Ns>(std::llround(
      std::max(flops / (gpu.tflops_16bit * 1e3), bytes / gpu.mem_bandwidth_gbps) +
      gpu.kernel_overhead_ns));
  // 2 * 4096 * 4096 * 4096 FLOPs at 700 TFLOP/s: about 196 us.
  EXPECT_NEAR(double(expected), 196e3, 5e3);
  int seen = 0;
  for (const Op& op : s.ranks[1].streams[0].ops)
    if (const Compute* c = op.compute(); c && c->label == "L3.mlp.fc1") {
      EXPECT_EQ(c->duration_ns, expected);
      ++seen;
    }
  EXPECT_EQ(seen, 1);
  // A slower profile gives proportionally longer GEMMs.
  Schedule slow = synthesize(p.model, p.layout, analysis::CostModel(analysis::load_profile("a100-nvlink")));
  for (const Op& op : slow.ranks[1].streams[0].ops)
    if (const Compute* c = op.compute(); c && c->label == "L3.mlp.fc1") {
      EXPECT_GT(c->duration_ns, 2 * expected);
    }
}

// The forward (F) and backward (B) micro-batches on a rank's compute stream, in order: a
// forward starts with the layer's first norm, a backward ends with the first layer's input grad.
std::vector<std::pair<char, int>> microbatch_order(const Schedule& s, int32_t rank, int first_layer) {
  std::vector<std::pair<char, int>> order;
  std::regex mb_re("\\.mb([0-9]+)$");
  std::string ln = "L" + std::to_string(first_layer) + ".attn.ln";
  std::string lnb = "L" + std::to_string(first_layer) + ".attn.ln.bwd";
  for (const Op& op : s.ranks[rank].streams[0].ops) {
    const Compute* c = op.compute();
    if (!c || (c->label != ln && c->label != lnb)) continue;
    std::smatch mt;
    const std::string& buf = c->writes.at(0).buffer;
    if (!std::regex_search(buf, mt, mb_re)) continue;
    order.push_back({c->label == ln ? 'F' : 'B', std::stoi(mt[1])});
  }
  return order;
}

TEST(Synth, OneFOneBOrderPerStage) {
  for (auto [pp, mbs] : std::vector<std::pair<int, int>>{{4, 8}, {4, 3}, {2, 5}}) {
    auto [m, p] = tiny({"tp-pp", 1, pp, 1, 1, -1, mbs});
    Schedule s = synthesize(m, p);
    ASSERT_TRUE(validate(s).empty());
    for (int stage = 0; stage < pp; ++stage) {
      auto order = microbatch_order(s, rank_of(p, 0, 0, stage), stage * 2);
      ASSERT_EQ(order.size(), size_t(2 * mbs));
      const int warmup = std::min(pp - stage - 1, mbs);
      std::vector<std::pair<char, int>> expect;
      for (int i = 0; i < warmup; ++i) expect.push_back({'F', i});
      for (int i = 0; i < mbs - warmup; ++i) {
        expect.push_back({'F', warmup + i});
        expect.push_back({'B', i});
      }
      for (int i = mbs - warmup; i < mbs; ++i) expect.push_back({'B', i});
      EXPECT_EQ(order, expect) << "pp " << pp << " m " << mbs << " stage " << stage;
      // Warm-up, steady and cool-down counts.
      int lead = 0;
      while (lead < int(order.size()) && order[lead].first == 'F') ++lead;
      int tail = 0;
      while (tail < int(order.size()) && order[order.size() - 1 - tail].first == 'B') ++tail;
      EXPECT_EQ(lead, std::min(warmup + 1, mbs));
      EXPECT_EQ(tail, mbs == warmup ? mbs : warmup + 1);
      // At most pp - stage micro-batches in flight.
      int in_flight = 0, most = 0;
      for (auto [k, i] : order) most = std::max(most, in_flight += (k == 'F' ? 1 : -1));
      EXPECT_LE(most, pp - stage);
    }
  }
}

// ---------------------------------------------------------------- Chimera patterns

const Op& only_op(const Schedule& s, const std::vector<OpRef>& refs) {
  EXPECT_EQ(refs.size(), 1u);
  return s.op(refs.at(0));
}

TEST(SynthPatterns, TpSpAllReduceConsumerReadsOneShard) {
  auto [m, p] = tiny({"tp-sp", 4});
  Schedule s = synthesize(m, p);
  const int64_t M = m.tokens() * m.hidden, Ms = M / 4;
  for (int32_t r = 0; r < 4; ++r) {
    const Op& ar = only_op(s, producers_of(s, r, {"L1.attn_out.mb0", 0, M}));
    ASSERT_TRUE(ar.collective());
    EXPECT_EQ(ar.collective()->op, CollOp::AllReduce);
    EXPECT_EQ(ar.collective()->label, "L1.attn.allreduce");
    EXPECT_EQ(ar.collective()->count, M);
    const Op& res = only_op(s, consumers_of(s, r, {"L1.attn_out.mb0", 0, M}));
    ASSERT_TRUE(res.compute());
    EXPECT_EQ(res.compute()->label, "L1.attn.residual");
    EXPECT_EQ(res.compute()->reads.at(1), (Slice{"L1.attn_out.mb0", r * Ms, Ms}));
  }
}

TEST(SynthPatterns, TpEpAllReduceFeedsTheDispatch) {
  auto [m, p] = tiny({"tp-ep", 2, 1, 2, 2});
  Schedule s = synthesize(m, p);
  const int64_t M = m.tokens() * m.hidden;
  // attn.allreduce -> attn.residual -> moe.ln -> moe.permute -> moe.dispatch (All-to-All).
  const Op& res = only_op(s, consumers_of(s, 0, {"L0.attn_out.mb0", 0, M}));
  EXPECT_EQ(res.compute()->label, "L0.attn.residual");
  auto disp = consumers_of(s, 0, {"L0.dispatch_in.mb0", 0, 1});
  ASSERT_EQ(disp.size(), 1u);
  EXPECT_EQ(s.op(disp[0]).collective()->op, CollOp::AllToAll);
  EXPECT_EQ(s.op(disp[0]).collective()->label, "L0.moe.dispatch");
  EXPECT_EQ(s.op(disp[0]).collective()->count, m.tokens() * m.top_k * m.hidden / 2);
  const Op& perm = only_op(s, producers_of(s, 0, {"L0.dispatch_in.mb0", 0, 1}));
  EXPECT_EQ(perm.compute()->label, "L0.moe.permute");
  EXPECT_EQ(perm.compute()->reads.at(0).buffer, "L0.ln2.mb0");
}

TEST(SynthPatterns, TpPpAllReduceFeedsTheSend) {
  auto [m, p] = tiny({"tp-pp", 2, 2, 1, 1, -1, 2});
  Schedule s = synthesize(m, p);
  const int64_t M = m.tokens() * m.hidden;
  // Stage 0 (layers 0-1): L1.mlp.allreduce -> L1.mlp.residual -> send of L2.x.
  auto users = consumers_of(s, 0, {"L2.x.mb0", 0, M});
  bool sends = false;
  for (OpRef u : users)
    if (const Collective* c = s.op(u).collective(); c && c->op == CollOp::Send) {
      sends = true;
      EXPECT_EQ(c->count, M);
      EXPECT_EQ(c->peer, rank_of(p, 0, 0, 1));
    }
  EXPECT_TRUE(sends);
  const Op& res = only_op(s, producers_of(s, 0, {"L2.x.mb0", 0, M}));
  EXPECT_EQ(res.compute()->label, "L1.mlp.residual");
  EXPECT_EQ(res.compute()->reads.at(1).buffer, "L1.mlp_out.mb0");
}

TEST(SynthPatterns, PpEpReceiveFeedsTheAllToAll) {
  // Stages cut at the MoE dispatch (pp_moe_cut): stage 0 runs L1's attention and gate and sends
  // the routed tokens, which stage 1 (ranks 2, 3) dispatches straight from the receive buffer.
  auto [m, p] = tiny({"pp-ep", 1, 2, 2, 2});
  ASSERT_TRUE(p.pp_moe_cut);
  Schedule s = synthesize(m, p);
  const int64_t R = m.tokens() * m.top_k * m.hidden;
  const Op& send = only_op(s, consumers_of(s, 0, {"L1.dispatch_in.mb0", 0, R}));
  EXPECT_EQ(send.collective()->op, CollOp::Send);
  EXPECT_EQ(send.collective()->peer, 2);
  const Op& recv = only_op(s, producers_of(s, 2, {"L1.dispatch_in.mb0", 0, R}));
  EXPECT_EQ(recv.collective()->op, CollOp::Recv);
  const Op& a2a = only_op(s, consumers_of(s, 2, {"L1.dispatch_in.mb0", 0, R}));
  EXPECT_EQ(a2a.collective()->op, CollOp::AllToAll);
  EXPECT_EQ(a2a.collective()->label, "L1.moe.dispatch");
  // The cut layer's experts live on stage 1: its expert gradients are reduced there.
  EXPECT_TRUE(producers_of(s, 0, {"L1.expert_act.mb0", 0, 1}).empty());
  EXPECT_FALSE(producers_of(s, 2, {"L1.expert_act.mb0", 0, 1}).empty());
  // Backward: the dispatch's backward All-to-All feeds the send back to stage 0.
  const Op& bsend = only_op(s, consumers_of(s, 2, {"L1.d_dispatch_in.mb0", 0, R}));
  EXPECT_EQ(bsend.collective()->op, CollOp::Send);
  const Op& ba2a = only_op(s, producers_of(s, 2, {"L1.d_dispatch_in.mb0", 0, R}));
  EXPECT_EQ(ba2a.collective()->label, "L1.moe.dispatch.bwd");
  // Without the cut, stage boundaries are layer boundaries: stage 0 receives L2.dx and the
  // un-permute's backward sits between the receive and the combine's backward All-to-All.
  ParallelLayout plain = p;
  plain.pp_moe_cut = false;
  Schedule u = synthesize(m, plain);
  const int64_t M = m.tokens() * m.hidden;
  EXPECT_EQ(only_op(u, producers_of(u, 0, {"L2.dx.mb0", 0, M})).collective()->op, CollOp::Recv);
  bool unpermute = false;
  for (OpRef c : consumers_of(u, 0, {"L2.dx.mb0", 0, M}))
    if (const Compute* k = u.op(c).compute(); k && k->label == "L1.moe.unpermute.bwd") unpermute = true;
  EXPECT_TRUE(unpermute);
}

TEST(SynthPatterns, PpSpAllGatherFeedsTheSendAndReceiversReadShards) {
  auto [m, p] = tiny({"pp-sp", 2, 2});
  Schedule s = synthesize(m, p);
  const int64_t M = m.tokens() * m.hidden, Ms = M / 2;
  const Op& ag = only_op(s, producers_of(s, 1, {"L1.output_full.mb0", 0, M}));
  EXPECT_EQ(ag.collective()->op, CollOp::AllGather);
  EXPECT_EQ(ag.collective()->label, "L1.output.allgather");
  const Op& send = only_op(s, consumers_of(s, 1, {"L1.output_full.mb0", 0, M}));
  EXPECT_EQ(send.collective()->op, CollOp::Send);
  EXPECT_EQ(send.collective()->count, M);
  // Stage 1, TP rank 1 (global rank 3) reads only its shard of the received activation.
  for (OpRef u : consumers_of(s, 3, {"L2.x_full.mb0", 0, M}))
    if (const Compute* c = s.op(u).compute())
      for (const Slice& rd : c->reads)
        if (rd.buffer == "L2.x_full.mb0") {
          EXPECT_EQ(rd, (Slice{"L2.x_full.mb0", Ms, Ms}));
        }
}

TEST(SynthPatterns, SpEpAllGatherFeedsTheDispatchAndCombineIsReadByShard) {
  auto [m, p] = tiny({"sp-ep", 2, 1, 2, 2});
  Schedule s = synthesize(m, p);
  const int64_t M = m.tokens() * m.hidden, Ms = M / 2;
  const Op& ag = only_op(s, producers_of(s, 1, {"L0.ln2_full.mb0", 0, M}));
  EXPECT_EQ(ag.collective()->label, "L0.moe.allgather");
  const Op& perm = only_op(s, producers_of(s, 1, {"L0.dispatch_in.mb0", 0, 1}));
  EXPECT_EQ(perm.compute()->reads.at(0).buffer, "L0.ln2_full.mb0");
  const Op& res = only_op(s, consumers_of(s, 1, {"L0.moe_out.mb0", 0, M}));
  EXPECT_EQ(res.compute()->label, "L0.moe.residual");
  EXPECT_EQ(res.compute()->reads.at(1), (Slice{"L0.moe_out.mb0", Ms, Ms}));
}

// The rewrites the patterns invite are exact: the Megatron forms compute the same outputs.
RankBuffers outputs_of(const Schedule& s, const Interpretation& run, int32_t r) {
  RankBuffers o;
  for (const std::string& b : s.ranks[r].outputs) o[b] = run.buffers[r].at(b);
  return o;
}

void expect_same_outputs(const Schedule& a, const Schedule& b) {
  ASSERT_TRUE(validate(a).empty());
  ASSERT_TRUE(validate(b).empty());
  Interpretation ra = interpret(a), rb = interpret(b);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].outputs, b.ranks[r].outputs);
    EXPECT_EQ(outputs_of(a, ra, int32_t(r)), outputs_of(b, rb, int32_t(r))) << "rank " << r;
  }
}

TEST(SynthPatterns, MegatronSpIsDataEquivalentToTheAllReduceBaseline) {
  auto [m, p] = tiny({"tp-sp", 4, 1, 1, 2, 1});
  ParallelLayout rs = p;
  rs.sp = SpMode::ReduceScatter;
  expect_same_outputs(synthesize(m, p), synthesize(m, rs));
  // Keeping the forward's gathered inputs instead of re-gathering them changes nothing either.
  ParallelLayout keep = rs;
  keep.sp_recompute_allgather = false;
  expect_same_outputs(synthesize(m, rs), synthesize(m, keep));
}

TEST(SynthPatterns, SendingShardsIsDataEquivalentToSendingTheGatheredOutput) {
  auto [m, p] = tiny({"pp-sp", 2, 2});
  ParallelLayout shards = p;
  shards.pp_send_full = false;
  expect_same_outputs(synthesize(m, p), synthesize(m, shards));
}

// ---------------------------------------------------------------- errors, golden, CLI

TEST(Synth, ImpossibleLayoutsAreUsageErrors) {
  auto expect_usage = [](ModelShape m, ParallelLayout p, const std::string& needle) {
    try {
      synthesize(m, p);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Usage);
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  ModelShape m;
  ParallelLayout p;
  p.tp = 3;
  expect_usage(m, p, "not divisible by tp=3");
  p = {};
  p.pp = 3;
  expect_usage(m, p, "layers are not divisible by pp=3");
  ModelShape moe = m;
  moe.experts = 6;
  moe.top_k = 2;
  p = {};
  p.ep = 4;
  p.dp = 4;
  expect_usage(moe, p, "experts are not divisible by ep=4");
  moe.experts = 8;
  p.dp = 2;
  expect_usage(moe, p, "does not divide dp=2");
  p = {};
  p.sp = SpMode::ReduceScatter;
  expect_usage(m, p, "needs tp > 1");
  p = {};
  p.ep = 2;
  p.dp = 2;
  expect_usage(m, p, "needs an MoE model");
  p = {};
  p.zero = 3;
  p.pp = 2;
  p.dp = 2;
  expect_usage(m, p, "ZeRO-3");
  p = {};
  p.zero = 4;
  expect_usage(m, p, "--zero must be");
  try {
    preset("tp-xx");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Usage);
    EXPECT_THAT(e.what(), HasSubstr("tp-sp, tp-ep, tp-pp, pp-ep, pp-sp, sp-ep, dense, moe"));
  }
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Synth, TinyTpSpGolden) {
  Preset p = preset("tp-sp");
  ModelShape m = p.model;
  m.layers = 1;
  m.hidden = 8;
  m.heads = 2;
  m.seq = 4;
  m.ffn = 16;
  ParallelLayout l = p.layout;
  l.tp = 2;
  Schedule s = synthesize(m, l);
  std::string golden = std::string(BRAID_TEST_DATA_DIR) + "/fusion/synth_tp_sp_tiny.json";
  if (std::getenv("BRAID_UPDATE_GOLDEN")) save_schedule(s, golden);
  EXPECT_EQ(to_json(s), slurp(golden)) << "regenerate with BRAID_UPDATE_GOLDEN=1";
  EXPECT_EQ(parse_schedule(slurp(golden)), s);
}

struct CliResult {
  int code;
  std::string out, err;
};

CliResult braid_cli(const test::TempDir& tmp, const std::string& args) {
  std::string cmd = std::string(BRAID_CLI) + " " + args + " >" + tmp.file("stdout") + " 2>" +
                    tmp.file("stderr") + " </dev/null";
  int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, slurp(tmp.file("stdout")), slurp(tmp.file("stderr"))};
}

TEST(SynthCli, ListPresets) {
  test::TempDir tmp;
  CliResult r = braid_cli(tmp, "synth --list-presets");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string& n : preset_names()) EXPECT_THAT(r.out, HasSubstr(n + " "));
}

TEST(SynthCli, StoresCreatesAndAppends) {
  test::TempDir tmp;
  std::string file = tmp.file("step.braid");
  CliResult r = braid_cli(tmp, "synth --preset tp-sp --tp 8 --layers 4 -o " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("schedule 1 in " + file));
  EXPECT_THAT(r.out, HasSubstr("8 ranks"));
  EXPECT_THAT(r.out, HasSubstr("allreduce 64 ("));  // 2 per layer x 4 layers x 8 ranks
  r = braid_cli(tmp, "synth --preset dense --tp 2 --pp 2 --dp 1 --zero 0 --layers 4 --hidden 64 "
                     "--heads 4 --seq 16 --ffn 128 --micro-batches 2 --json " +
                         tmp.file("d.json") + " -o " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("schedule 2 in " + file));
  auto list = list_schedules(file);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].parent_id, -1);
  Schedule stored = load_stored_schedule(file, list[1].id);
  EXPECT_EQ(stored, load_schedule(tmp.file("d.json")));
  EXPECT_EQ(stored.ranks.size(), 4u);
  EXPECT_TRUE(validate(stored).empty());
  // The API with the same values gives the same schedule (the preset name prefixes the name).
  ModelShape m = preset("dense").model;
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.seq = 16;
  m.ffn = 128;
  m.micro_batches = 2;
  ParallelLayout l = preset("dense").layout;
  l.tp = 2;
  l.pp = 2;
  l.dp = 1;
  l.zero = 0;
  Schedule api = synthesize(m, l);
  api.name = "dense: " + api.name;
  EXPECT_EQ(stored, api);
}

TEST(SynthCli, UsageErrorsExitTwo) {
  test::TempDir tmp;
  for (const char* args : {"synth --preset tp-sp --tp 3", "synth --preset nope",
                           "synth --preset pp-ep --pp 5", "synth --tp 2 --pp 2 --world 8",
                           "synth --preset moe --ep 3", "synth --tp 2 --sp --sp-allreduce"}) {
    CliResult r = braid_cli(tmp, args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("braid: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("x.braid")));
  CliResult r = braid_cli(tmp, "synth --preset tp-sp --tp 3 -o " + tmp.file("x.braid"));
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("x.braid")));
}

TEST(SynthCli, JsonToStdoutParses) {
  test::TempDir tmp;
  CliResult r = braid_cli(tmp, "synth --tp 2 --sp --layers 2 --json -");
  ASSERT_EQ(r.code, 0) << r.err;
  Schedule s = parse_schedule(r.out);
  EXPECT_EQ(s.ranks.size(), 2u);
  EXPECT_TRUE(validate(s).empty());
}

}  // namespace
}  // namespace braid::fusion

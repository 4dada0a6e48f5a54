// Golden and negative tests of the fusion passes on hand-built schedules and the synthesizer's
// Chimera presets: the expected rewrite fires (or is advice), its predicted saving equals the
// closed form, and the fused schedule validates and computes the same outputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "fusion/dataflow.h"
#include "fusion/interpreter.h"
#include "fusion/pass.h"
#include "fusion/pipeline.h"
#include "fusion/synth.h"
#include "fusion/validate.h"
#include "fusion/pass_schedules.h"
#include "trace/error.h"

namespace braid::fusion {
namespace {

using testing::slow_links;
using ::testing::HasSubstr;

std::vector<Finding> find(const std::string& pass, const Schedule& s,
                          const analysis::CostModel& cm = analysis::CostModel()) {
  const Pass* p = find_pass(pass);
  EXPECT_NE(p, nullptr) << pass;
  return p ? p->find(s, cm) : std::vector<Finding>{};
}

// Output buffers of every rank equal in both schedules.
void expect_same_outputs(const Schedule& a, const Schedule& b) {
  ASSERT_EQ(validate(b), std::vector<std::string>{});
  Interpretation ia = interpret(a), ib = interpret(b);
  ASSERT_FALSE(ia.deadlocked) << ia.deadlock_message();
  ASSERT_FALSE(ib.deadlocked) << ib.deadlock_message();
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    std::vector<std::string> outs = a.ranks[r].outputs;
    if (outs.empty())
      for (const Buffer& buf : a.ranks[r].buffers) outs.push_back(buf.name);
    for (const std::string& o : outs)
      EXPECT_EQ(ia.buffers[r].at(o), ib.buffers[r].at(o)) << "rank " << r << " buffer " << o;
  }
}

int count_ops(const Schedule& s, CollOp op) {
  int n = 0;
  for (const auto& r : s.ranks)
    for (const auto& st : r.streams)
      for (const auto& o : st.ops)
        if (o.collective() && o.collective()->op == op) ++n;
  return n;
}

Schedule apply_one(const std::string& pass, const Schedule& s, const Finding& f) {
  Schedule x = s;
  find_pass(pass)->apply(x, f);
  return x;
}

// ---------------------------------------------------------------------------------------------
// tp-sp

TEST(TpSp, AllReduceReadShardwiseBecomesReduceScatterWithClosedFormSaving) {
  for (int t : {2, 4}) {
    const int64_t M = 16;
    Schedule s = testing::tp_sp(t, M);
    auto fs = find("tp-sp", s);
    ASSERT_EQ(fs.size(), 1u);
    const Finding& f = fs[0];
    EXPECT_TRUE(f.legal);
    EXPECT_FALSE(f.enabling);
    // (t-1) M / t elements of 4 bytes per rank per All-Reduce.
    EXPECT_EQ(f.saving_bytes, (t - 1) * M * 4 / t);
    analysis::CostModel cm;
    std::vector<int32_t> members;
    for (int r = 0; r < t; ++r) members.push_back(r);
    EXPECT_EQ(f.saving_ns, cm.collective_ns(CollOp::AllReduce, M * 4, t, "tp", members) -
                               cm.collective_ns(CollOp::ReduceScatter, M * 4, t, "tp", members));
    EXPECT_EQ(f.ranks.size(), static_cast<size_t>(t));
    Schedule x = apply_one("tp-sp", s, f);
    EXPECT_EQ(count_ops(x, CollOp::AllReduce), 0);
    EXPECT_EQ(count_ops(x, CollOp::ReduceScatter), t);
    EXPECT_EQ(count_ops(x, CollOp::AllGather), 0);
    // The reduce-scatter names the all-reduce it replaces.
    for (const auto& r : x.ranks)
      for (const auto& o : r.streams[0].ops)
        if (o.collective()) {
          EXPECT_EQ(o.replaces.size(), 1u);
        }
    expect_same_outputs(s, x);
  }
}

TEST(TpSp, FullReaderMovesTheAllGatherAndThePipelineDoesNotApplyItAlone) {
  Schedule s = testing::tp_sp(4, 16, /*full_reader=*/true);
  auto fs = find("tp-sp", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_TRUE(fs[0].legal);
  EXPECT_TRUE(fs[0].enabling);
  EXPECT_EQ(fs[0].saving_bytes, 0);
  // Applied by hand it is still exact: the all-gather lands before the full reader.
  Schedule x = apply_one("tp-sp", s, fs[0]);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), 4);
  expect_same_outputs(s, x);
  auto res = run_pipeline(s, analysis::CostModel(), {{"tp-sp"}});
  EXPECT_TRUE(res.applied.empty());
  EXPECT_EQ(res.schedule, s);
}

TEST(TpSp, OutputBufferNeedsTheFullTensor) {
  // `out` is an output: the full tensor is live at the end, so no shard-only rewrite.
  Schedule s = testing::tp_sp(2, 8, false, false, /*out_is_output=*/true);
  auto fs = find("tp-sp", s);
  for (const Finding& f : fs) EXPECT_EQ(f.saving_bytes, 0);
  auto res = run_pipeline(s, analysis::CostModel());
  EXPECT_EQ(count_ops(res.schedule, CollOp::AllReduce), 2);
}

TEST(TpSp, OpaqueConsumerIsAdviceWithTheAssumption) {
  Schedule s = testing::tp_sp(4, 16, false, /*opaque=*/true);
  auto fs = find("tp-sp", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_FALSE(fs[0].legal);
  EXPECT_EQ(fs[0].saving_bytes, 3 * 16 * 4 / 4);
  EXPECT_NE(fs[0].assumption.find("read only the rank's own 1/4 shard of 'out'"), std::string::npos)
      << fs[0].assumption;
  EXPECT_NE(fs[0].assumption.find("residual"), std::string::npos);
  Schedule x = s;
  EXPECT_THROW(find_pass("tp-sp")->apply(x, fs[0]), Error);
  auto res = run_pipeline(s, analysis::CostModel());
  EXPECT_TRUE(res.applied.empty());
  ASSERT_FALSE(res.advice.empty());
}

TEST(TpSp, AdviceIsAppliedOnlyUnderItsAssumption) {
  // braid fuse --assume: the same rewrite as the legal case, applied only when asked for this
  // pass, marked assumed, and its assumption written into the fused schedule's provenance.
  Schedule s = testing::tp_sp(4, 16, false, /*opaque=*/true);
  PipelineOptions other;
  other.passes = {"tp-sp"};
  other.assume = {"dedup"};
  auto res = run_pipeline(s, analysis::CostModel(), other);
  EXPECT_TRUE(res.applied.empty()) << "advice of tp-sp applied though only dedup was assumed";
  EXPECT_TRUE(assumed_rewrites(res.schedule).empty());
  for (const std::string& a : {std::string("tp-sp"), std::string("all")}) {
    PipelineOptions o;
    o.passes = {"tp-sp"};
    o.assume = {a};
    res = run_pipeline(s, analysis::CostModel(), o);
    ASSERT_EQ(res.applied.size(), 1u) << a;
    EXPECT_TRUE(res.applied[0].assumed);
    EXPECT_FALSE(res.applied[0].legal);
    EXPECT_EQ(count_ops(res.schedule, CollOp::AllReduce), 0);
    EXPECT_EQ(count_ops(res.schedule, CollOp::ReduceScatter), 4);
    auto assumed = assumed_rewrites(res.schedule);
    ASSERT_EQ(assumed.size(), 1u);
    EXPECT_THAT(assumed[0], HasSubstr("tp-sp: assumes"));
    EXPECT_THAT(assumed[0], HasSubstr("read only the rank's own 1/4 shard of 'out'"));
    EXPECT_TRUE(assumed_rewrites(s).empty()) << "the input schedule is not changed";
    EXPECT_THAT(finding_detail_json(res.applied[0], true), HasSubstr("\"assumed\":true"));
  }
  // Applied by hand: refused as advice, accepted when marked assumed.
  auto fs = find("tp-sp", s);
  ASSERT_EQ(fs.size(), 1u);
  ASSERT_TRUE(fs[0].rewrite) << "advice carries the rewrite it would make";
  Schedule x = s;
  EXPECT_THROW(find_pass("tp-sp")->apply(x, fs[0]), Error);
  fs[0].assumed = true;
  find_pass("tp-sp")->apply(x, fs[0]);
  EXPECT_EQ(count_ops(x, CollOp::ReduceScatter), 4);
}

// ---------------------------------------------------------------------------------------------
// decompose

TEST(Decompose, AllReduceEqualsReduceScatterPlusAllGather) {
  Schedule s = testing::tp_sp(4, 16, true);
  auto fs = find("decompose", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_TRUE(fs[0].legal && fs[0].enabling);
  Schedule x = apply_one("decompose", s, fs[0]);
  EXPECT_EQ(count_ops(x, CollOp::ReduceScatter), 4);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), 4);
  expect_same_outputs(s, x);
}

TEST(Decompose, CountNotDivisibleDoesNotFire) {
  Schedule s = testing::two_allreduces(2, 3);  // count 3 on 2 ranks
  EXPECT_TRUE(find("decompose", s).empty());
}

// ---------------------------------------------------------------------------------------------
// pp-ep

TEST(PpEp, P2pThenAllToAllBecomesManyToManyScatter) {
  const int e = 2;
  const int64_t M = 8;
  Schedule s = testing::pp_ep(e, M);
  auto fs = find("pp-ep", s);
  ASSERT_EQ(fs.size(), 1u);
  const Finding& f = fs[0];
  ASSERT_TRUE(f.legal) << f.assumption;
  // Chimera: P2P bsh + A2A (e-1)bsh/e -> M2M bsh: the all-to-all's bytes are saved.
  EXPECT_EQ(f.saving_bytes, (e - 1) * M * 4 / e);
  Schedule x = apply_one("pp-ep", s, f);
  EXPECT_EQ(count_ops(x, CollOp::AllToAll), 0);
  EXPECT_EQ(count_ops(x, CollOp::Send) + count_ops(x, CollOp::Recv), 0);
  EXPECT_EQ(count_ops(x, CollOp::ManyToMany), 2 * e);
  expect_same_outputs(s, x);
}

TEST(PpEp, GateReadingTheReceivedTokensMakesItAdvice) {
  Schedule s = testing::pp_ep(2, 8, /*gate=*/true);
  auto fs = find("pp-ep", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_FALSE(fs[0].legal);
  EXPECT_NE(fs[0].assumption.find("gate"), std::string::npos) << fs[0].assumption;
  EXPECT_EQ(fs[0].saving_bytes, 4 * 4);
}

// ---------------------------------------------------------------------------------------------
// pp-sp

TEST(PpSp, AllGatherThenP2pBecomesMulticastOfShards) {
  const int t = 2;
  const int64_t Ms = 4, M = Ms * t;
  Schedule s = testing::pp_sp(t, Ms);
  auto fs = find("pp-sp", s);
  ASSERT_EQ(fs.size(), 1u);
  ASSERT_TRUE(fs[0].legal) << fs[0].assumption;
  // AG (t-1)M/t + P2P M -> each rank sends its shard to t receivers (M): saves (t-1)M/t.
  EXPECT_EQ(fs[0].saving_bytes, (t - 1) * M * 4 / t);
  Schedule x = apply_one("pp-sp", s, fs[0]);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), 0);
  expect_same_outputs(s, x);
}

// ---------------------------------------------------------------------------------------------
// sp-ep, tp-ep: advice with the closed forms

TEST(SpEp, AllGatherThenAllToAllIsAdviceWithClosedForm) {
  const int t = 2;
  const int64_t Ms = 4, M = Ms * t;
  Schedule s = testing::sp_ep(t, Ms);
  auto fs = find("sp-ep", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_FALSE(fs[0].legal);
  // AG (t-1)M/t and (e-1)/e * (t-1)/t of the all-to-all's M.
  const int64_t ag = (t - 1) * M * 4 / t, a2a = (t - 1) * M * 4 / t;
  EXPECT_EQ(fs[0].saving_bytes, ag + a2a - a2a / t);
}

TEST(TpEp, AllReduceThenAllToAllWithoutRoutingIsAdviceWithClosedForm) {
  // No row-wise permute between the all-reduce and the all-to-all: nothing shows which tokens
  // each rank dispatches. One finding for both TP groups (they dispatch to each other).
  const int64_t M = 8;
  Schedule s = testing::tp_ep(M);
  auto fs = find("tp-ep", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_FALSE(fs[0].legal);
  EXPECT_EQ(fs[0].ranks, (std::vector<int32_t>{0, 1, 2, 3}));
  // All-to-all over ep = 2 carries 1/t: (ep-1)/ep * (t-1)/t * M bytes saved.
  EXPECT_EQ(fs[0].saving_bytes, M * 4 / 2 - M * 4 / 2 / 2);
  EXPECT_THAT(fs[0].assumption, HasSubstr("tensor-parallel"));
  EXPECT_THAT(fs[0].assumption, HasSubstr("no row-wise routing"));
}

// ---------------------------------------------------------------------------------------------
// coalesce, dedup

TEST(Coalesce, AdjacentContiguousAllReducesMerge) {
  Schedule s = testing::two_allreduces(2, 4);
  auto fs = find("coalesce", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_TRUE(fs[0].legal);
  EXPECT_GT(fs[0].saving_ns, 0);  // one latency instead of two
  Schedule x = apply_one("coalesce", s, fs[0]);
  EXPECT_EQ(count_ops(x, CollOp::AllReduce), 2);
  expect_same_outputs(s, x);
}

TEST(Coalesce, DependentAllReducesDoNotMerge) {
  EXPECT_TRUE(find("coalesce", testing::two_allreduces(2, 4, true)).empty());
}

TEST(Dedup, RecomputingAllGatherIsRemovedAndItsReaderRedirected) {
  const int t = 2;
  const int64_t n = 4;
  Schedule s = testing::regather(t, n);
  auto fs = find("dedup", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_TRUE(fs[0].legal);
  EXPECT_EQ(fs[0].saving_bytes, (t - 1) * t * n * 4 / t);
  Schedule x = apply_one("dedup", s, fs[0]);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), t);
  expect_same_outputs(s, x);
}

TEST(Dedup, WriteBetweenBlocksAndOpaqueBetweenIsAdvice) {
  EXPECT_TRUE(find("dedup", testing::regather(2, 4, /*write_between=*/true)).empty());
  auto fs = find("dedup", testing::regather(2, 4, false, /*opaque_between=*/true));
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_FALSE(fs[0].legal);
  EXPECT_NE(fs[0].assumption.find("do not write 'x'"), std::string::npos) << fs[0].assumption;
  // Under its assumption the duplicate goes, as in the legal case.
  Schedule s = testing::regather(2, 4, false, /*opaque_between=*/true);
  PipelineOptions o;
  o.passes = {"dedup"};
  o.assume = {"dedup"};
  auto res = run_pipeline(s, analysis::CostModel(), o);
  ASSERT_EQ(res.applied.size(), 1u);
  EXPECT_TRUE(res.applied[0].assumed);
  EXPECT_EQ(count_ops(res.schedule, CollOp::AllGather), count_ops(s, CollOp::AllGather) - 2);
  EXPECT_THAT(assumed_rewrites(res.schedule), ::testing::ElementsAre(HasSubstr("dedup: assumes")));
}

// ---------------------------------------------------------------------------------------------
// coc

TEST(Coc, ChunksChosenByTheCostModelAndDataKept) {
  for (bool two : {false, true}) {
    Schedule s = testing::gemm_allreduce(2, 64, 2'000'000, two);
    analysis::CostModel cm = slow_links();
    auto fs = find("coc", s, cm);
    ASSERT_EQ(fs.size(), 1u);
    EXPECT_TRUE(fs[0].legal);
    EXPECT_GT(fs[0].saving_ns, 0);
    // AR of 256 B on 2 ranks at 1 MB/s: 256 us; GEMM 2 ms. Best k simulated by hand: chunks of
    // 2 ms/k + 1 us compute, 256/k us comm; k = 8: 8 * 251 us + 32 us.
    const Ns ar = cm.collective_ns(CollOp::AllReduce, 256, 2, "tp", {0, 1});
    Ns best = 2'000'000 + ar;
    for (int k : {2, 4, 8}) {
      Ns chunk = 2'000'000 / k + 1000, comm = cm.collective_ns(CollOp::AllReduce, 256 / k, 2, "tp", {0, 1});
      Ns end = 0;
      for (int i = 0; i < k; ++i) end = std::max(end, (i + 1) * chunk) + comm;
      best = std::min(best, end);
    }
    EXPECT_EQ(fs[0].saving_ns, 2'000'000 + ar - best);
    Schedule x = apply_one("coc", s, fs[0]);
    EXPECT_EQ(count_ops(x, CollOp::AllReduce), 2 * 8);
    expect_same_outputs(s, x);
  }
}

TEST(Coc, ChunksAPairOnceAndNeverItsOwnChunks) {
  for (bool two : {false, true}) {
    Schedule s = testing::gemm_allreduce(2, 64, 2'000'000, two);
    const analysis::CostModel cm = slow_links();
    auto fs = find("coc", s, cm);
    ASSERT_EQ(fs.size(), 1u);
    Schedule x = apply_one("coc", s, fs[0]);
    // Each chunk is again a GEMM next to an All-Reduce, but coc's own: not chunked again.
    EXPECT_TRUE(find("coc", x, cm).empty());
    auto res = run_pipeline(s, cm, {{"coc"}});
    EXPECT_EQ(res.applied.size(), 1u);
    ASSERT_EQ(res.rounds.size(), 1u);
    EXPECT_EQ(res.rounds[0], 2);  // the round that applied it, the one that found nothing
    EXPECT_TRUE(res.fixed_point);
    EXPECT_EQ(count_ops(res.schedule, CollOp::AllReduce), 2 * 8);
  }
}

TEST(Coc, NoRewriteWhenCommunicationIsNegligibleOrComputeOpaque) {
  // Default NVLink profile, tiny message: chunking only adds overheads.
  EXPECT_TRUE(find("coc", testing::gemm_allreduce(2, 64, 2000)).empty());
  auto fs = find("coc", testing::gemm_allreduce(2, 64, 2'000'000, false, /*opaque=*/true), slow_links());
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_FALSE(fs[0].legal);
}

// The pipeline time of k chunks by hand: producer form (compute first) or gather form
// (communication first), with per-chunk communication times.
Ns coc_pipeline(Ns gemm, Ns overhead, const std::vector<Ns>& comm, bool gather) {
  const int k = static_cast<int>(comm.size());
  const Ns chunk = gemm / k + overhead;
  Ns comm_end = 0, comp_end = 0;
  for (int i = 0; i < k; ++i) {
    if (gather) {
      comm_end += comm[i];
      comp_end = std::max(comp_end, comm_end) + chunk;
    } else {
      comp_end += chunk;
      comm_end = std::max(comm_end, comp_end) + comm[i];
    }
  }
  return gather ? comp_end : comm_end;
}

// Chunk i of k of t shards of n elements: the parts' element counts (each inside one shard).
std::vector<int64_t> part_counts(int64_t n, int t, int k, int i) {
  std::vector<int64_t> v;
  const int64_t len = n * t / k;
  for (int64_t a = i * len, end = (i + 1) * len; a < end;) {
    const int64_t b = std::min(end, (a / n + 1) * n);
    v.push_back(b - a);
    a = b;
  }
  return v;
}

// The best k and its time for a reduce-scatter (Reduce parts) or all-gather (Broadcast parts).
std::pair<int, Ns> coc_best(const analysis::CostModel& cm, CollOp op, int t, int64_t n, Ns gemm) {
  std::vector<int32_t> ranks;
  for (int r = 0; r < t; ++r) ranks.push_back(r);
  const bool gather = op == CollOp::AllGather;
  Ns best = gemm + cm.collective_ns(op, t * n * 4, t, "tp", ranks);
  int best_k = 0;
  for (int k : {2, 4, 8}) {
    std::vector<Ns> comm(k, 0);
    for (int i = 0; i < k; ++i)
      for (int64_t c : part_counts(n, t, k, i))
        comm[i] += cm.collective_ns(gather ? CollOp::Broadcast : CollOp::Reduce, c * 4, t, "tp", ranks);
    const Ns end = coc_pipeline(gemm, 1000, comm, gather);
    if (end < best) best = end, best_k = k;
  }
  return {best_k, best};
}

TEST(Coc, GemmReduceScatterBecomesChunksReducedToTheShardOwners) {
  const analysis::CostModel cm = slow_links();
  for (int t : {2, 4})
    for (bool two : {false, true}) {
      SCOPED_TRACE("t=" + std::to_string(t) + (two ? " two streams" : " one stream"));
      const int64_t n = 32;
      Schedule s = testing::gemm_reducescatter(t, n, 2'000'000, two);
      auto fs = find("coc", s, cm);
      ASSERT_EQ(fs.size(), 1u);
      EXPECT_TRUE(fs[0].legal);
      auto [k, best] = coc_best(cm, CollOp::ReduceScatter, t, n, 2'000'000);
      ASSERT_GT(k, 0);
      std::vector<int32_t> ranks;
      for (int r = 0; r < t; ++r) ranks.push_back(r);
      EXPECT_EQ(fs[0].saving_ns,
                2'000'000 + cm.collective_ns(CollOp::ReduceScatter, t * n * 4, t, "tp", ranks) - best);
      EXPECT_NE(fs[0].summary.find("split into " + std::to_string(k)), std::string::npos) << fs[0].summary;
      Schedule x = apply_one("coc", s, fs[0]);
      EXPECT_EQ(count_ops(x, CollOp::ReduceScatter), 0);
      EXPECT_EQ(count_ops(x, CollOp::Reduce), t * std::max(k, t));
      expect_same_outputs(s, x);
    }
}

TEST(Coc, AllGatherGemmBecomesBroadcastChunksTheGemmFollows) {
  const analysis::CostModel cm = slow_links();
  for (int t : {2, 4}) {
    SCOPED_TRACE("t=" + std::to_string(t));
    const int64_t n = 32;
    Schedule s = testing::allgather_gemm(t, n);
    auto fs = find("coc", s, cm);
    ASSERT_EQ(fs.size(), 1u);
    EXPECT_TRUE(fs[0].legal);
    auto [k, best] = coc_best(cm, CollOp::AllGather, t, n, 2'000'000);
    ASSERT_GT(k, 0);
    std::vector<int32_t> ranks;
    for (int r = 0; r < t; ++r) ranks.push_back(r);
    EXPECT_EQ(fs[0].saving_ns,
              2'000'000 + cm.collective_ns(CollOp::AllGather, t * n * 4, t, "tp", ranks) - best);
    Schedule x = apply_one("coc", s, fs[0]);
    EXPECT_EQ(count_ops(x, CollOp::AllGather), 0);
    EXPECT_EQ(count_ops(x, CollOp::Broadcast), t * std::max(k, t));
    expect_same_outputs(s, x);
    // The GEMM's chunk i waits for chunk i only: the first chunk starts before the last
    // broadcast (it is the compute stream's third op, after "record start; wait e0").
    const auto& ops = x.ranks[0].streams[0].ops;
    ASSERT_GE(ops.size(), 4u);
    EXPECT_NE(ops[1].record(), nullptr);
    EXPECT_NE(ops[2].wait(), nullptr);
    EXPECT_NE(ops[3].compute(), nullptr);
  }
}

TEST(Coc, AllGatherGemmNotSplitWhenTheGemmReadsItWholeOrWritesItsInput) {
  const analysis::CostModel cm = slow_links();
  // A write longer than the gathered buffer: every chunk reads the whole buffer.
  EXPECT_TRUE(find("coc", testing::allgather_gemm(2, 32, 2'000'000, 256), cm).empty());
  // The GEMM writes the shard the broadcasts read.
  EXPECT_TRUE(find("coc", testing::allgather_gemm(2, 32, 2'000'000, 0, true), cm).empty());
}

TEST(Presets, CocChunksMegatronSpCollectivesAndKeepsData) {
  // dense: TP 4 with Megatron SP, so its GEMMs sit next to Reduce-Scatters and All-Gathers.
  // A GPU of 1 MFLOP/s makes the tiny shape's GEMMs about 1 ms, comparable to its collectives
  // on 1 MB/s links.
  analysis::HardwareProfile slow_gpu = analysis::default_profile();
  slow_gpu.gpu.tflops_16bit = slow_gpu.gpu.tflops_32bit = 1e-6;
  Schedule s = testing::preset_at_test_shape("dense", analysis::CostModel(slow_gpu));
  const analysis::CostModel cm = slow_links();
  int rs = 0, ag = 0;
  for (const Finding& f : find("coc", s, cm)) {
    if (!f.legal) continue;
    rs += f.summary.find("reduces to the shards' owners") != std::string::npos;
    ag += f.summary.find("broadcasts from the shards' owners") != std::string::npos;
  }
  EXPECT_GT(rs, 0);
  EXPECT_GT(ag, 0);
  auto res = run_pipeline(s, cm, {{"coc"}});
  EXPECT_GT(count_ops(res.schedule, CollOp::Reduce), 0);
  EXPECT_GT(count_ops(res.schedule, CollOp::Broadcast), 0);
  expect_same_outputs(s, res.schedule);
}

// ---------------------------------------------------------------------------------------------
// reorder + pipeline

TEST(Reorder, MovesCollectiveAcrossIndependentComputeToCoalesce) {
  Schedule s = testing::two_allreduces(2, 4);
  // Insert an independent compute between the two all-reduces on every rank.
  for (int32_t r = 0; r < 2; ++r) {
    s.add_buffer(r, "other", "float32", 4);
    auto& ops = s.ranks[r].streams[0].ops;
    Op c;
    c.id = 100 + r;
    c.body = testing::comp("wgrad", 300, {}, {testing::sl("other", 0, 4)});
    ops.insert(ops.begin() + 2, c);
  }
  EXPECT_TRUE(find("coalesce", s).empty());
  auto fs = find("reorder", s);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_TRUE(fs[0].enabling);
  auto res = run_pipeline(s, analysis::CostModel());
  ASSERT_EQ(res.applied.size(), 2u);
  EXPECT_EQ(res.applied[0].pass, "reorder");
  EXPECT_EQ(res.applied[1].pass, "coalesce");
  EXPECT_EQ(count_ops(res.schedule, CollOp::AllReduce), 2);
  expect_same_outputs(s, res.schedule);
}

TEST(Reorder, DependentComputeIsNotCrossed) {
  Schedule s = testing::two_allreduces(2, 4);
  for (int32_t r = 0; r < 2; ++r) {
    auto& ops = s.ranks[r].streams[0].ops;
    Op c;
    c.id = 100 + r;
    c.body = testing::comp("scale", 300, {}, {testing::sl("g", 4, 2)});  // writes the 2nd's input
    ops.insert(ops.begin() + 2, c);
  }
  EXPECT_TRUE(find("reorder", s).empty());
}

TEST(Pipeline, DecomposeEnablesPpSpOnTpThenP2p) {
  // All-reduce over TP then every TP rank sends the full result to the next stage: decompose
  // + pp-sp gives reduce-scatter + many-to-many of shards (Megatron's scatter-gather).
  Schedule s;
  s.comms.push_back({"tp", {0, 1}});
  s.comms.push_back({"pp0", {0, 2}});
  s.comms.push_back({"pp1", {1, 3}});
  for (int32_t r = 0; r < 4; ++r) {
    s.add_buffer(r, "x", "float32", 8);
    s.add_buffer(r, "in", "float32", 8);
    s.add_buffer(r, "h", "float32", 8);
    int st = s.add_stream(r, "main");
    if (r < 2) {
      s.ranks[r].outputs = {"in"};
      s.append(r, st, testing::comp("fc2", 1000, {}, {testing::sl("x", 0, 8)}));
      s.append(r, st, testing::coll(CollOp::AllReduce, "tp", 8, testing::sl("x", 0, 8), testing::sl("x", 0, 8)));
      s.append(r, st, testing::p2p(CollOp::Send, r == 0 ? "pp0" : "pp1", r + 2, 8, testing::sl("x", 0, 8)));
    } else {
      s.ranks[r].outputs = {"h"};
      s.append(r, st, testing::p2p(CollOp::Recv, r == 2 ? "pp0" : "pp1", r - 2, 8, testing::sl("in", 0, 8)));
      s.append(r, st, testing::comp("attn", 1000, {testing::sl("in", 0, 8)}, {testing::sl("h", 0, 8)}));
    }
  }
  ASSERT_EQ(validate(s), std::vector<std::string>{});
  auto res = run_pipeline(s, slow_links(1000, 1));
  ASSERT_GE(res.applied.size(), 2u);
  EXPECT_EQ(res.applied[0].pass, "decompose");
  EXPECT_EQ(res.applied[1].pass, "pp-sp");
  EXPECT_EQ(count_ops(res.schedule, CollOp::AllReduce), 0);
  EXPECT_EQ(count_ops(res.schedule, CollOp::ManyToMany), 4);
  // The fused ops name what they replace.
  for (const auto& r : res.schedule.ranks)
    for (const auto& o : r.streams[0].ops)
      if (o.collective()) {
        EXPECT_FALSE(o.replaces.empty());
      }
  expect_same_outputs(s, res.schedule);
  EXPECT_NE(res.passes_json().find("{\"pass\":\"pp-sp\",\"applied\":1"), std::string::npos);
}

TEST(Pipeline, UnknownPassAndInvalidScheduleAreErrors) {
  EXPECT_THROW(run_pipeline(testing::tp_sp(), analysis::CostModel(), {{"nope"}}), Error);
  Schedule bad = testing::tp_sp();
  bad.ranks[1].streams[0].ops.pop_back();
  bad.ranks[1].streams[0].ops.erase(bad.ranks[1].streams[0].ops.begin() + 1);
  EXPECT_THROW(run_pipeline(bad, analysis::CostModel()), Error);
}

TEST(Pipeline, GoldenFusedScheduleOfTpSp) {
  auto res = run_pipeline(testing::tp_sp(2, 8), analysis::CostModel());
  std::string got = to_json(res.schedule);
  const std::string path = std::string(BRAID_TEST_DATA_DIR) + "/fusion/passes/tp_sp_fused.json";
  if (std::getenv("BRAID_UPDATE_GOLDENS")) save_schedule(res.schedule, path);
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " (set BRAID_UPDATE_GOLDENS=1 to write it)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(got, want.str());
}

// ---------------------------------------------------------------------------------------------
// Synthesizer presets (tiny shapes)

Schedule tiny_preset(const std::string& name) { return testing::preset_at_test_shape(name); }

TEST(Presets, TpSpFiresOnEveryForwardAllReduceWithClosedForm) {
  Preset p = preset("tp-sp");
  Schedule s = tiny_preset("tp-sp");
  const int t = p.layout.tp;
  const int64_t M = 8 * 16;  // T * h
  auto fs = find("tp-sp", s);
  int fired = 0;
  for (const Finding& f : fs)
    if (f.legal && !f.enabling) {
      ++fired;
      EXPECT_EQ(f.saving_bytes, (t - 1) * M * 2 / t);  // bfloat16
    }
  EXPECT_EQ(fired, 2 * 2 * static_cast<int>(std::min<int64_t>(p.model.micro_batches, 2)));
  auto res = run_pipeline(s, analysis::CostModel(), {{"tp-sp"}});
  expect_same_outputs(s, res.schedule);
}

// Tiny shapes: T = 8 tokens, h = 16, M = 128 elements, bfloat16 (2 bytes), R = T * k * h.
constexpr int64_t kM = 8 * 16, kDb = 2;

std::vector<Finding> findings(const Schedule& s, const std::string& pass, bool legal) {
  std::vector<Finding> v;
  for (const Finding& f : find(pass, s))
    if (f.legal == legal && !f.enabling) v.push_back(f);
  return v;
}

TEST(Presets, PpSpAllGatherThenSendBecomesMulticast) {
  const int t = preset("pp-sp").layout.tp;
  Schedule s = tiny_preset("pp-sp");
  auto fs = findings(s, "pp-sp", true);
  ASSERT_FALSE(fs.empty());
  for (const Finding& f : fs) EXPECT_EQ(f.saving_bytes, (t - 1) * kM * kDb / t);
  Schedule x = apply_one("pp-sp", s, fs[0]);
  expect_same_outputs(s, x);
}

TEST(Presets, RecomputingAllGatherRemovedByDedup) {
  for (const char* name : {"tp-sp", "pp-sp", "dense"}) {
    const int t = preset(name).layout.tp;
    Schedule s = tiny_preset(name);
    auto fs = findings(s, "dedup", true);
    ASSERT_FALSE(fs.empty()) << name;
    for (const Finding& f : fs) EXPECT_EQ(f.saving_bytes, (t - 1) * kM * kDb / t) << name;
    Schedule x = apply_one("dedup", s, fs[0]);
    expect_same_outputs(s, x);
  }
}

// A copy of the schedule in which every rank runs a compute reading `read` right after the op
// labelled `after`, its output a result of the step.
Schedule with_reader(Schedule s, const Slice& read, const std::string& after) {
  for (auto& r : s.ranks) {
    r.buffers.push_back({"probe", "bfloat16", read.count, ""});
    r.outputs.push_back("probe");
    Compute c = testing::comp("probe", 10, {read}, {{"probe", 0, read.count}});
    auto& ops = r.streams[0].ops;
    auto it = std::find_if(ops.begin(), ops.end(), [&](const Op& o) {
      return o.compute() && o.compute()->label == after;
    });
    ops.insert(it + 1, Op{s.next_op_id(), c, {}});
  }
  return s;
}

// The whole pipeline applies `pass` `n` times, keeps every output, and leaves nothing of it to
// find again.
void expect_pipeline_applies(const Schedule& s, const std::string& pass, int n) {
  auto res = run_pipeline(s, analysis::CostModel(), {});
  int applied = 0;
  for (const Finding& f : res.applied) applied += f.pass == pass;
  EXPECT_EQ(applied, n) << pass;
  expect_same_outputs(s, res.schedule);
  EXPECT_TRUE(find(pass, res.schedule).empty()) << pass;
}

// A copy of the schedule in which `label`'s compute on every rank gets `edit`.
Schedule edited(Schedule s, const std::string& label, const std::function<void(Compute&)>& edit) {
  for (auto& r : s.ranks)
    for (auto& st : r.streams)
      for (Op& o : st.ops)
        if (o.compute() && o.compute()->label == label) edit(*o.compute());
  return s;
}

// SP+EP at the tiny shape (tp 2 with SP, ep 4, dp 4): per layer one finding over all 8 ranks.
// The MoE block runs on each rank's own sequence shard: the forward All-Gather of the shards
// and the backward All-Gather of the output gradient go, the backward Reduce-Scatter (which
// summed t identical copies) becomes t local additions, the four all-to-alls carry 1/t; the
// partial router and expert gradients are added by one all-reduce.
TEST(Presets, SpEpAppliesWithTheClosedFormAndKeepsData) {
  Preset p = preset("sp-ep");
  const int t = p.layout.tp, ep = std::min(p.layout.ep, 4);
  const int64_t h = 16, d = 32, E = 4, R = 8 * p.model.top_k * h;
  const int64_t a2a = (ep - 1) * R * kDb / ep;
  const int64_t grads = (E / ep) * 2 * h * d + h * E;
  const int64_t sp = (t - 1) * kM * kDb / t;  // one all-gather or reduce-scatter of the tokens
  Schedule s = tiny_preset("sp-ep");
  auto fs = findings(s, "sp-ep", true);
  ASSERT_EQ(fs.size(), 2u);  // 2 layers x 1 micro-batch
  for (const Finding& f : fs) {
    EXPECT_EQ(f.saving_bytes, 3 * sp + 4 * (a2a - a2a / t) - 2 * (t - 1) * grads * kDb / t);
    EXPECT_GT(f.saving_ns, 0);
    EXPECT_TRUE(f.assumption.empty()) << f.assumption;
  }
  EXPECT_TRUE(findings(s, "sp-ep", false).empty());
  Schedule x = apply_one("sp-ep", s, fs[0]);
  expect_same_outputs(s, x);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), count_ops(s, CollOp::AllGather) - 2 * 8);
  EXPECT_EQ(count_ops(x, CollOp::ReduceScatter), count_ops(s, CollOp::ReduceScatter) - 8);
  EXPECT_EQ(count_ops(x, CollOp::AllReduce), count_ops(s, CollOp::AllReduce) + 8);
  expect_pipeline_applies(s, "sp-ep", 2);
}

TEST(Presets, SpEpKeepsTheAllGatherAnotherOpReadsAndPerRankExpertsStayAdvice) {
  // Another op reads the gathered tokens in full: the block still runs on the rank's shard,
  // but the all-gather stays for that reader.
  Schedule base = tiny_preset("sp-ep");
  Schedule s = with_reader(base, {"L0.ln2_full.mb0", 0, kM}, "L0.moe.router");
  auto fs = findings(s, "sp-ep", true);
  ASSERT_EQ(fs.size(), 2u);
  const Finding& l0 = fs[0].summary.find("'L0.") != std::string::npos ? fs[0] : fs[1];
  Schedule x = apply_one("sp-ep", s, l0);
  expect_same_outputs(s, x);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), count_ops(s, CollOp::AllGather) - 8);  // bwd only
  // Expert compute that is not the same function on the TP ranks: advice.
  Schedule e = edited(base, "L0.moe.experts.fc2",
                      [](Compute& c) { c.replicated.clear(); });
  bool advice = false;
  for (const Finding& f : find("sp-ep", e))
    if (f.summary.find("'L0.moe.allgather'") != std::string::npos) {
      EXPECT_FALSE(f.legal);
      advice = true;
      EXPECT_THAT(f.assumption, HasSubstr("not declared the same function"));
    }
  EXPECT_TRUE(advice);
}

// TP+EP at the tiny shape (tp 2, ep 4, dp 4; T 8, h 16, ffn 32, 4 experts, top-2): per layer
// one finding over all 8 ranks. It saves (t-1)/t of the four all-to-alls (dispatch, combine and
// their backward) and the all-reduce's second half, adds the all-gathers of the layer output
// and of the input gradient, and one all-reduce of the partial router and expert gradients.
int64_t tp_ep_closed_form_bytes(const Preset& p) {
  const int t = p.layout.tp, ep = std::min(p.layout.ep, 4);
  const int64_t h = 16, d = 32, E = 4, k = p.model.top_k;
  const int64_t R = 8 * k * h;
  const int64_t a2a = (ep - 1) * R * kDb / ep;
  const int64_t grads = (E / ep) * 2 * h * d + h * E;  // local experts' fc1, fc2 + router
  const int64_t rs_vs_ar = (t - 1) * kM * kDb / t;
  const int64_t gathers = 2 * (t - 1) * kM * kDb / t;
  return 4 * (a2a - a2a / t) + rs_vs_ar - gathers - 2 * (t - 1) * grads * kDb / t;
}

TEST(Presets, TpEpAppliesWithTheClosedFormAndKeepsData) {
  Preset p = preset("tp-ep");
  const int t = p.layout.tp;
  Schedule s = tiny_preset("tp-ep");
  auto fs = findings(s, "tp-ep", true);
  ASSERT_EQ(fs.size(), 2u);  // 2 layers x 1 micro-batch
  for (const Finding& f : fs) {
    EXPECT_EQ(f.saving_bytes, tp_ep_closed_form_bytes(p));
    EXPECT_GT(f.saving_ns, 0);  // half the MoE block's compute outweighs the gradient all-reduce
    EXPECT_EQ(f.ranks.size(), 8u);
    EXPECT_TRUE(f.assumption.empty()) << f.assumption;
  }
  EXPECT_TRUE(findings(s, "tp-ep", false).empty());
  Schedule x = apply_one("tp-ep", s, fs[0]);
  expect_same_outputs(s, x);
  // The attention all-reduce became a reduce-scatter; all-gathers of the layer output and the
  // input gradient and the gradient all-reduce were added on every rank; the all-to-alls carry
  // 1/t.
  EXPECT_EQ(count_ops(x, CollOp::ReduceScatter), count_ops(s, CollOp::ReduceScatter) + 8);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), count_ops(s, CollOp::AllGather) + 16);
  EXPECT_EQ(count_ops(x, CollOp::AllReduce), count_ops(s, CollOp::AllReduce));
  int64_t before = 0, after = 0;
  for (const Schedule* sc : {&s, &x})
    for (const auto& st : sc->ranks[0].streams)
      for (const Op& o : st.ops)
        if (o.collective() && o.collective()->op == CollOp::AllToAll &&
            o.collective()->label.rfind("L0.", 0) == 0)
          (sc == &s ? before : after) += o.collective()->count;
  EXPECT_EQ(after * t, before);
  // The whole pipeline (both layers, then the other passes) keeps the data too; the rewritten
  // block is not found again.
  expect_pipeline_applies(s, "tp-ep", 2);
}

TEST(Presets, TpEpStaysAdviceWhenDataFlowForbidsIt) {
  Schedule s = tiny_preset("tp-ep");
  auto reason = [](const Schedule& x) {
    for (const Finding& f : find("tp-ep", x))
      if (f.summary.find("'L0.") != std::string::npos) return f.legal ? std::string() : f.assumption;
    return std::string("no finding");
  };
  // Per-rank expert compute: TP ranks would not compute the same rows.
  EXPECT_THAT(reason(edited(s, "L0.moe.experts.fc1", [](Compute& c) { c.replicated.clear(); })),
              HasSubstr("not declared the same function"));
  // The routing transposes another grid than the TP x EP token segments.
  EXPECT_THAT(reason(edited(s, "L0.moe.permute", [](Compute& c) { c.transpose = {2, 4}; })),
              HasSubstr("grid"));
  // Expert weights that differ between the TP ranks.
  Schedule w = s;
  for (auto& r : w.ranks)
    for (Buffer& b : r.buffers)
      if (b.name == "expert_params") b.replicated.clear();
  EXPECT_THAT(reason(w), HasSubstr("not provably the same"));
  // Something else reads all the routing probabilities, which an all-gather of token
  // activations cannot restore.
  EXPECT_THAT(reason(with_reader(s, {"L0.probs.mb0", 0, 8 * 4}, "L0.moe.unpermute")),
              HasSubstr("'L0.probs.mb0' is read whole after the MoE block"));
}

TEST(Presets, TpEpWithoutTheGradientAllReduceFailsTheDataCheck) {
  // A deliberately broken rewrite: drop the all-reduce of the partial weight gradients. The
  // interpreter shows the expert and router gradients differ.
  Schedule s = tiny_preset("tp-ep");
  auto fs = findings(s, "tp-ep", true);
  ASSERT_FALSE(fs.empty());
  Schedule x = apply_one("tp-ep", s, fs[0]);
  for (auto& r : x.ranks)
    for (auto& st : r.streams)
      st.ops.erase(std::remove_if(st.ops.begin(), st.ops.end(), [](const Op& o) {
                     return o.collective() && o.collective()->label.find("wgrad.allreduce") !=
                                                  std::string::npos;
                   }),
                   st.ops.end());
  ASSERT_EQ(validate(x), std::vector<std::string>{});
  Interpretation a = interpret(s), b = interpret(x);
  EXPECT_NE(a.buffers[0].at("expert_grads"), b.buffers[0].at("expert_grads"));
  EXPECT_NE(a.buffers[0].at("router_grads"), b.buffers[0].at("router_grads"));
  EXPECT_EQ(a.buffers[0].at("grads"), b.buffers[0].at("grads"));
}

TEST(Presets, PpEpAppliesOnTheMoeCutWithTheClosedForm) {
  // Stages cut at the MoE dispatch (the gate on the sending stage): the P2P of the routed
  // tokens and the dispatch All-to-All become one many-to-many scatter, and in backward the
  // dispatch's All-to-All and the P2P one gather. Saving: the All-to-All's (ep-1)/ep of the
  // routed tokens (Chimera's closed form; the many-to-many carries what the P2P did).
  Preset p = preset("pp-ep");
  ASSERT_TRUE(p.layout.pp_moe_cut);
  const int ep = p.layout.ep;
  const int64_t R = 8 * p.model.top_k * 16;
  Schedule s = tiny_preset("pp-ep");
  auto fs = findings(s, "pp-ep", true);
  // (pp - 1) boundaries x 2 micro-batches x 2 directions x dp / ep groups of ep ranks
  ASSERT_EQ(fs.size(), static_cast<size_t>((p.layout.pp - 1) * 2 * 2));
  for (const Finding& f : fs) {
    EXPECT_EQ(f.saving_bytes, (ep - 1) * R * kDb / ep);
    EXPECT_GT(f.saving_ns, 0);
  }
  EXPECT_TRUE(findings(s, "pp-ep", false).empty());
  Schedule x = apply_one("pp-ep", s, fs[0]);
  EXPECT_EQ(count_ops(x, CollOp::ManyToMany), count_ops(s, CollOp::ManyToMany) + 2 * ep);
  expect_same_outputs(s, x);
  auto res = run_pipeline(s, analysis::CostModel(), {{"pp-ep"}});
  EXPECT_EQ(res.applied.size(), fs.size());
  expect_same_outputs(s, res.schedule);
}

TEST(Presets, PpEpIsAdviceWhenStagesAreCutAtLayers) {
  // Stage boundaries at layer boundaries: the un-permute's backward (and in forward the
  // attention) sits between the P2P and the All-to-All, reading data of the stage it runs on.
  Preset p = preset("pp-ep");
  const int ep = p.layout.ep;
  const int64_t R = 8 * p.model.top_k * 16;
  p.model.layers = p.layout.pp * 2;
  p.model.hidden = 16;
  p.model.seq = 8;
  p.model.heads = 4;
  p.model.ffn = 32;
  p.model.micro_batches = 2;
  p.model.experts = 4;
  p.layout.pp_moe_cut = false;
  p.layout.bucket_elems = 1 << 20;
  Schedule s = synthesize(p.model, p.layout);
  auto fs = findings(s, "pp-ep", false);
  ASSERT_FALSE(fs.empty());
  EXPECT_TRUE(findings(s, "pp-ep", true).empty());
  for (const Finding& f : fs) {
    EXPECT_EQ(f.saving_bytes, (ep - 1) * R * kDb / ep);
    EXPECT_NE(f.assumption.find("unpermute"), std::string::npos) << f.assumption;
  }
}

TEST(Presets, TpPpAppliesWithTheClosedFormAndKeepsData) {
  // Last layer of each stage: mlp.allreduce -> residual -> send of the full activation on all t
  // TP ranks; backward: attn.bwd.allreduce -> ln.bwd -> send. 3 stage boundaries x 2
  // micro-batches x 2 directions. The residual stream is replicated compute over TP, so the t
  // sent copies are provably identical and the rewrite applies.
  Preset p = preset("tp-pp");
  const int t = p.layout.tp;
  Schedule s = tiny_preset("tp-pp");
  // Bandwidth-bound links, as at the preset's real sizes (at 256-byte messages the extra
  // collective's latency outweighs the bytes: the predicted ns is negative there).
  auto fs = find("tp-pp", s, slow_links());
  EXPECT_EQ(fs.size(), static_cast<size_t>(2 * (p.layout.pp - 1) * 2));
  for (const Finding& f : fs) {
    EXPECT_TRUE(f.legal) << f.assumption;
    EXPECT_EQ(f.saving_bytes, (t - 1) * kM * kDb / t);  // the P2P's (t-1)/t, net
    EXPECT_GT(f.saving_ns, 0);
    EXPECT_EQ(f.ops.size(), static_cast<size_t>(3 * t));  // all-reduce, sends, recvs
  }
  ASSERT_FALSE(fs.empty());
  Schedule x = apply_one("tp-pp", s, fs[0]);
  EXPECT_EQ(count_ops(x, CollOp::ReduceScatter), count_ops(s, CollOp::ReduceScatter) + t);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), count_ops(s, CollOp::AllGather) + t);
  expect_same_outputs(s, x);
  // Every rewrite at once, through the pipeline.
  auto res = run_pipeline(s, slow_links(), {{"tp-pp"}});
  EXPECT_EQ(res.applied.size(), fs.size());
  expect_same_outputs(s, res.schedule);
}

TEST(Presets, TpPpStaysAdviceWhenTheResidualStreamIsNotReplicated) {
  // The same preset with the residual ops not marked replicated: the t copies cannot be shown
  // identical, so each finding is advice naming the assumption.
  Schedule s = tiny_preset("tp-pp");
  for (auto& r : s.ranks) {
    for (auto& b : r.buffers) b.replicated.clear();
    for (auto& st : r.streams)
      for (auto& o : st.ops)
        if (Compute* c = o.compute()) c->replicated.clear();
  }
  auto fs = find("tp-pp", s, slow_links());
  ASSERT_FALSE(fs.empty());
  for (const Finding& f : fs) {
    EXPECT_FALSE(f.legal);
    EXPECT_NE(f.assumption.find("identical on the 4 ranks"), std::string::npos) << f.assumption;
    EXPECT_NE(f.assumption.find("not provably identical"), std::string::npos) << f.assumption;
  }
}

// tp-pp negative cases: two TP ranks all-reduce and each sends the result on to the next stage.
Schedule tp_pp_pair(bool receivers_grouped, int64_t sent) {
  using testing::coll;
  using testing::p2p;
  using testing::sl;
  const int64_t M = 8;
  Schedule s;
  s.comms.push_back({"tp0", {0, 1}});
  if (receivers_grouped) s.comms.push_back({"tp1", {2, 3}});
  s.comms.push_back({"pp0", {0, 2}});
  s.comms.push_back({"pp1", {1, 3}});
  for (int32_t r = 0; r < 4; ++r) {
    s.add_buffer(r, "partial", "float32", M);
    s.add_buffer(r, "x", "float32", M);
    int st = s.add_stream(r, "compute");
    if (r < 2) {
      s.append(r, st, coll(CollOp::AllReduce, "tp0", M, sl("partial", 0, M), sl("x", 0, M)));
      s.append(r, st, p2p(CollOp::Send, r ? "pp1" : "pp0", r + 2, sent, sl("x", 0, sent)));
    } else {
      s.append(r, st, p2p(CollOp::Recv, r == 3 ? "pp1" : "pp0", r - 2, sent, sl("x", 0, sent)));
    }
  }
  return s;
}

TEST(TpPp, FiresOnlyForTheFullActivationToAGroupedStage) {
  ASSERT_EQ(validate(tp_pp_pair(true, 8)), std::vector<std::string>{});
  // No outputs listed, so the senders' x is a result of the step and must stay whole: advice.
  auto fs = find("tp-pp", tp_pp_pair(true, 8), slow_links());
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].saving_bytes, 8 * 4 / 2);
  EXPECT_FALSE(fs[0].legal);
  EXPECT_NE(fs[0].assumption.find("'x' is a result of the step"), std::string::npos) << fs[0].assumption;
  // With the receivers' x as the result, the all-reduce's output itself is sent, identical on
  // both ranks: the rewrite applies and keeps the data.
  Schedule outs = tp_pp_pair(true, 8);
  for (int32_t r = 0; r < 4; ++r) outs.ranks[r].outputs = {r < 2 ? "partial" : "x"};
  auto fo = find("tp-pp", outs, slow_links());
  ASSERT_EQ(fo.size(), 1u);
  EXPECT_TRUE(fo[0].legal) << fo[0].assumption;
  Schedule x = apply_one("tp-pp", outs, fo[0]);
  EXPECT_EQ(count_ops(x, CollOp::ReduceScatter), 2);
  EXPECT_EQ(count_ops(x, CollOp::AllGather), 2);
  expect_same_outputs(outs, x);
  // The receivers share no communicator to all-gather over: nothing.
  EXPECT_TRUE(find("tp-pp", tp_pp_pair(false, 8)).empty());
  // Only half the result is sent (not the replicated full activation): nothing.
  EXPECT_TRUE(find("tp-pp", tp_pp_pair(true, 4)).empty());
}

TEST(TpPp, SenderComputingOnItsOwnDataIsAdvice) {
  // A non-replicated compute between the all-reduce and the send (each rank adds its own data):
  // the copies differ, so the rewrite would change what the receivers get.
  Schedule s = tp_pp_pair(true, 8);
  for (int32_t r = 0; r < 4; ++r) s.ranks[r].outputs = {r < 2 ? "partial" : "x"};
  for (int32_t r = 0; r < 2; ++r) {
    s.add_buffer(r, "y", "float32", 8);
    auto& ops = s.ranks[r].streams[0].ops;
    int64_t next = s.next_op_id();
    ops.insert(ops.begin() + 1, make_op(next, testing::comp("add", 100, {testing::sl("x", 0, 8)},
                                                            {testing::sl("y", 0, 8)}), {}));
    ops[2].collective()->in = testing::sl("y", 0, 8);
  }
  ASSERT_EQ(validate(s), std::vector<std::string>{});
  auto fs = find("tp-pp", s, slow_links());
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_FALSE(fs[0].legal);
  EXPECT_NE(fs[0].assumption.find("not provably identical"), std::string::npos) << fs[0].assumption;
  // Marked replicated over the TP group, the same compute makes it legal.
  for (int32_t r = 0; r < 2; ++r) s.ranks[r].streams[0].ops[1].compute()->replicated = "tp0";
  fs = find("tp-pp", s, slow_links());
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_TRUE(fs[0].legal) << fs[0].assumption;
}

TEST(Presets, PipelineKeepsOutputsOnEveryPreset) {
  for (const std::string& name : preset_names()) {
    if (name == "tp-pp") continue;  // 16 ranks: covered by the per-pass tests' size budget
    Schedule s = tiny_preset(name);
    auto res = run_pipeline(s, analysis::CostModel());
    expect_same_outputs(s, res.schedule);
  }
}

}  // namespace
}  // namespace braid::fusion

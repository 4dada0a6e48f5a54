// The replay core without MPI: the sim's timing semantics against hand-computed answers, the
// dependency-respecting global order, replays stored as runs, the data check, the A/B runner on
// the sim backend (a fused schedule passes, a broken rewrite fails by rank, buffer and index),
// schedule selection, calibration probes and the fidelity report.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "analysis/cost_model.h"
#include "fusion/schedule_store.h"
#include "fusion/schedules.h"
#include "fusion/synth.h"
#include "replay/ab.h"
#include "replay/common.h"
#include "replay/fidelity.h"
#include "replay/host_calibration.h"
#include "replay/inputs.h"
#include "replay/replay_schedules.h"
#include "replay/sim.h"
#include "replay/store_run.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/test_util.h"

namespace braid::replay {
namespace {

using ::testing::HasSubstr;
using namespace braid::fusion::testing;
using namespace braid::replay::testing;
using fusion::testing::sl;

analysis::CostModel model() { return analysis::CostModel(*analysis::find_profile("h100-nvlink")); }

const OpTime& time_of(const StepRecord& s, int32_t rank, int64_t id) {
  for (const OpTime& t : s.ranks[rank])
    if (t.op_id == id) return t;
  static OpTime none;
  ADD_FAILURE() << "op " << id << " not executed on rank " << rank;
  return none;
}

TEST(Sim, TwoRankStepMatchesHandComputedTimes) {
  fusion::Schedule s = two_rank_schedule();
  const auto cm = model();
  SimResult r = simulate(s, cm);
  // fwd 1500 ns, then the all-reduce of 8 float32 on 2 ranks, then the 4-element send.
  const Ns ar = cm.collective_ns(CollOp::AllReduce, 32, 2, "world", {0, 1});
  const Ns p2p = cm.collective_ns(CollOp::Send, 16, 2, "world", {0, 1});
  for (int32_t rank : {0, 1}) {
    const auto& ops = s.ranks[rank].streams;
    const OpTime& fwd = time_of(r.step, rank, ops[0].ops[0].id);
    EXPECT_EQ(fwd.start, 0);
    EXPECT_EQ(fwd.end, 1500);
    const OpTime& delay = time_of(r.step, rank, ops[0].ops[2].id);
    EXPECT_EQ(delay.start, 1500);
    EXPECT_EQ(delay.end, 1750);
    const OpTime& wait = time_of(r.step, rank, ops[1].ops[0].id);
    EXPECT_EQ(wait.end, 1500);
    const OpTime& allreduce = time_of(r.step, rank, ops[1].ops[1].id);
    EXPECT_EQ(allreduce.start, 1500);
    EXPECT_EQ(allreduce.end, 1500 + ar);
    const OpTime& send = time_of(r.step, rank, ops[1].ops[2].id);
    EXPECT_EQ(send.end, 1500 + ar + p2p);
    EXPECT_EQ(r.step.rank_ns(rank), 1500 + ar + p2p);
  }
  EXPECT_EQ(r.step_ns(), 1500 + ar + p2p);
}

TEST(Sim, CollectiveStartsWhenTheLastMemberArrives) {
  fusion::Schedule s = allreduce_pair(false);
  s.ranks[1].streams[0].ops[0].compute()->duration_ns = 900'000;  // rank 1 is late
  const auto cm = model();
  SimResult r = simulate(s, cm);
  const Ns ar = cm.collective_ns(CollOp::AllReduce, 32, 2, "world", {0, 1});
  const int64_t id0 = s.ranks[0].streams[0].ops[1].id, id1 = s.ranks[1].streams[0].ops[1].id;
  // Rank 0 arrives at 200 us and waits; both finish together.
  EXPECT_EQ(time_of(r.step, 0, id0).start, 200'000);
  EXPECT_EQ(time_of(r.step, 0, id0).end, 900'000 + ar);
  EXPECT_EQ(time_of(r.step, 1, id1).start, 900'000);
  EXPECT_EQ(time_of(r.step, 1, id1).end, 900'000 + ar);
  EXPECT_EQ(r.step_ns(), 900'000 + ar + 100'000);
}

TEST(Sim, ComputeScaleAndOverheadApply) {
  fusion::Schedule s = allreduce_pair(false);
  SimOptions o;
  o.compute_scale = 0.5;
  o.compute_overhead_ns = 1000;
  const auto cm = model();
  const Ns ar = cm.collective_ns(CollOp::AllReduce, 32, 2, "world", {0, 1});
  EXPECT_EQ(simulate(s, cm, o).step_ns(), 100'000 + 1000 + ar + 50'000 + 1000);
}

TEST(Sim, ACollectiveKindsOwnLinkReplacesTheProfiles) {
  // A calibrated α-β for all-reduce (op_links) is used with the model's steps and wire factor.
  fusion::Schedule s = allreduce_pair(false);
  const auto cm = model();
  SimOptions o;
  o.op_links[CollOp::AllReduce] = {10'000, 2.0};
  const int64_t bytes = 32;  // 8 float32
  const analysis::Algorithm algo = cm.choose(CollOp::AllReduce, bytes, 2, "world", {0, 1});
  const Ns ar = static_cast<Ns>(
      std::llround(10'000 * analysis::latency_steps(CollOp::AllReduce, 2, algo) +
                   2.0 * analysis::wire_factor(CollOp::AllReduce, 2, algo) * bytes));
  EXPECT_EQ(simulate(s, cm, o).step_ns(), 200'000 + ar + 100'000);
  EXPECT_NE(ar, cm.collective_ns(CollOp::AllReduce, bytes, 2, "world", {0, 1}));
  // A per-element reduction cost adds per element on the wire (8 float32: wire factor · 8).
  o.reduce_ns_per_element[CollOp::AllReduce] = 500;
  const Ns gamma = static_cast<Ns>(
      std::llround(500 * analysis::wire_factor(CollOp::AllReduce, 2, algo) * bytes / 4));
  EXPECT_GT(gamma, 0);
  EXPECT_NEAR(static_cast<double>(simulate(s, cm, o).step_ns()),
              static_cast<double>(200'000 + ar + gamma + 100'000), 1);
  o.reduce_ns_per_element.clear();
  // A link fitted for the communicator's size comes first; an unprobed size takes the
  // smallest probed size above it, else the largest.
  auto with_size_link = [&](int size, double alpha) {
    SimOptions so = o;
    so.sized_links[CollOp::AllReduce][size] = {{alpha, 2.0}, 0, {}};
    return simulate(s, cm, so).step_ns();
  };
  auto expect_alpha = [&](double alpha) {
    return 200'000 + 100'000 +
           static_cast<Ns>(
               std::llround(alpha * analysis::latency_steps(CollOp::AllReduce, 2, algo) +
                            2.0 * analysis::wire_factor(CollOp::AllReduce, 2, algo) * bytes));
  };
  EXPECT_EQ(with_size_link(2, 30'000), expect_alpha(30'000));
  EXPECT_EQ(with_size_link(4, 40'000), expect_alpha(40'000));
  EXPECT_EQ(with_size_link(1, 50'000), expect_alpha(50'000));
  // Other kinds keep the profile's link.
  o.op_links.clear();
  o.op_links[CollOp::AllGather] = {10'000, 2.0};
  EXPECT_EQ(simulate(s, cm, o).step_ns(),
            200'000 + cm.collective_ns(CollOp::AllReduce, bytes, 2, "world", {0, 1}) + 100'000);
}

TEST(Sim, StepStartAndTheFirstCollectivesSkewApply) {
  // Streams start at step_start_ns; only the first collective of a rank waits start_skew_ns.
  fusion::Schedule s = allreduce_pair(true);  // reduce-scatter then all-gather
  const auto cm = model();
  SimOptions o;
  o.step_start_ns = 5'000;
  o.start_skew_ns = 7'000;
  const Ns plain = simulate(s, cm).step_ns();
  EXPECT_EQ(simulate(s, cm, o).step_ns(), plain + 5'000 + 7'000);
}

// Two 2-rank all-reduces on communicators "a" and "b": each rank computes first (group b's
// ranks `b_late` longer), then all-reduces 1024 float32.
fusion::Schedule two_groups(std::vector<int32_t> a, std::vector<int32_t> b, Ns b_late) {
  fusion::Schedule s;
  s.name = "two groups";
  s.comms.push_back({"a", a});
  s.comms.push_back({"b", b});
  for (int r = 0; r < 4; ++r) {
    const bool in_b = std::count(b.begin(), b.end(), r) > 0;
    s.add_buffer(r, "x", "float32", 1024);
    const int st = s.add_stream(r, "main");
    s.append(
        r, st,
        compute_op("fwd", 100'000 + (in_b ? b_late : 0), {sl("x", 0, 1024)}, {sl("x", 0, 1024)}));
    fusion::Collective k;
    k.op = CollOp::AllReduce;
    k.comm = in_b ? "b" : "a";
    k.dtype = "float32";
    k.count = 1024;
    k.in = sl("x", 0, 1024);
    k.out = sl("x", 0, 1024);
    k.label = "allreduce";
    s.append(r, st, k);
  }
  return s;
}

Ns end_of_allreduce(const SimResult& r, const fusion::Schedule& s, int32_t rank) {
  return time_of(r.step, rank, s.ranks[rank].streams[0].ops[1].id).end;
}

TEST(Sim, CollectivesShareTheCoresTheirMembersRunOn) {
  const auto cm = model();
  const fusion::Schedule s = two_groups({0, 1}, {2, 3}, 0);
  const Ns ar = end_of_allreduce(simulate(s, cm), s, 0) - 100'000;
  ASSERT_GT(ar, 1000);
  SimOptions o;
  // Four cores: one rank each, nothing shared.
  o.host_cores = 4;
  EXPECT_EQ(end_of_allreduce(simulate(s, cm, o), s, 0), 100'000 + ar);
  // Two cores: ranks 0 and 2 on core 0, 1 and 3 on core 1; both groups run at half rate.
  o.host_cores = 2;
  SimResult r = simulate(s, cm, o);
  for (int32_t rank = 0; rank < 4; ++rank)
    EXPECT_EQ(end_of_allreduce(r, s, rank), 100'000 + 2 * ar);
  // One core: four member streams on it.
  o.host_cores = 1;
  EXPECT_EQ(end_of_allreduce(simulate(s, cm, o), s, 3), 100'000 + 4 * ar);
  // Both members of one group on one core share it even when it runs alone.
  const fusion::Schedule same_core = two_groups({0, 2}, {1, 3}, 10 * ar);
  o.host_cores = 2;
  r = simulate(same_core, cm, o);
  EXPECT_EQ(end_of_allreduce(r, same_core, 0), 100'000 + 2 * ar);
  EXPECT_EQ(end_of_allreduce(r, same_core, 1), 100'000 + 10 * ar + 2 * ar);
}

TEST(Sim, ACollectiveThatStartsLaterSlowsTheRunningOneFromThen) {
  const auto cm = model();
  const fusion::Schedule plain = two_groups({0, 1}, {2, 3}, 0);
  const Ns ar = end_of_allreduce(simulate(plain, cm), plain, 0) - 100'000;
  // Group b starts half-way through a's all-reduce: a runs alone for ar/2, then both at half
  // rate until a ends at 1.5 ar; b, half done then, ends alone at 2 ar.
  const fusion::Schedule s = two_groups({0, 1}, {2, 3}, ar / 2);
  SimOptions o;
  o.host_cores = 2;
  const SimResult r = simulate(s, cm, o);
  const double a_end = 100'000 + 1.5 * static_cast<double>(ar);
  EXPECT_NEAR(static_cast<double>(end_of_allreduce(r, s, 0)), a_end, 2);
  EXPECT_NEAR(static_cast<double>(end_of_allreduce(r, s, 2)), 100'000 + 2.0 * ar, 2);
  // Each member's op still spans from its own arrival.
  EXPECT_EQ(time_of(r.step, 2, s.ranks[2].streams[0].ops[1].id).start, 100'000 + ar / 2);
  // Without sharing both take ar.
  EXPECT_EQ(end_of_allreduce(simulate(s, cm), s, 2), 100'000 + ar / 2 + ar);
}

TEST(Sim, AMemberWaitingForItsPeersSpinsForItsWindow) {
  const auto cm = model();
  fusion::Schedule s = two_groups({0, 1}, {2, 3}, 0);
  const Ns ar = end_of_allreduce(simulate(s, cm), s, 0) - 100'000;
  // Rank 3 arrives ar late: rank 2 (core 0, beside rank 0 of group a) waits for it from 100 us.
  s.ranks[3].streams[0].ops[0].compute()->duration_ns += ar;
  SimOptions o;
  o.host_cores = 2;
  // Not spinning: a runs alone and ends as b starts.
  EXPECT_EQ(end_of_allreduce(simulate(s, cm, o), s, 0), 100'000 + ar);
  // Spinning the whole wait: a runs at half rate until b starts (half done), then shares both
  // cores with b: it ends at 2 ar, and b, half done then, at 2.5 ar.
  o.wait_spin_ns = 10 * ar;
  SimResult r = simulate(s, cm, o);
  EXPECT_NEAR(static_cast<double>(end_of_allreduce(r, s, 0)), 100'000 + 2.0 * ar, 2);
  EXPECT_NEAR(static_cast<double>(end_of_allreduce(r, s, 3)), 100'000 + 2.5 * ar, 2);
  // Spinning for ar/2: a is a quarter done then, three quarters when b starts at ar, and ends
  // at 1.5 ar sharing the cores.
  o.wait_spin_ns = ar / 2;
  r = simulate(s, cm, o);
  EXPECT_NEAR(static_cast<double>(end_of_allreduce(r, s, 0)), 100'000 + 1.5 * ar, 3);
}

TEST(Sim, TopologyDecidesTheLink) {
  // The same all-reduce within a node and across nodes: h100-nvlink packs 8 ranks per node.
  fusion::Schedule a = allreduce_pair(false, 2), b = allreduce_pair(false, 16, 64);
  const auto cm = model();
  const auto& intra = cm.profile().intra_node;
  const auto& inter = cm.profile().inter_node;
  EXPECT_EQ(cm.link_for("", {0, 1}).alpha_ns, intra.latency_ns);
  EXPECT_EQ(cm.link_for("", b.comms[0].ranks).alpha_ns, inter.latency_ns);
  const Ns ar16 = cm.collective_ns(CollOp::AllReduce, 64 * 4, 16, "world", b.comms[0].ranks);
  EXPECT_EQ(simulate(b, cm).step_ns(), 300'000 + ar16);
}

TEST(Sim, DeadlockingSchedulesAreRejected) {
  fusion::Schedule s = allreduce_pair(false, 2);
  // Rank 1 waits for an event nobody records.
  s.ranks[1].streams[0].ops.insert(s.ranks[1].streams[0].ops.begin(),
                                   fusion::Op{900, fusion::Wait{"never"}, {}});
  try {
    simulate(s, model());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot be replayed"));
  }
}

// global_order is the order in which a simulation with every cost zero completes the ops (what
// it was computed as before): the same on every preset, baseline and fused forms, and at the
// preset's own shape.
TEST(Sim, GlobalOrderIsTheZeroCostSimulationsOrder) {
  analysis::HardwareProfile zero = analysis::default_profile();
  zero.intra_node = {"none", 0, 0};
  zero.inter_node = {"none", 0, 0};
  SimOptions o;
  o.compute_scale = 0;
  auto same = [&](const std::string& what, const fusion::Schedule& s) {
    const fusion::Matching m = checked_matching(s);
    const std::vector<fusion::OpRef> order = global_order(s, m);
    const std::vector<fusion::OpRef> sim = simulate(s, m, analysis::CostModel(zero), o).order;
    ASSERT_EQ(order.size(), s.op_count()) << what;
    ASSERT_EQ(order.size(), sim.size()) << what;
    for (size_t i = 0; i < order.size(); ++i)
      ASSERT_TRUE(order[i] == sim[i]) << what << ": op " << i << " of the order differs";
  };
  int schedules = 0;
  for (const std::string& name : fusion::preset_names()) {
    same(name, synth_tiny(name));
    const fusion::Preset p = fusion::preset(name);
    same(name + " (preset shape)", fusion::synthesize(p.model, p.layout, model()));
    schedules += 2;
  }
  for (const Pair& pair : fused_pairs(fusion::preset_names())) {
    same(pair.what, pair.fused);
    ++schedules;
  }
  EXPECT_GT(schedules, 2 * static_cast<int>(fusion::preset_names().size()));
}

TEST(Sim, GlobalOrderRespectsStreamsEventsAndCollectives) {
  fusion::Schedule s = synth_tiny("pp-sp");
  fusion::Matching m = checked_matching(s);
  std::vector<fusion::OpRef> order = global_order(s, m);
  EXPECT_EQ(order.size(), s.op_count());
  std::map<int64_t, size_t> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[s.op(order[i]).id] = i;
  EXPECT_EQ(pos.size(), order.size());
  for (const auto& rs : s.ranks)
    for (const auto& st : rs.streams)
      for (size_t i = 1; i < st.ops.size(); ++i)
        EXPECT_LT(pos[st.ops[i - 1].id], pos[st.ops[i].id]);
  // Every record comes before each wait on its event.
  for (const auto& rs : s.ranks) {
    std::map<std::string, size_t> rec;
    for (const auto& st : rs.streams)
      for (const auto& op : st.ops)
        if (op.record()) rec[op.record()->event] = pos[op.id];
    for (const auto& st : rs.streams)
      for (const auto& op : st.ops)
        if (op.wait()) {
          EXPECT_LT(rec.at(op.wait()->event), pos[op.id]);
        }
  }
}

TEST(Sim, ExecutorRepeatsTheSimulationAndUsesTheInterpreterForData) {
  fusion::Schedule s = four_rank_schedule();
  SimExecutor ex(model());
  ReplayOptions o;
  o.data = DataMode::Check;
  auto p = ex.prepare(s, o);
  p->run_step(false);
  p->run_step(true);
  p->run_step(true);
  ReplayResult r = p->collect();
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.kind, RunKind::Simulated);
  EXPECT_EQ(r.steps[0].step_ns(), simulate(s, model()).step_ns());
  EXPECT_EQ(p->buffers(), fusion::interpret(s).buffers);
}

TEST(Store, ReplayBecomesARunWithKernelsCollectivesStreamsAndSteps) {
  test::TempDir dir;
  const std::string path = dir.file("job.braid");
  fusion::Schedule s = two_rank_schedule();
  const int64_t id = fusion::store_schedule(path, s, -1, "[]", /*create=*/true);
  SimExecutor ex(model());
  auto p = ex.prepare(s, {});
  p->run_step(true);
  p->run_step(true);
  ReplayResult r = p->collect();
  auto ids = store_runs(path, {&s}, {&r}, {RunDescription{path, "test replay", id}});
  ASSERT_EQ(ids.size(), 1u);

  TraceReader reader(path);
  auto runs = reader.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].kind, RunKind::Simulated);
  EXPECT_EQ(runs[0].schedule_id, id);
  EXPECT_EQ(runs[0].backend, "sim");
  EXPECT_EQ(reader.ranks(ids[0]).size(), 2u);
  EXPECT_EQ(reader.streams(ids[0]).size(), 4u);
  EXPECT_EQ(reader.steps(ids[0]).size(), 4u);  // 2 steps x 2 ranks
  int kernels = 0, compute = 0;
  reader.kernels(ids[0], [&](const Kernel& k) {
    ++kernels;
    if (reader.str(k.name) == "fwd") {
      ++compute;
      EXPECT_EQ(k.end - k.start, 1500);
    }
    return true;
  });
  EXPECT_EQ(compute, 4);      // fwd on 2 ranks x 2 steps
  EXPECT_EQ(kernels, 4 + 8);  // + all-reduce and send/recv kernels
  std::multiset<std::pair<std::string, int64_t>> seqs;
  int colls = 0;
  reader.collectives(ids[0], [&](const Collective& c) {
    ++colls;
    EXPECT_EQ(reader.str(c.comm), "world");
    if (c.op == CollOp::AllReduce) {
      EXPECT_EQ(c.bytes, 32);
      EXPECT_EQ(reader.str(reader.str(c.dtype) == "" ? 0 : c.dtype), "float32");
    }
    seqs.insert({std::string(to_string(c.op)), c.seq});
    return true;
  });
  EXPECT_EQ(colls, 8);
  // Steps continue the per-communicator numbering: the all-reduce is seq 0, then 1 + its step.
  EXPECT_EQ(seqs.count({"allreduce", 0}), 2u);
  EXPECT_EQ(seqs.count({"allreduce", 1}), 2u);
  // The run's steps lie end to end.
  auto steps = reader.steps(ids[0]);
  Ns first_end = 0, second_start = -1;
  for (const Step& st : steps) {
    if (st.step == 0) first_end = std::max(first_end, st.end);
    if (st.step == 1) second_start = st.start;
  }
  EXPECT_GT(second_start, first_end);
}

TEST(DataCheck, ReportsMismatchesByRankBufferAndIndex) {
  fusion::RankBuffers a{{"g", {1, 2, 3, 4}}, {"scratch", {0}}}, b = a;
  b["g"][2] = 99;
  b["scratch"][0] = 5;
  DataCheck d = compare_exact(3, a, b, {"g"});
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.mismatches, 1);
  ASSERT_EQ(d.first.size(), 1u);
  EXPECT_EQ(d.first[0].rank, 3);
  EXPECT_EQ(d.first[0].buffer, "g");
  EXPECT_EQ(d.first[0].index, 2);
  EXPECT_EQ(d.first[0].expected, 3);
  EXPECT_EQ(d.first[0].actual, 99);
  EXPECT_THAT(d.lines("baseline", "fused")[1], HasSubstr("rank 3 buffer 'g' index 2"));
  EXPECT_TRUE(compare_exact(3, a, b, {"g"}).mismatches == 1);
  DataCheck missing = compare_exact(0, a, b, {"nope"});
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.problems[0], HasSubstr("'nope' is missing"));
}

TEST(DataCheck, FloatReductionsWithinToleranceCopiesBitwise) {
  FloatBuffers e{{"sum", {1.0, 2.0}}, {"idx", {7, 8}}},
      a{{"sum", {1.0 + 1e-9, 2.0}}, {"idx", {7, 8}}};
  std::map<std::string, std::string> dt{{"sum", "float32"}, {"idx", "int32"}};
  EXPECT_TRUE(compare_float(0, e, a, {"sum", "idx"}, dt, {}).ok());
  a["sum"][1] = 2.1;
  a["idx"][0] = 7.0000001;
  DataCheck d = compare_float(0, e, a, {"sum", "idx"}, dt, {});
  EXPECT_EQ(d.mismatches, 2);
}

TEST(DataCheck, PreservedBuffersFollowTheOutputs) {
  fusion::Schedule a = allreduce_pair(false), b = allreduce_pair(true);
  EXPECT_EQ(preserved_buffers(a, b, 1), (std::vector<std::string>{"g", "y"}));
  b.ranks[1].outputs.clear();
  EXPECT_EQ(preserved_buffers(a, b, 1), (std::vector<std::string>{"g", "y"}));
  a.ranks[1].outputs.clear();
  EXPECT_EQ(preserved_buffers(a, b, 1), (std::vector<std::string>{"x", "g", "y"}));
}

AbOptions fast_ab() {
  AbOptions o;
  o.steps = 3;
  o.warmup = 1;
  o.model = model();
  return o;
}

TEST(Ab, DecomposedAllReducePassesTheDataCheckOnSim) {
  SimExecutor ex(model());
  fusion::Schedule a = allreduce_pair(false, 4, 16), b = allreduce_pair(true, 4, 16);
  AbReport r = run_ab(ex, a, b, fast_ab());
  EXPECT_TRUE(r.data_checked);
  EXPECT_TRUE(r.data_ok()) << r.data.lines("baseline", "fused")[0];
  EXPECT_EQ(r.data.buffers, 4 * 2);
  EXPECT_EQ(r.data.elements, 4 * 32);
  EXPECT_EQ(r.baseline_ns.size(), 3u);
  EXPECT_EQ(r.baseline_median, simulate(a, model()).step_ns());
  EXPECT_EQ(r.fused_median, simulate(b, model()).step_ns());
  EXPECT_DOUBLE_EQ(r.speedup, double(r.baseline_median) / double(r.fused_median));
  EXPECT_EQ(r.predicted_saving_ns(), r.measured_saving_ns());  // the sim predicts itself
}

TEST(Ab, BrokenRewriteFailsTheDataCheckByRankBufferAndIndex) {
  SimExecutor ex(model());
  fusion::Schedule a = allreduce_pair(false, 2, 8), b = allreduce_pair(true, 2, 8);
  // Rank 1 reduce-scatters its input instead of its gradient: valid, but wrong.
  b.ranks[1].streams[0].ops[1].collective()->in = sl("x", 0, 8);
  ASSERT_TRUE(fusion::validate(b).empty());
  AbReport r = run_ab(ex, a, b, fast_ab());
  EXPECT_FALSE(r.data_ok());
  EXPECT_GT(r.data.mismatches, 0);
  ASSERT_FALSE(r.data.first.empty());
  EXPECT_EQ(r.data.first[0].buffer, "g");
  EXPECT_TRUE(r.oracle_fused.ok());  // the replay itself is faithful to the interpreter
  bool listed = false;
  for (const std::string& l : r.lines()) listed |= l.find("buffer 'g' index") != std::string::npos;
  EXPECT_TRUE(listed);
}

TEST(Ab, FusedPresetsPassAndTheirBrokenRewritesFail) {
  SimExecutor ex(analysis::CostModel(*analysis::find_profile("cpu-shm")));
  for (const Pair& p : fused_pairs({"tp-sp", "pp-sp"})) {
    SCOPED_TRACE(p.what);
    AbReport r = run_ab(ex, p.baseline, p.fused, fast_ab());
    EXPECT_TRUE(r.data_ok()) << r.data.lines("baseline", "fused")[0];
    EXPECT_GT(r.data.elements, 0);
    int32_t rank = -1;
    fusion::Schedule broken = broken_rewrite(p.fused, &rank);
    ASSERT_FALSE(broken.ranks.empty()) << "no corrupting swap found";
    AbReport bad = run_ab(ex, p.baseline, broken, fast_ab());
    EXPECT_FALSE(bad.data.ok());
  }
}

TEST(Inputs, StoredSchedulesPickTheNewestFusedAndItsParent) {
  test::TempDir dir;
  const std::string path = dir.file("job.braid");
  EXPECT_THROW(load_ab_pair(path), Error);  // no file
  const int64_t a = fusion::store_schedule(path, allreduce_pair(false), -1, "[]", true);
  try {
    load_ab_pair(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no fused schedule"));
  }
  const int64_t b = fusion::store_schedule(path, allreduce_pair(true), a);
  const int64_t c = fusion::store_schedule(path, two_rank_schedule());
  auto [base, fused] = load_ab_pair(path);
  EXPECT_EQ(base.stored.id, a);
  EXPECT_EQ(fused.stored.id, b);
  EXPECT_EQ(fused.schedule, allreduce_pair(true));
  EXPECT_EQ(load_schedule_input(path).stored.id, c);
  EXPECT_EQ(load_schedule_input(path, a).schedule, allreduce_pair(false));
  EXPECT_THROW(load_schedule_input(path, 99), Error);
  auto [b2, f2] = load_ab_pair(path, c, b);
  EXPECT_EQ(b2.stored.id, c);
  // A JSON schedule file is read as such.
  const std::string json = dir.file("s.json");
  fusion::save_schedule(two_rank_schedule(), json);
  ScheduleInput in = load_schedule_input(json);
  EXPECT_FALSE(in.in_store);
  EXPECT_EQ(in.schedule, two_rank_schedule());
}

TEST(Calibrate, ProbesAreValidAndCoverTheOps) {
  CalibrationOptions o;
  std::set<CollOp> ops;
  int compute = 0;
  int workloads = 0;
  for (const Probe& p : calibration_probes(4, o)) {
    EXPECT_TRUE(fusion::validate(p.schedule).empty()) << p.name;
    ops.insert(p.op);
    workloads += p.workload;
    compute += p.op == CollOp::Unknown && !p.workload;
    if (p.op == CollOp::Unknown || p.op == CollOp::Barrier) continue;
    EXPECT_EQ(simulate(p.schedule, model()).step_ns(),
              p.count * model().collective_ns(p.op, p.bytes, p.op == CollOp::Send ? 2 : p.group))
        << p.name;
  }
  EXPECT_EQ(
      ops, (std::set<CollOp>{CollOp::Unknown, CollOp::Barrier, CollOp::AllReduce, CollOp::AllGather,
                             CollOp::ReduceScatter, CollOp::AllToAll, CollOp::Send}));
  EXPECT_EQ(compute, 8);  // two durations on each side of kShortestSleepNs, two chain lengths
  EXPECT_EQ(workloads, 1);
  // Reducing kinds are probed in bfloat16 too, at every size; nothing else is.
  std::map<CollOp, int> bf16;
  for (const Probe& p : calibration_probes(4, o))
    if (p.esize == 2) {
      ++bf16[p.op];
      EXPECT_EQ(p.schedule.ranks[0].buffers[0].dtype, "bfloat16") << p.name;
    }
  const int per_kind = static_cast<int>(o.sizes.size());
  EXPECT_EQ(bf16, (std::map<CollOp, int>{{CollOp::AllReduce, per_kind},
                                         {CollOp::ReduceScatter, per_kind}}));
  for (const Probe& p : calibration_probes(16, o)) EXPECT_TRUE(p.group == 16 || p.group == 0);
  // Sharing the cores, every kind but send is probed on the world and on each power of two
  // below it.
  // (The workload measures in-situ costs; with shared cores the sim models the sharing itself.)
  o.share_cores = true;
  std::map<CollOp, std::set<int>> groups;
  for (const Probe& p : calibration_probes(16, o)) {
    EXPECT_FALSE(p.workload);
    if (p.op != CollOp::Unknown && p.op != CollOp::Barrier) groups[p.op].insert(p.group);
  }
  EXPECT_EQ(groups[CollOp::AllToAll], (std::set<int>{2, 4, 8, 16}));
  EXPECT_EQ(groups[CollOp::Send], (std::set<int>{16}));
}

// The calibration workload: every kind at five sizes on contiguous and strided groups of each
// size and the world, each after a compute op, point-to-point transfers between the halves, and
// an all-reduce on a second stream; it validates for any world size.
TEST(Calibrate, WorkloadHasEveryKindOnEveryLayout) {
  for (int n : {2, 3, 6, 8, 16}) {
    const fusion::Schedule w = calibration_workload(n);
    ASSERT_TRUE(fusion::validate(w).empty()) << n << ": " << fusion::validate(w)[0];
    const fusion::Matching m = fusion::match_schedule_collectives(w);
    std::map<CollOp, std::set<int>> sizes;
    std::map<std::pair<CollOp, int>, std::set<int64_t>> bytes;
    for (const fusion::MatchGroup& g : m.groups) {
      const fusion::Collective& c = *w.op(g.members[0]).collective();
      const int t = g.op == CollOp::Send ? 2 : static_cast<int>(w.find_comm(g.comm)->ranks.size());
      sizes[g.op].insert(t);
      bytes[{g.op, t}].insert(fusion::collective_bytes(w, c));
    }
    std::set<int> expect{n};
    for (int g = 2; g < n; g *= 2)
      if (n % g == 0) expect.insert(g);
    for (CollOp op : {CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllToAll}) {
      EXPECT_EQ(sizes[op], expect) << n << " " << to_string(op);
      for (int t : expect)
        EXPECT_EQ(bytes[std::make_pair(op, t)],
                  (std::set<int64_t>{(2 << 10) / t * t * 2, (32 << 10) / t * t * 2,
                                     (128 << 10) / t * t * 2, (512 << 10) / t * t * 2,
                                     (2 << 20) / t * t * 2}))
            << n << " " << to_string(op) << " " << t;
    }
    EXPECT_TRUE(sizes[CollOp::AllReduce].count(n)) << n;
    EXPECT_EQ(sizes[CollOp::Send], (std::set<int>{2})) << n;  // between the halves
    // Every rank has the main stream and the overlapping all-reduce's stream.
    for (const auto& rs : w.ranks) EXPECT_EQ(rs.streams.size(), 2u);
  }
}

// Calibrated against the sim with a known link, the workload's fit gives back the sim's α and β
// for every kind and communicator size (its transfers cost exactly the α-β time), and the sim
// then prefers these per-size links.
TEST(Calibrate, WorkloadFitRecoversTheLinkPerKindAndSize) {
  analysis::HardwareProfile p = *analysis::find_profile("cpu-shm");
  p.gpus_per_node = 8;
  p.intra_node.latency_ns = 3000;
  p.intra_node.bandwidth_gbps = 4.0;  // 0.25 ns per byte
  SimExecutor sim{analysis::CostModel(p), SimOptions{}};
  CalibrationOptions co;
  co.steps = 1;
  co.warmup = 0;
  const Calibration c = calibrate(sim, 8, co);
  for (CollOp op : {CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::AllToAll,
                    CollOp::Send}) {
    ASSERT_TRUE(c.sized_links.count(op)) << to_string(op);
    for (const auto& [t, l] : c.sized_links.at(op)) {
      EXPECT_NEAR(l.link.alpha_ns, 3000, 30) << to_string(op) << " " << t;
      EXPECT_NEAR(l.link.ns_per_byte, 0.25, 0.0025) << to_string(op) << " " << t;
    }
  }
  EXPECT_EQ(c.sized_links.at(CollOp::AllGather).size(), 3u);  // 2, 4 and 8 ranks
  EXPECT_EQ(c.sized_links.at(CollOp::Send).size(), 1u);
  EXPECT_LT(c.mean_rel_error, 0.01);
  int workload_samples = 0;
  for (const CalibrationSample& s : c.samples)
    if (s.probe.rfind("workload ", 0) == 0) {
      ++workload_samples;
      EXPECT_NEAR(static_cast<double>(s.predicted_ns), static_cast<double>(s.measured_ns),
                  0.01 * static_cast<double>(s.measured_ns) + 2)
          << s.probe;
    }
  EXPECT_GE(workload_samples, 4 * 3 * 5);
  EXPECT_EQ(c.sim_options().sized_links.size(), c.sized_links.size());
  EXPECT_NEAR(c.sibling_stagger, 0, 1e-3);  // this sim's siblings end together
  // A sim whose siblings end staggered by ±30%: the workload measures it.
  SimOptions staggered;
  staggered.sibling_stagger = 0.3;
  SimExecutor sim2{analysis::CostModel(p), staggered};
  const Calibration c2 = calibrate(sim2, 8, co);
  EXPECT_NEAR(c2.sibling_stagger, 0.3, 0.01);
  EXPECT_DOUBLE_EQ(c2.sim_options().sibling_stagger, c2.sibling_stagger);
}

// The workload fit on hand-made timings: transfers are timed from the last member's arrival;
// one that overlaps a collective of another stream on a member is left out.
TEST(Calibrate, WorkloadFitTimesFromTheLastArrivalAndSkipsOverlaps) {
  fusion::Schedule w = calibration_workload(2);
  const fusion::Matching m = fusion::match_schedule_collectives(w);
  analysis::HardwareProfile p = *analysis::find_profile("cpu-shm");
  const analysis::CostModel model(p);
  // Every 2-rank collective: rank 1 arrives 1 ms late; the transfer is 2 ns per byte after it.
  StepRecord step;
  step.ranks.resize(2);
  Ns t = 0;
  for (const fusion::MatchGroup& g : m.groups) {
    const fusion::Collective& c = *w.op(g.members[0]).collective();
    const double wire =
        analysis::wire_factor(cost_op(g.op), 2,
                              model.choose(cost_op(g.op), fusion::collective_bytes(w, c), 2)) *
        static_cast<double>(fusion::collective_bytes(w, c));
    const Ns transfer = static_cast<Ns>(2.0 * wire);
    for (size_t k = 0; k < g.members.size(); ++k) {
      const fusion::OpRef mem = g.members[k];
      const Ns arrive = t + (mem.rank == 1 ? 1'000'000 : 0);
      step.ranks[static_cast<size_t>(mem.rank)].push_back(
          {w.op(mem).id, mem.stream, arrive, t + 1'000'000 + transfer});
    }
    t += 10'000'000;
  }
  std::vector<CalibrationSample> samples;
  auto links = fit_workload_links(w, {step}, model, &samples);
  ASSERT_TRUE(links.count(CollOp::AllGather));
  EXPECT_NEAR(links.at(CollOp::AllGather).at(2).link.ns_per_byte, 2.0, 0.01);
  EXPECT_NEAR(links.at(CollOp::AllGather).at(2).link.alpha_ns, 0, 50);
  // A straight line fits exactly: no corrections left.
  for (const auto& [b, c] : links.at(CollOp::AllGather).at(2).corrections)
    EXPECT_NEAR(c, 0, 2) << b;
  // Now the overlapping all-reduce (stream 1) spans every main-stream collective: nothing is
  // left to fit.
  for (auto& rank : step.ranks)
    for (OpTime& o : rank)
      if (o.stream == 1) {
        o.start = 0;
        o.end = t;
      }
  EXPECT_TRUE(fit_workload_links(w, {step}, model).empty());
}

// The sim as a calibration target that shares 2 cores among its ranks, as an oversubscribed
// mpi job does, and reports `reported` as its host's cores.
class SharingSim : public SimExecutor {
 public:
  SharingSim(const analysis::HardwareProfile& p, int reported, double allreduce_ns_per_element = 0)
      : SimExecutor(analysis::CostModel(p),
                    [&] {
                      SimOptions o;
                      o.host_cores = 2;
                      if (allreduce_ns_per_element > 0) {
                        o.op_links[CollOp::AllReduce] = analysis::LinkCost::of(p.intra_node);
                        o.reduce_ns_per_element[CollOp::AllReduce] = allreduce_ns_per_element;
                      }
                      return o;
                    }()),
        reported_(reported) {}
  int host_cores() const override { return reported_; }

 private:
  int reported_;
};

TEST(Calibrate, OnASharedHostTheFitIsPerDedicatedCore) {
  // A sim with a known link and processor sharing on 2 cores, calibrated with 8 ranks: every
  // probe collective runs 4 ranks per core, and the fit must give back the dedicated link.
  analysis::HardwareProfile p = *analysis::find_profile("cpu-shm");
  p.gpus_per_node = 8;
  p.intra_node.latency_ns = 5000;
  p.intra_node.bandwidth_gbps = 2.0;  // 0.5 ns per byte
  CalibrationOptions co;
  co.steps = 1;
  co.warmup = 0;
  co.share_cores = true;
  SharingSim shared(p, 2);
  const Calibration c = calibrate(shared, 8, co);
  EXPECT_EQ(c.host_cores, 2);
  EXPECT_EQ(c.sim_options().host_cores, 2);
  EXPECT_EQ(c.op_links.size(), 5u);
  for (const auto& [op, link] : c.op_links) {
    EXPECT_NEAR(link.alpha_ns, 5000, 50) << to_string(op);
    EXPECT_NEAR(link.ns_per_byte, 0.5, 0.005) << to_string(op);
  }
  EXPECT_NEAR(c.profile.intra_node.latency_ns, 5000, 50);
  EXPECT_LT(c.mean_rel_error, 0.01);
  // So does each communicator size's own fit (the 2-rank group runs one rank per core).
  for (int g : {2, 4, 8}) {
    EXPECT_NEAR(c.sized_links.at(CollOp::AllGather).at(g).link.alpha_ns, 5000, 50) << g;
    EXPECT_NEAR(c.sized_links.at(CollOp::AllGather).at(g).link.ns_per_byte, 0.5, 0.005) << g;
  }
  // No per-element cost in this sim; one of 2 ns per all-reduced element is found again, with
  // the same per-byte link (the bfloat16 probes carry twice the elements per byte).
  for (const auto& [op, g] : c.reduce_ns_per_element) EXPECT_NEAR(g, 0, 0.01) << to_string(op);
  SharingSim reducing(p, 2, 2.0);
  const Calibration r = calibrate(reducing, 8, co);
  EXPECT_NEAR(r.reduce_ns_per_element.at(CollOp::AllReduce), 2.0, 0.02);
  EXPECT_NEAR(r.op_links.at(CollOp::AllReduce).ns_per_byte, 0.5, 0.005);
  EXPECT_NEAR(r.reduce_ns_per_element.at(CollOp::ReduceScatter), 0, 0.01);
  // Without sharing the cores (or had the host's cores not been known) the world probes' times
  // stand for every collective: a link 4 times slower, on all ranks busy.
  co.share_cores = false;
  co.workload = false;  // the world probes alone (the workload's links: tests below)
  const Calibration u = calibrate(shared, 8, co);
  EXPECT_EQ(u.host_cores, 0);
  EXPECT_EQ(u.sim_options().host_cores, 0);
  EXPECT_TRUE(u.sized_links.empty());  // the world's fit is op_links
  EXPECT_NEAR(u.op_links.at(CollOp::AllReduce).alpha_ns, 4 * 5000, 200);
  EXPECT_NEAR(u.op_links.at(CollOp::AllReduce).ns_per_byte, 4 * 0.5, 0.02);
}

// Measured points correct a per-size link: linear between two sizes, the nearest one's outside,
// and the sim adds them to the line (never below 0).
TEST(Calibrate, LinkCorrectionsInterpolateBetweenMeasuredSizes) {
  SizedLink l{{1000, 0.5}, 0, {{4096, 3000}, {65536, -1000}, {1 << 20, 0}}};
  EXPECT_DOUBLE_EQ(l.correction_ns(1), 3000);
  EXPECT_DOUBLE_EQ(l.correction_ns(4096), 3000);
  EXPECT_DOUBLE_EQ(l.correction_ns((4096 + 65536) / 2), 1000);
  EXPECT_DOUBLE_EQ(l.correction_ns(65536), -1000);
  EXPECT_DOUBLE_EQ(l.correction_ns(4 << 20), 0);
  EXPECT_DOUBLE_EQ(SizedLink{}.correction_ns(4096), 0);
  // A 2-rank all-gather of 4096 B: α 1000 + 0.5 ns/B · 2048 wire bytes + 3000.
  SimOptions so;
  so.sized_links[CollOp::AllGather][2] = l;
  analysis::HardwareProfile p = *analysis::find_profile("cpu-shm");
  fusion::Schedule s;
  s.comms.push_back({"w", {0, 1}});
  for (int r = 0; r < 2; ++r) {
    s.add_buffer(r, "a", "float32", 1024);
    s.add_stream(r, "main");
    fusion::Collective c;
    c.op = CollOp::AllGather;
    c.comm = "w";
    c.dtype = "float32";
    c.count = 512;
    c.in = {"a", 0, 512};
    c.out = {"a", 0, 1024};
    s.append(r, 0, c);
  }
  EXPECT_EQ(simulate(s, analysis::CostModel(p), so).step.step_ns(), 1000 + 1024 + 3000);
  // A correction below the line's cost gives 0, not a negative time.
  so.sized_links[CollOp::AllGather][2].corrections = {{4096, -1e9}};
  EXPECT_EQ(simulate(s, analysis::CostModel(p), so).step.step_ns(), 0);
}

// A calibration file with a malformed link is refused with the path of the bad entry, not
// half-loaded.
TEST(Calibrate, MalformedLinksInACalibrationFileAreRefused) {
  test::TempDir dir;
  Calibration c;
  c.profile = *analysis::find_profile("cpu-shm");
  c.compute_overhead_ns = 1;
  const std::string good = c.to_json();
  const std::string path = dir.file("cal.json");
  auto load_with = [&](const std::string& links) -> std::string {
    std::string j = good;
    const size_t at = j.find("\"op_links\": {}");
    EXPECT_NE(at, std::string::npos);
    j.replace(at, std::string("\"op_links\": {}").size(), "\"op_links\": {" + links + "}");
    FILE* f = fopen(path.c_str(), "w");
    fwrite(j.data(), 1, j.size(), f);
    fclose(f);
    try {
      load_sim_profile(path);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::BadFormat);
      return e.what();
    }
    return "loaded";
  };
  const std::string link = "\"alpha_ns\": 1, \"ns_per_byte\": 0.5";
  EXPECT_EQ(load_with("\"allgather\": {" + link + ", \"by_ranks\": {\"2\": {" + link +
                      ", \"corrections\": [[4096, 10], [65536, -5]]}}}"),
            "loaded");
  EXPECT_THAT(load_with("\"allgather\": {\"alpha_ns\": 1}"),
              HasSubstr("replay.op_links.allgather: expected a collective with alpha_ns"));
  EXPECT_THAT(load_with("\"allgather\": {" + link + ", \"by_ranks\": {\"two\": {" + link + "}}}"),
              HasSubstr("replay.op_links.allgather.by_ranks.two: expected a rank count"));
  EXPECT_THAT(load_with("\"allgather\": {" + link + ", \"by_ranks\": {\"2\": {" + link +
                        ", \"corrections\": [[4096]]}}}"),
              HasSubstr("by_ranks.2.corrections: expected [bytes, ns] pairs"));
  EXPECT_THAT(load_with("\"allgather\": {" + link + ", \"by_ranks\": {\"2\": {" + link +
                        ", \"corrections\": [[65536, 1], [4096, 2]]}}}"),
              HasSubstr("by increasing bytes"));
}

// Sibling groups: the same collective on each communicator of a dimension.
TEST(Sim, SiblingGroupsEndStaggeredAroundTheirCost) {
  fusion::MatchGroup a{CollOp::AllGather, "tp.pp0.dp0", 3, {{0, 0, 1}, {1, 0, 1}}};
  fusion::MatchGroup b = a;
  b.comm = "tp.pp0.dp3";
  EXPECT_EQ(sibling_key(a), sibling_key(b));
  b.seq = 4;
  EXPECT_NE(sibling_key(a), sibling_key(b));  // another position on the communicator
  b = a;
  b.members.push_back({2, 0, 1});
  EXPECT_NE(sibling_key(a), sibling_key(b));  // another size
  b = a;
  b.op = CollOp::Send;
  EXPECT_EQ(sibling_key(b), "");
  // Four 2-rank all-gathers on g0..g3, then one all-reduce of all 8 ranks: with a stagger of
  // 0.5 the siblings cost 0.5, 0.83, 1.17 and 1.5 times their cost, and the all-reduce waits
  // for the last.
  fusion::Schedule s;
  for (int k = 0; k < 4; ++k) s.comms.push_back({"g" + std::to_string(k), {2 * k, 2 * k + 1}});
  s.comms.push_back({"world", {0, 1, 2, 3, 4, 5, 6, 7}});
  for (int r = 0; r < 8; ++r) {
    s.add_buffer(r, "a", "float32", 1 << 16);
    s.add_stream(r, "main");
    fusion::Collective ag;
    ag.op = CollOp::AllGather;
    ag.comm = "g" + std::to_string(r / 2);
    ag.dtype = "float32";
    ag.count = 1 << 15;
    ag.in = {"a", 0, 1 << 15};
    ag.out = {"a", 0, 1 << 16};
    s.append(r, 0, ag);
    fusion::Collective ar = ag;
    ar.op = CollOp::AllReduce;
    ar.comm = "world";
    ar.count = 16;
    ar.in = ar.out = {"a", 0, 16};
    s.append(r, 0, ar);
  }
  analysis::HardwareProfile p = *analysis::find_profile("cpu-shm");
  p.gpus_per_node = 8;
  const analysis::CostModel cm(p);
  SimOptions so;
  const Ns ag = cm.collective_ns(CollOp::AllGather, 1 << 18, 2);
  const Ns ar = cm.collective_ns(CollOp::AllReduce, 64, 8);
  EXPECT_EQ(simulate(s, cm, so).step.step_ns(), ag + ar);
  so.sibling_stagger = 0.5;
  const SimResult r = simulate(s, cm, so);
  EXPECT_NEAR(static_cast<double>(r.step.step_ns()), 1.5 * static_cast<double>(ag) + ar, 2);
  // Ranks 0-1 (g0) end their all-gather first, ranks 6-7 (g3) last.
  EXPECT_NEAR(static_cast<double>(r.step.ranks[0][0].end), 0.5 * static_cast<double>(ag), 1);
  EXPECT_NEAR(static_cast<double>(r.step.ranks[6][0].end), 1.5 * static_cast<double>(ag), 1);
  // Processor sharing models the cores itself: no stagger on top of it.
  so.host_cores = 2;
  SimOptions shared = so;
  shared.sibling_stagger = 0;
  const SimResult with = simulate(s, cm, so), without = simulate(s, cm, shared);
  for (int rank = 0; rank < 8; ++rank)
    EXPECT_EQ(with.step.ranks[rank][0].end, without.step.ranks[rank][0].end) << rank;
}

TEST(Calibrate, CalibrationFileLoadsAsAProfileWithItsComputeOverhead) {
  test::TempDir dir;
  Calibration c;
  c.profile = *analysis::find_profile("cpu-shm");
  c.profile.intra_node.latency_ns = 4321;
  c.compute_overhead_ns = 777;
  c.compute_slowdown = 1.25;
  c.short_compute_overhead_ns = 55;
  c.short_compute_slowdown = 2.5;
  c.op_links[CollOp::AllReduce] = {1234.5, 0.25};
  c.sized_links[CollOp::AllReduce][2] = {{500, 0.125}, 0.5, {{4096, -20.5}, {1 << 20, 300}}};
  c.reduce_ns_per_element[CollOp::AllReduce] = 0.75;
  c.step_overhead_ns = 4'000;
  c.sibling_stagger = 0.25;
  c.start_skew_ns = 9'000;
  c.host_cores = 2;
  c.backend = "mpi";
  c.ranks = 4;
  const std::string path = dir.file("cal.json");
  FILE* f = fopen(path.c_str(), "w");
  const std::string j = c.to_json();
  fwrite(j.data(), 1, j.size(), f);
  fclose(f);
  SimProfile sp = load_sim_profile(path);
  EXPECT_TRUE(sp.calibrated);
  EXPECT_EQ(sp.sim.compute_overhead_ns, 777);
  EXPECT_DOUBLE_EQ(sp.sim.compute_slowdown, 1.25);
  EXPECT_EQ(sp.sim.short_compute_overhead_ns, 55);
  EXPECT_DOUBLE_EQ(sp.sim.short_compute_slowdown, 2.5);
  EXPECT_EQ(sp.sim.short_compute_below_ns, kShortestSleepNs);
  // A short op costs the short pair, a long one the other.
  EXPECT_EQ(sp.sim.compute_cost(10'000), 25'000 + 55);
  EXPECT_EQ(sp.sim.compute_cost(100'000), 125'000 + 777);
  EXPECT_EQ(sp.sim.step_start_ns, 4'000);
  EXPECT_EQ(sp.sim.start_skew_ns, 9'000);
  EXPECT_DOUBLE_EQ(sp.sim.sibling_stagger, 0.25);
  EXPECT_EQ(sp.sim.host_cores, 2);
  ASSERT_EQ(sp.sim.op_links.size(), 1u);
  EXPECT_DOUBLE_EQ(sp.sim.op_links.at(CollOp::AllReduce).alpha_ns, 1234.5);
  EXPECT_DOUBLE_EQ(sp.sim.op_links.at(CollOp::AllReduce).ns_per_byte, 0.25);
  ASSERT_EQ(sp.sim.reduce_ns_per_element.size(), 1u);
  EXPECT_DOUBLE_EQ(sp.sim.reduce_ns_per_element.at(CollOp::AllReduce), 0.75);
  EXPECT_EQ(sp.profile.intra_node.latency_ns, 4321);
  const SizedLink& l2 = sp.sim.sized_links.at(CollOp::AllReduce).at(2);
  EXPECT_DOUBLE_EQ(l2.link.alpha_ns, 500);
  EXPECT_DOUBLE_EQ(l2.ns_per_element, 0.5);
  EXPECT_EQ(l2.corrections,
            (std::vector<std::pair<int64_t, double>>{{4096, -20.5}, {1 << 20, 300}}));
  EXPECT_FALSE(load_sim_profile("h100-nvlink").calibrated);
}

TEST(Fidelity, ComparesReplayedWithOriginalStepsPerRank) {
  test::TempDir dir;
  const std::string path = dir.file("job.braid");
  int64_t run;
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    run = w.begin_run(RunKind::Imported, "test");
    w.add_step(run, Step{0, 0, 0, 1000});
    w.add_step(run, Step{0, 1, 1000, 3000});
    w.add_step(run, Step{0, 2, 3000, 4000});
    w.add_step(run, Step{1, 0, 0, 4000});
    w.commit();
  }
  ReplayResult r;
  StepRecord st;
  st.ranks = {{{1, 0, 0, 500}}, {{2, 0, 0, 2000}}};
  r.steps = {st};
  Fidelity f = fidelity(path, run, r);
  ASSERT_EQ(f.ranks.size(), 2u);
  EXPECT_EQ(f.ranks[0].original_ns, 1000);  // median of 1000, 2000, 1000
  EXPECT_EQ(f.ranks[0].replayed_ns, 500);
  EXPECT_DOUBLE_EQ(f.ranks[1].ratio(), 0.5);
  EXPECT_THROW(fidelity(path, run + 5, r), Error);
}

}  // namespace
}  // namespace braid::replay

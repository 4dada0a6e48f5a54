#include <gtest/gtest.h>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "trace/error.h"

namespace braid::analysis {
namespace {

TEST(CostModel, RingTableOfTheSeeds) {
  // t = 8: All-Reduce 2(t-1)/t, All-Gather / Reduce-Scatter / All-to-All (t-1)/t, P2P 1.
  EXPECT_DOUBLE_EQ(wire_factor(CollOp::AllReduce, 8, Algorithm::Ring), 1.75);
  EXPECT_DOUBLE_EQ(wire_factor(CollOp::AllGather, 8, Algorithm::Ring), 0.875);
  EXPECT_DOUBLE_EQ(wire_factor(CollOp::ReduceScatter, 8, Algorithm::Ring), 0.875);
  EXPECT_DOUBLE_EQ(wire_factor(CollOp::AllToAll, 8, Algorithm::Direct), 0.875);
  EXPECT_DOUBLE_EQ(wire_factor(CollOp::Send, 2, Algorithm::Direct), 1.0);
  EXPECT_DOUBLE_EQ(wire_factor(CollOp::ManyToMany, 8, Algorithm::Direct), 1.0);
  EXPECT_DOUBLE_EQ(latency_steps(CollOp::AllReduce, 8, Algorithm::Ring), 14);
  EXPECT_DOUBLE_EQ(latency_steps(CollOp::AllReduce, 8, Algorithm::Tree), 6);
  // A single rank moves nothing.
  EXPECT_DOUBLE_EQ(wire_factor(CollOp::AllReduce, 1, Algorithm::Ring), 0);
}

TEST(CostModel, BusBandwidthFollowsNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::AllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::AllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::Broadcast, 4), 1.0);
  // 1 GB in 10 ms = 100 GB/s algorithm bandwidth, 150 GB/s bus bandwidth on 4 ranks.
  EXPECT_DOUBLE_EQ(algbw_gbps(1'000'000'000, 10'000'000), 100.0);
  EXPECT_DOUBLE_EQ(busbw_gbps(CollOp::AllReduce, 4, 1'000'000'000, 10'000'000), 150.0);
  EXPECT_DOUBLE_EQ(algbw_gbps(100, 0), 0);
}

TEST(CostModel, AlphaBetaTimeAndAlgorithmChoice) {
  HardwareProfile p = default_profile();
  p.intra_node = {"test link", 1000, 100};  // 1 us per step, 100 GB/s
  CostModel m(p);
  // Ring all-reduce of 800 MB on 8 ranks: 14 steps + 1.75 * 800e6 / 100 ns.
  EXPECT_EQ(m.collective_ns(CollOp::AllReduce, 800'000'000, 8, {}, {}, Algorithm::Ring),
            14'000 + 14'000'000);
  // Large messages take the ring, small ones the tree.
  EXPECT_EQ(m.choose(CollOp::AllReduce, 800'000'000, 8), Algorithm::Ring);
  EXPECT_EQ(m.choose(CollOp::AllReduce, 1024, 8), Algorithm::Tree);
  EXPECT_EQ(m.collective_ns(CollOp::AllReduce, 1024, 8),
            m.collective_ns(CollOp::AllReduce, 1024, 8, {}, {}, Algorithm::Tree));
  EXPECT_EQ(m.choose(CollOp::AllToAll, 1024, 8), Algorithm::Direct);
  // The Chimera saving in the model: reduce-scatter moves half the all-reduce's bytes.
  Ns ar = m.collective_ns(CollOp::AllReduce, 64 << 20, 8, {}, {}, Algorithm::Ring);
  Ns rs = m.collective_ns(CollOp::ReduceScatter, 64 << 20, 8);
  EXPECT_NEAR(double(rs) / double(ar), 0.5, 0.01);
}

TEST(CostModel, CrossNodeCommunicatorsUseTheInterNodeLink) {
  CostModel m(*find_profile("h100-nvlink"));
  std::vector<int32_t> one_node{0, 1, 2, 3, 4, 5, 6, 7}, two_nodes{0, 8};
  EXPECT_EQ(m.link_for("", one_node), LinkCost::of(m.profile().intra_node));
  EXPECT_EQ(m.link_for("", two_nodes), LinkCost::of(m.profile().inter_node));
  EXPECT_GT(m.collective_ns(CollOp::AllReduce, 1 << 26, 2, "", two_nodes),
            m.collective_ns(CollOp::AllReduce, 1 << 26, 2, "", {0, 1}));
  // A calibrated communicator overrides the profile.
  m.set_comm("tp", CommCost{{500, 0.01}, "calibrated", 0.05, 10});
  EXPECT_EQ(m.collective_ns(CollOp::Send, 1000, 2, "tp"), 500 + 10);
}

TEST(CostModel, ComputeRoofline) {
  HardwareProfile p = default_profile();
  p.gpu = {"test gpu", 100, 10, 1000, 0};  // 100 TFLOP/s, 1000 GB/s, no overhead
  CostModel m(p);
  EXPECT_EQ(m.compute_ns(1e9, 0), 10'000);       // 1 GFLOP at 100 TFLOP/s = 10 us
  EXPECT_EQ(m.compute_ns(1e9, 0, 4), 100'000);   // fp32 peak
  EXPECT_EQ(m.compute_ns(1e3, 1e9), 1'000'000);  // memory bound: 1 GB at 1000 GB/s = 1 ms
}

TEST(HardwareProfile, BuiltinsAndJsonOverrides) {
  ASSERT_NE(find_profile("h100-nvlink"), nullptr);
  ASSERT_NE(find_profile("h100-pcie"), nullptr);
  ASSERT_NE(find_profile("h100-ib"), nullptr);
  EXPECT_EQ(find_profile("nope"), nullptr);
  for (const auto& p : builtin_profiles()) EXPECT_EQ(parse_profile(profile_to_json(p)), p);
  HardwareProfile q = parse_profile(
      R"({"base": "h100-pcie", "name": "mine", "intra_node": {"bandwidth_gbps": 30}})");
  EXPECT_EQ(q.name, "mine");
  EXPECT_EQ(q.intra_node.bandwidth_gbps, 30);
  EXPECT_EQ(q.intra_node.latency_ns, find_profile("h100-pcie")->intra_node.latency_ns);
  EXPECT_THROW(parse_profile("{\"gpus_per_node\": -1}"), Error);
  EXPECT_THROW(parse_profile("{\"gpu\": {\"tflops_16bit\": \"fast\"}}"), Error);
  EXPECT_THROW(parse_profile("not json"), Error);
  EXPECT_THROW(parse_profile(R"({"base": "tpu"})"), Error);
  EXPECT_THROW(load_profile("/nonexistent/profile.json"), Error);
}

}  // namespace
}  // namespace braid::analysis

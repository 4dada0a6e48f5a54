// fusion/passes/replicas.h: which values are provably equal on several ranks. Known answers on
// hand-built schedules: all-reduce outputs, replicated compute over equal inputs, receives of
// equal values are equal; per-rank compute, per-rank initial data, opaque compute and writers
// unordered with the reader are not (or unknown).
#include <gtest/gtest.h>

#include "fusion/dataflow.h"
#include "fusion/passes/replicas.h"
#include "fusion/schedules.h"

namespace braid::fusion::passes {
namespace {

using testing::coll;
using testing::comp;
using testing::p2p;
using testing::sl;

// Ranks 0, 1 on "tp"; each all-reduces `partial` into `x`, then runs `f` (x -> y); ranks 2, 3
// receive y from 0 and 1 into `z`.
Schedule base(bool replicated_f, bool opaque_between = false) {
  Schedule s;
  s.comms = {{"tp", {0, 1}}, {"c0", {0, 2}}, {"c1", {1, 3}}};
  for (int32_t r = 0; r < 4; ++r) {
    for (const char* b : {"partial", "x", "y", "z", "own"}) s.add_buffer(r, b, "float32", 8);
    s.add_stream(r, "main");
  }
  for (int32_t r = 0; r < 2; ++r) {
    s.append(r, 0, coll(CollOp::AllReduce, "tp", 8, sl("partial", 0, 8), sl("x", 0, 8)));
    if (opaque_between) s.append(r, 0, comp("kernel", 10, {}, {}, true));
    Compute f = comp("f", 10, {sl("x", 0, 8)}, {sl("y", 0, 8)});
    if (replicated_f) f.replicated = "tp";
    s.append(r, 0, f);
    s.append(r, 0, p2p(CollOp::Send, r ? "c1" : "c0", r + 2, 8, sl("y", 0, 8)));
  }
  for (int32_t r = 2; r < 4; ++r) {
    s.append(r, 0, p2p(CollOp::Recv, r == 3 ? "c1" : "c0", r - 2, 8, sl("z", 0, 8)));
    s.append(r, 0, comp("use", 10, {sl("z", 0, 8)}, {sl("own", 0, 8)}));
  }
  return s;
}

OpRef last(const Schedule& s, int32_t r) {
  return {r, 0, static_cast<int32_t>(s.ranks[r].streams[0].ops.size()) - 1};
}

TEST(Replicas, AllReduceOutputsAreEqualAndReplicatedComputeKeepsThemEqual) {
  Schedule s = base(true);
  Dataflow df(s);
  Replicas rep(df);
  // x after the all-reduce (read by f), y as sent, z as received and used on the next stage.
  EXPECT_TRUE(rep.same({{{0, 0, 1}, sl("x", 0, 8)}, {{1, 0, 1}, sl("x", 0, 8)}}));
  EXPECT_TRUE(rep.same({{{0, 0, 2}, sl("y", 0, 8)}, {{1, 0, 2}, sl("y", 0, 8)}}));
  EXPECT_TRUE(rep.same({{last(s, 2), sl("z", 0, 8)}, {last(s, 3), sl("z", 0, 8)}}));
  // A part of the value compares with the same part only.
  EXPECT_TRUE(rep.same({{{0, 0, 2}, sl("y", 2, 4)}, {{1, 0, 2}, sl("y", 2, 4)}}));
  EXPECT_FALSE(rep.same({{{0, 0, 2}, sl("y", 0, 4)}, {{1, 0, 2}, sl("y", 4, 4)}}));
  // Data nothing wrote is per-rank initial data.
  EXPECT_FALSE(rep.same({{{0, 0, 0}, sl("partial", 0, 8)}, {{1, 0, 0}, sl("partial", 0, 8)}}));
}

TEST(Replicas, PerRankComputeAndInitialDataDiffer) {
  Schedule s = base(false);
  Dataflow df(s);
  Replicas rep(df);
  EXPECT_TRUE(rep.same({{{0, 0, 1}, sl("x", 0, 8)}, {{1, 0, 1}, sl("x", 0, 8)}}));
  EXPECT_FALSE(rep.same({{{0, 0, 2}, sl("y", 0, 8)}, {{1, 0, 2}, sl("y", 0, 8)}}));
  EXPECT_FALSE(rep.same({{last(s, 2), sl("z", 0, 8)}, {last(s, 3), sl("z", 0, 8)}}));
  // A buffer replicated over the group starts equal.
  for (int32_t r = 0; r < 2; ++r) s.ranks[r].buffers[0].replicated = "tp";
  Dataflow df2(s);
  Replicas rep2(df2);
  EXPECT_TRUE(rep2.same({{{0, 0, 0}, sl("partial", 0, 8)}, {{1, 0, 0}, sl("partial", 0, 8)}}));
}

TEST(Replicas, OpaqueComputeOrAnUnorderedWriterMakesTheValueUnknown) {
  Schedule s = base(true, /*opaque_between=*/true);
  Dataflow df(s);
  Replicas rep(df);
  EXPECT_FALSE(rep.signature({0, 0, 3}, sl("y", 0, 8)).has_value());
  EXPECT_FALSE(rep.same({{{0, 0, 3}, sl("y", 0, 8)}, {{1, 0, 3}, sl("y", 0, 8)}}));

  // A second stream writes y with nothing ordering it with the send.
  Schedule u = base(true);
  for (int32_t r = 0; r < 2; ++r) {
    u.add_stream(r, "side");
    u.append(r, 1, comp("racer", 10, {}, {sl("y", 0, 2)}));
  }
  Dataflow du(u);
  Replicas ru(du);
  EXPECT_FALSE(ru.signature({0, 0, 2}, sl("y", 0, 8)).has_value());
  // A read of the elements the racer does not touch is still known.
  EXPECT_TRUE(ru.same({{{0, 0, 2}, sl("y", 2, 6)}, {{1, 0, 2}, sl("y", 2, 6)}}));
}

}  // namespace
}  // namespace braid::fusion::passes

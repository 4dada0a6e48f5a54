// Reference interpreter: every collective on 4 ranks against values worked out by hand, compute
// and event semantics, deadlock reports, and AllReduce == ReduceScatter + AllGather.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fusion/interpreter.h"
#include "fusion/schedules.h"
#include "fusion/validate.h"
#include "trace/error.h"

namespace braid::fusion {
namespace {

using namespace braid::fusion::testing;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using V = std::vector<int64_t>;

// 4 ranks, one stream each, buffers x (16) and y (16) of int64, communicator "w" = {0,1,2,3}.
Schedule four_ranks() {
  Schedule s;
  s.name = "t4";
  s.comms.push_back({"w", {0, 1, 2, 3}});
  for (int32_t r = 0; r < 4; ++r) {
    s.add_buffer(r, "x", "int64", 16);
    s.add_buffer(r, "y", "int64", 16);
    s.add_stream(r, "main");
  }
  return s;
}

// x[i] = 100 * rank + i, y = -1: sums are easy to work out by hand.
InterpreterOptions simple_init() {
  InterpreterOptions o;
  o.init = [](int32_t rank, const std::string& buf, int64_t i) -> int64_t {
    return buf == "x" ? 100 * rank + i : -1;
  };
  return o;
}

V y_of(const Interpretation& r, int rank, size_t n) {
  const V& y = r.buffers.at(rank).at("y");
  return V(y.begin(), y.begin() + static_cast<long>(n));
}

Interpretation run(const Schedule& s, const InterpreterOptions& o = simple_init()) {
  Interpretation r = interpret(s, o);
  EXPECT_FALSE(r.deadlocked) << r.deadlock_message();
  return r;
}

TEST(Interpreter, AllReduceSumsOverMembers) {
  Schedule s = four_ranks();
  for (int32_t r = 0; r < 4; ++r)
    s.append(r, 0, coll(CollOp::AllReduce, "w", 4, sl("x", 0, 4), sl("y", 0, 4), "", "int64"));
  auto res = run(s);
  // y[i] = sum_r (100 r + i) = 600 + 4 i.
  for (int r = 0; r < 4; ++r) EXPECT_THAT(y_of(res, r, 5), ElementsAre(600, 604, 608, 612, -1));
  EXPECT_EQ(res.buffers[2].at("x")[3], 203);  // inputs untouched
  EXPECT_EQ(res.executed, 4);
}

TEST(Interpreter, AllGatherConcatenatesInMemberOrder) {
  Schedule s = four_ranks();
  s.comms.push_back({"rev", {3, 2, 1, 0}});
  for (int32_t r = 0; r < 4; ++r)
    s.append(r, 0, coll(CollOp::AllGather, "rev", 2, sl("x", 0, 2), sl("y", 0, 8), "", "int64"));
  auto res = run(s);
  for (int r = 0; r < 4; ++r)
    EXPECT_THAT(y_of(res, r, 8), ElementsAre(300, 301, 200, 201, 100, 101, 0, 1));
}

TEST(Interpreter, ReduceScatterGivesMemberIThe_ithShard) {
  Schedule s = four_ranks();
  for (int32_t r = 0; r < 4; ++r)
    s.append(r, 0,
             coll(CollOp::ReduceScatter, "w", 2, sl("x", 0, 8), sl("y", 0, 2), "", "int64"));
  auto res = run(s);
  // Shard k = elements 2k, 2k+1 of the sum 600 + 4 i.
  EXPECT_THAT(y_of(res, 0, 3), ElementsAre(600, 604, -1));
  EXPECT_THAT(y_of(res, 1, 3), ElementsAre(608, 612, -1));
  EXPECT_THAT(y_of(res, 2, 3), ElementsAre(616, 620, -1));
  EXPECT_THAT(y_of(res, 3, 3), ElementsAre(624, 628, -1));
}

TEST(Interpreter, BroadcastCopiesTheRootsInput) {
  Schedule s = four_ranks();
  for (int32_t r = 0; r < 4; ++r) {
    Collective b = coll(CollOp::Broadcast, "w", 3, r == 2 ? sl("x", 5, 3) : Slice{},
                        sl("y", 1, 3), "", "int64");
    b.root = 2;
    s.append(r, 0, b);
  }
  auto res = run(s);
  for (int r = 0; r < 4; ++r) EXPECT_THAT(y_of(res, r, 5), ElementsAre(-1, 205, 206, 207, -1));
}

TEST(Interpreter, ReduceWritesOnlyTheRoot) {
  Schedule s = four_ranks();
  for (int32_t r = 0; r < 4; ++r) {
    Collective red =
        coll(CollOp::Reduce, "w", 3, sl("x", 1, 3), r == 1 ? sl("y", 0, 3) : Slice{}, "", "int64");
    red.root = 1;
    s.append(r, 0, red);
  }
  auto res = run(s);
  EXPECT_THAT(y_of(res, 1, 4), ElementsAre(604, 608, 612, -1));
  for (int r : {0, 2, 3}) EXPECT_THAT(y_of(res, r, 4), ElementsAre(-1, -1, -1, -1));
}

TEST(Interpreter, AllToAllTransposesBlocks) {
  Schedule s = four_ranks();
  for (int32_t r = 0; r < 4; ++r)
    s.append(r, 0, coll(CollOp::AllToAll, "w", 2, sl("x", 0, 8), sl("y", 0, 8), "", "int64"));
  auto res = run(s);
  // Block j of rank k's output is block k of rank j's input: 100 j + 2 k + {0, 1}.
  EXPECT_THAT(y_of(res, 0, 8), ElementsAre(0, 1, 100, 101, 200, 201, 300, 301));
  EXPECT_THAT(y_of(res, 1, 8), ElementsAre(2, 3, 102, 103, 202, 203, 302, 303));
  EXPECT_THAT(y_of(res, 3, 8), ElementsAre(6, 7, 106, 107, 206, 207, 306, 307));
}

TEST(Interpreter, SendRecvPairsPerChannelInOrder) {
  Schedule s = four_ranks();
  // Rank 0 sends two messages to rank 3; rank 3 receives them in order into different places.
  s.append(0, 0, p2p(CollOp::Send, "w", 3, 2, sl("x", 1, 2), "", "int64"));
  s.append(0, 0, p2p(CollOp::Send, "w", 3, 1, sl("x", 9, 1), "", "int64"));
  s.append(3, 0, p2p(CollOp::Recv, "w", 0, 2, sl("y", 0, 2), "", "int64"));
  s.append(3, 0, p2p(CollOp::Recv, "w", 0, 1, sl("y", 4, 1), "", "int64"));
  // Rank 2 sends to rank 1 at the same time.
  s.append(2, 0, p2p(CollOp::Send, "w", 1, 3, sl("x", 0, 3), "", "int64"));
  s.append(1, 0, p2p(CollOp::Recv, "w", 2, 3, sl("y", 2, 3), "", "int64"));
  auto res = run(s);
  EXPECT_THAT(y_of(res, 3, 6), ElementsAre(1, 2, -1, -1, 9, -1));
  EXPECT_THAT(y_of(res, 1, 6), ElementsAre(-1, -1, 200, 201, 202, -1));
  EXPECT_THAT(y_of(res, 0, 2), ElementsAre(-1, -1));
}

TEST(Interpreter, ManyToManyMovesEachChunk) {
  Schedule s = four_ranks();
  auto m = [&](std::vector<PeerChunk> sends, std::vector<PeerChunk> recvs) {
    Collective c = coll(CollOp::ManyToMany, "w", 0, sl("x", 0, 8), sl("y", 0, 8), "", "int64");
    c.sends = std::move(sends);
    c.recvs = std::move(recvs);
    return c;
  };
  // Rank 0 sends x[0] to 1, x[1..2] to 2 and x[3] to 2 again; rank 1 sends x[4..5] to 0;
  // rank 3 takes part with nothing to move.
  s.append(0, 0, m({{1, 0, 1}, {2, 1, 2}, {2, 3, 1}}, {{1, 2, 2}}));
  s.append(1, 0, m({{0, 4, 2}}, {{0, 0, 1}}));
  s.append(2, 0, m({}, {{0, 1, 2}, {0, 5, 1}}));  // chunks from 0 pair up in list order
  s.append(3, 0, m({}, {}));
  auto res = run(s);
  EXPECT_THAT(y_of(res, 0, 5), ElementsAre(-1, -1, 104, 105, -1));
  EXPECT_THAT(y_of(res, 1, 2), ElementsAre(0, -1));
  EXPECT_THAT(y_of(res, 2, 7), ElementsAre(-1, 1, 2, -1, -1, 3, -1));
  EXPECT_THAT(y_of(res, 3, 8), ElementsAre(-1, -1, -1, -1, -1, -1, -1, -1));
}

TEST(Interpreter, InPlaceCollectivesReadBeforeWriting) {
  Schedule s = four_ranks();
  // All-to-all in place on x: every rank's x[0:8] becomes the transposed blocks.
  for (int32_t r = 0; r < 4; ++r)
    s.append(r, 0, coll(CollOp::AllToAll, "w", 2, sl("x", 0, 8), sl("x", 0, 8), "", "int64"));
  auto res = run(s);
  const V& x2 = res.buffers[2].at("x");
  EXPECT_THAT(V(x2.begin(), x2.begin() + 9), ElementsAre(4, 5, 104, 105, 204, 205, 304, 305, 208));
}

TEST(Interpreter, ComputeIsDeterministicAndOpaqueComputeIsNot) {
  Schedule s = four_ranks();
  s.append(1, 0, comp("f", 10, {sl("x", 0, 2), sl("x", 4, 1)}, {sl("y", 3, 4)}));
  s.append(1, 0, comp("lifted", 10, {}, {}, /*opaque=*/true));
  auto res = run(s);
  const V& y = res.buffers[1].at("y");
  // y[3 + j] = compute_value("f", 1, "y", 3 + j, {x[j % 2], x[4]}).
  for (int64_t j = 0; j < 4; ++j)
    EXPECT_EQ(y[3 + j], compute_value("f", 1, "y", 3 + j, {100 + j % 2, 104})) << j;
  EXPECT_EQ(y[2], -1);
  EXPECT_EQ(y[7], -1);
  EXPECT_NE(compute_value("f", 1, "y", 3, {100, 104}), compute_value("g", 1, "y", 3, {100, 104}));
  EXPECT_NE(compute_value("f", 1, "y", 3, {100, 104}), compute_value("f", 2, "y", 3, {100, 104}));
  EXPECT_NE(compute_value("f", 1, "y", 3, {100, 104}), compute_value("f", 1, "y", 3, {101, 104}));
  EXPECT_EQ(res.buffers[0], interpret(four_ranks(), simple_init()).buffers[0]);

  // Splitting a compute into chunks with the same label gives the same data.
  Schedule whole = four_ranks(), split = four_ranks();
  whole.append(0, 0, comp("mlp", 10, {sl("x", 0, 8)}, {sl("y", 0, 8)}));
  split.append(0, 0, comp("mlp", 5, {sl("x", 0, 4)}, {sl("y", 0, 4)}));
  split.append(0, 0, comp("mlp", 5, {sl("x", 4, 4)}, {sl("y", 4, 4)}));
  EXPECT_EQ(interpret(whole).buffers, interpret(split).buffers);
}

TEST(Interpreter, ReplicatedComputeAndBuffersTakeTheFirstMembersValues) {
  // x starts equal on the members of "w" when replicated over it; "f" replicated over "w"
  // computes the same function everywhere, so equal inputs give equal outputs.
  Schedule s = four_ranks();
  for (int32_t r = 0; r < 4; ++r) {
    s.ranks[r].buffers[0].replicated = "w";
    Compute c = comp("f", 10, {sl("x", 0, 16)}, {sl("y", 0, 16)});
    c.replicated = "w";
    s.append(r, 0, c);
  }
  EXPECT_EQ(value_rank(s, 3, "w"), 0);
  EXPECT_EQ(value_rank(s, 3, ""), 3);
  auto res = interpret(s);
  for (int32_t r = 1; r < 4; ++r) {
    EXPECT_EQ(res.buffers[r].at("x"), res.buffers[0].at("x")) << r;
    EXPECT_EQ(res.buffers[r].at("y"), res.buffers[0].at("y")) << r;
  }
  EXPECT_EQ(res.buffers[2].at("x")[5], initial_value(0, "x", 5));
  // Not replicated: every rank computes its own values from the same inputs.
  for (int32_t r = 0; r < 4; ++r) s.ranks[r].streams[0].ops[0].compute()->replicated.clear();
  auto own = interpret(s);
  EXPECT_NE(own.buffers[1].at("y"), own.buffers[0].at("y"));
}

TEST(Interpreter, DefaultInitialValuesAreDeterministic) {
  EXPECT_EQ(initial_value(0, "x", 5), initial_value(0, "x", 5));
  EXPECT_NE(initial_value(0, "x", 5), initial_value(1, "x", 5));
  EXPECT_NE(initial_value(0, "x", 5), initial_value(0, "y", 5));
  EXPECT_NE(initial_value(0, "x", 5), initial_value(0, "x", 6));
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_GE(initial_value(3, "buf", i), 0);
    EXPECT_LT(initial_value(3, "buf", i), 1000000);
  }
  auto res = interpret(four_ranks());
  EXPECT_EQ(res.buffers[3].at("y")[7], initial_value(3, "y", 7));
}

TEST(Interpreter, FilledInitialValuesAreTheElementwiseOnes) {
  // The backends and the interpreter fill whole buffers with the name hashed once; each element
  // must still be initial_value's.
  std::vector<int64_t> v(1000, -1);
  fill_initial_values(5, "L0.fc1.mb0", v.data(), static_cast<int64_t>(v.size()));
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
    ASSERT_EQ(v[i], initial_value(5, "L0.fc1.mb0", i)) << i;
}

TEST(Interpreter, HonoursEventsAcrossStreams) {
  // On every rank the comm stream (visited first) waits for the compute stream's result.
  Schedule s = four_ranks();
  for (int32_t r = 0; r < 4; ++r) {
    int side = s.add_stream(r, "compute");
    s.append(r, 0, Wait{"ready"});
    s.append(r, 0, coll(CollOp::AllReduce, "w", 2, sl("y", 0, 2), sl("y", 0, 2), "", "int64"));
    s.append(r, side, comp("f", 10, {sl("x", 0, 2)}, {sl("y", 0, 2)}));
    s.append(r, side, Record{"ready"});
  }
  ASSERT_TRUE(validate(s).empty());
  auto res = run(s);
  for (int64_t j = 0; j < 2; ++j) {
    uint64_t sum = 0;
    for (int32_t r = 0; r < 4; ++r)
      sum += static_cast<uint64_t>(compute_value("f", r, "y", j, {100 * r + j}));
    for (int32_t r = 0; r < 4; ++r) EXPECT_EQ(res.buffers[r].at("y")[j], static_cast<int64_t>(sum));
  }
}

TEST(Interpreter, CollectivesWaitForEveryMember) {
  // Rank 3 overwrites x before the all-reduce; the others reach it first, but the result must
  // include rank 3's new value because the collective runs only when all members are there.
  Schedule s = four_ranks();
  s.add_stream(3, "late");
  for (int32_t r = 0; r < 4; ++r)
    s.append(r, 0, coll(CollOp::AllReduce, "w", 1, sl("x", 0, 1), sl("y", 0, 1), "", "int64"));
  s.ranks[3].streams[0].ops.insert(s.ranks[3].streams[0].ops.begin(), Op{100, Wait{"w"}, {}});
  s.append(3, 1, comp("set", 1, {}, {sl("x", 0, 1)}));
  s.append(3, 1, Record{"w"});
  auto res = run(s);
  uint64_t want = 0 + 100 + 200 + static_cast<uint64_t>(compute_value("set", 3, "x", 0, {}));
  EXPECT_EQ(res.buffers[0].at("y")[0], static_cast<int64_t>(want));
}

TEST(Interpreter, RunsTheGoldenFourRankSchedule) {
  auto res = interpret(four_rank_schedule());
  EXPECT_FALSE(res.deadlocked) << res.deadlock_message();
  EXPECT_EQ(res.executed, 32);
  // The reduce on tp1 (root 2) sums y[0:2] of ranks 3 and 2, which hold the broadcast of rank
  // 2's x[0:4] (itself the output of the all-to-all, untouched there): so 2 * x.
  const auto& y2 = res.buffers[2].at("y");
  EXPECT_EQ(y2[4], 2 * y2[0]);
  EXPECT_EQ(y2[5], 2 * y2[1]);
}

TEST(Interpreter, ReportsDeadlockWithStuckOps) {
  Schedule s = four_ranks();
  s.comms.push_back({"a", {0, 1}});
  s.comms.push_back({"b", {0, 1}});
  auto A = coll(CollOp::AllReduce, "a", 1, sl("x", 0, 1), sl("y", 0, 1), "A", "int64");
  auto B = coll(CollOp::AllReduce, "b", 1, sl("x", 0, 1), sl("y", 1, 1), "B", "int64");
  s.append(0, 0, A);
  s.append(0, 0, B);
  s.append(1, 0, B);
  s.append(1, 0, A);
  s.append(2, 0, comp("fine", 1, {}, {sl("y", 0, 1)}));
  auto res = interpret(s, simple_init());
  ASSERT_TRUE(res.deadlocked);
  ASSERT_EQ(res.stuck.size(), 2u);
  EXPECT_EQ(res.stuck[0].ref, (OpRef{0, 0, 0}));
  EXPECT_EQ(res.stuck[1].ref, (OpRef{1, 0, 0}));
  EXPECT_THAT(res.stuck[0].reason,
              HasSubstr("waits for rank 1 (blocked at rank 1 stream 'main' op 0 (id 2: "
                        "allreduce 'B' on 'b'))"));
  EXPECT_THAT(res.deadlock_message(),
              AllOf(HasSubstr("rank 0 stream 'main' op 0 (id 0: allreduce 'A' on 'a')"),
                    HasSubstr("rank 1 stream 'main' op 0 (id 2: allreduce 'B' on 'b')")));
  EXPECT_EQ(res.buffers[2].at("y")[0], compute_value("fine", 2, "y", 0, {}));  // others ran
  // Validation sees the same deadlock statically.
  auto p = validate(s);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_THAT(p[0], HasSubstr("deadlock"));
}

TEST(Interpreter, RefusesInvalidSchedules) {
  Schedule s = four_ranks();
  s.append(0, 0, coll(CollOp::AllReduce, "w", 4, sl("x", 14, 4), sl("y", 0, 4), "", "int64"));
  try {
    interpret(s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::BadFormat);
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("schedule 't4' is not valid"),
                                             HasSubstr("out of bounds"),
                                             HasSubstr("more")));
  }
}

// AllReduce(g) == AllGather(ReduceScatter(g)): the identity the decomposition pass relies on.
Schedule gradient_sync(bool decomposed, int nranks, int64_t n) {
  Schedule s;
  s.name = decomposed ? "rs+ag" : "ar";
  std::vector<int32_t> members;
  for (int32_t r = 0; r < nranks; ++r) members.push_back(r);
  s.comms.push_back({"dp", members});
  for (int32_t r = 0; r < nranks; ++r) {
    s.add_buffer(r, "act", "float32", n);
    s.add_buffer(r, "grad", "float32", n);
    s.add_buffer(r, "shard", "float32", n / nranks);
    s.add_buffer(r, "out", "float32", n);
    int st = s.add_stream(r, "main");
    s.append(r, st, comp("bwd", 100, {sl("act", 0, n)}, {sl("grad", 0, n)}));
    if (decomposed) {
      s.append(r, st, coll(CollOp::ReduceScatter, "dp", n / nranks, sl("grad", 0, n),
                           sl("shard", 0, n / nranks), "grad rs"));
      s.append(r, st, coll(CollOp::AllGather, "dp", n / nranks, sl("shard", 0, n / nranks),
                           sl("grad", 0, n), "grad ag"));
    } else {
      s.append(r, st, coll(CollOp::AllReduce, "dp", n, sl("grad", 0, n), sl("grad", 0, n),
                           "grad ar"));
    }
    s.append(r, st, comp("opt", 100, {sl("grad", 0, n), sl("act", 0, n)}, {sl("out", 0, n)}));
  }
  return s;
}

TEST(Interpreter, AllReduceEqualsReduceScatterThenAllGather) {
  for (int nranks : {2, 4}) {
    Schedule ar = gradient_sync(false, nranks, 12), rsag = gradient_sync(true, nranks, 12);
    ASSERT_TRUE(validate(ar).empty());
    ASSERT_TRUE(validate(rsag).empty()) << validate(rsag)[0];
    auto a = run(ar, {}), b = run(rsag, {});
    for (int r = 0; r < nranks; ++r) {
      EXPECT_EQ(a.buffers[r].at("grad"), b.buffers[r].at("grad")) << "rank " << r;
      EXPECT_EQ(a.buffers[r].at("out"), b.buffers[r].at("out")) << "rank " << r;
      EXPECT_EQ(a.buffers[r].at("act"), b.buffers[r].at("act")) << "rank " << r;
    }
    // And the sum is really the sum (not, e.g., rank 0's gradient).
    uint64_t want = 0;
    for (int32_t r = 0; r < nranks; ++r)
      want += static_cast<uint64_t>(
          compute_value("bwd", r, "grad", 5, {initial_value(r, "act", 5)}));
    EXPECT_EQ(a.buffers[1].at("grad")[5], static_cast<int64_t>(want));
  }
  // A wrong rewrite (gathering each rank's own unreduced shard) validates but is caught.
  Schedule good = gradient_sync(false, 4, 12), bad = good;
  for (int32_t r = 0; r < 4; ++r)
    *bad.ranks[r].streams[0].ops[1].collective() =
        coll(CollOp::AllGather, "dp", 3, sl("grad", 3 * r, 3), sl("grad", 0, 12));
  ASSERT_TRUE(validate(bad).empty()) << validate(bad)[0];
  EXPECT_NE(run(bad, {}).buffers[0].at("grad"), run(good, {}).buffers[0].at("grad"));
}

}  // namespace
}  // namespace braid::fusion

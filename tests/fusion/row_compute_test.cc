// Row-wise compute (docs/schedule-ir.md, "Row-wise compute"): a token row's output depends on
// the rows it reads, not on where they are stored, so a rewrite may compute any subset of the
// rows, in another buffer, and get the baseline's values; transposed reads, row sums whose
// partial sums add up exactly, fn "add"; their validation and JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fusion/interpreter.h"
#include "fusion/schedules.h"
#include "fusion/validate.h"

namespace braid::fusion {
namespace {

using namespace braid::fusion::testing;
using ::testing::HasSubstr;
using V = std::vector<int64_t>;

// Elements [a, b) of v.
V part(const V& v, int64_t a, int64_t b) { return V(v.begin() + a, v.begin() + b); }
V iota(int64_t n, int64_t from) {
  V v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = from + 7 * i;
  return v;
}

Compute rows_op(std::string label, std::vector<Slice> reads, std::vector<int64_t> read_rows,
                std::vector<Slice> writes, std::vector<int64_t> write_rows) {
  Compute c = comp(std::move(label), 10, std::move(reads), std::move(writes));
  c.read_rows = std::move(read_rows);
  c.write_rows = std::move(write_rows);
  return c;
}

const Schedule kEmpty;

// One rank, one stream holding `c`, and every buffer these tests name (64 elements each).
Schedule one_rank_with(Compute c) {
  Schedule s;
  s.name = "one";
  for (const char* b : {"x", "y", "z", "w", "d", "p", "o", "g", "a", "delta", "lo", "hi"})
    s.add_buffer(0, b, "int64", 64);
  s.append(0, s.add_stream(0, "main"), std::move(c));
  return s;
}

// 8 token rows of 4 elements, a weight of 6 elements, an output of 3 elements per row.
TEST(RowCompute, AnySubsetOfRowsInAnyBufferGivesTheSameRows) {
  const V x = iota(32, 5), w = iota(6, 900);
  Compute full = rows_op("mlp", {sl("x", 0, 32), sl("w", 0, 6)}, {8, 0}, {sl("y", 0, 24)}, {8});
  const V y = compute_outputs(kEmpty, 0, full, {x, w})[0];
  // Rows 5..7 computed alone, written at offset 0 of another buffer.
  Compute tail = rows_op("mlp", {sl("x", 20, 12), sl("w", 0, 6)}, {3, 0}, {sl("z", 0, 9)}, {3});
  EXPECT_EQ(compute_outputs(kEmpty, 0, tail, {part(x, 20, 32), w})[0], part(y, 15, 24));
  // Equal rows give equal outputs wherever they sit; another label, weight or rank does not.
  Compute one = rows_op("mlp", {sl("x", 0, 4), sl("w", 0, 6)}, {1, 0}, {sl("y", 0, 3)}, {1});
  EXPECT_EQ(compute_outputs(kEmpty, 0, one, {part(x, 8, 12), w})[0], part(y, 6, 9));
  V w2 = w;
  w2[5] += 1;
  EXPECT_NE(compute_outputs(kEmpty, 0, one, {part(x, 8, 12), w2})[0], part(y, 6, 9));
  EXPECT_NE(compute_outputs(kEmpty, 1, one, {part(x, 8, 12), w})[0], part(y, 6, 9));
  one.label = "other";
  EXPECT_NE(compute_outputs(kEmpty, 0, one, {part(x, 8, 12), w})[0], part(y, 6, 9));
}

TEST(RowCompute, FewerReadRowsRepeatAndMoreReadRowsGather) {
  const V x = iota(8, 3);  // 4 tokens of 2
  // Permute-like: 8 output rows, token r / 2 each (two copies of every token).
  Compute copy = rows_op("perm", {sl("x", 0, 8)}, {4}, {sl("d", 0, 16)}, {8});
  const V d = compute_outputs(kEmpty, 0, copy, {x})[0];
  EXPECT_EQ(part(d, 0, 2), part(d, 2, 4));  // copies of token 0
  EXPECT_NE(part(d, 0, 2), part(d, 4, 6));  // token 1
  // Un-permute-like: 4 output rows, each reading its 2 copies.
  Compute back = rows_op("unperm", {sl("d", 0, 16)}, {8}, {sl("o", 0, 8)}, {4});
  const V o = compute_outputs(kEmpty, 0, back, {d})[0];
  Compute one = rows_op("unperm", {sl("d", 0, 4)}, {2}, {sl("o", 0, 2)}, {1});
  EXPECT_EQ(compute_outputs(kEmpty, 0, one, {part(d, 12, 16)})[0], part(o, 6, 8));
}

// A 2 x 3 grid of token segments (2 TP shards x 3 destinations), one row each: the permute
// writes destination-major blocks, the un-permute brings them back to token order.
TEST(RowCompute, TransposeMovesBlocksBetweenTokenAndDestinationOrder) {
  const V x = iota(12, 40), p = iota(6, 70);  // 6 tokens of 2, probs 1 per token
  Compute perm = rows_op("perm", {sl("x", 0, 12), sl("p", 0, 6)}, {6, 6}, {sl("d", 0, 12)}, {6});
  perm.transpose = {3, 2};
  perm.transposed_reads = {0, 1};
  ASSERT_THAT(validate(one_rank_with(perm)), ::testing::IsEmpty());
  const V d = compute_outputs(kEmpty, 0, perm, {x, p})[0];
  // Destination block e * 2 + i holds token segment i * 3 + e.
  for (int e = 0; e < 3; ++e)
    for (int i = 0; i < 2; ++i) {
      const int tok = i * 3 + e, blk = e * 2 + i;
      Compute one = rows_op("perm", {sl("x", 0, 2), sl("p", 0, 1)}, {1, 1}, {sl("d", 0, 2)}, {1});
      EXPECT_EQ(compute_outputs(kEmpty, 0, one,
                                {part(x, 2 * tok, 2 * tok + 2), part(p, tok, tok + 1)})[0],
                part(d, 2 * blk, 2 * blk + 2))
          << "token " << tok;
    }
  // Back: token order, reading the dispatch-order rows transposed and the probs as they are.
  Compute un = rows_op("unperm", {sl("d", 0, 12), sl("p", 0, 6)}, {6, 6}, {sl("o", 0, 12)}, {6});
  un.transpose = {2, 3};
  un.transposed_reads = {0};
  const V o = compute_outputs(kEmpty, 0, un, {d, p})[0];
  Compute one = rows_op("unperm", {sl("d", 0, 2), sl("p", 0, 1)}, {1, 1}, {sl("o", 0, 2)}, {1});
  // Token 4 = segment (i 1, e 1) sits in destination block 1 * 2 + 1 = 3.
  EXPECT_EQ(compute_outputs(kEmpty, 0, one, {part(d, 6, 8), part(p, 4, 5)})[0], part(o, 8, 10));
}

// A weight gradient over 6 rows with an accumulator equals the accumulator plus the partial
// sums of any split of the rows (what an All-Reduce of the partials adds up).
TEST(RowCompute, RowSumsSplitIntoPartialsThatAddUpExactly) {
  const V g = iota(18, 11), a = iota(12, 300), acc = iota(5, 1000);
  Compute full = rows_op("wgrad", {sl("g", 0, 18), sl("a", 0, 12), sl("w", 0, 5)}, {6, 6, 0},
                         {sl("w", 0, 5)}, {1});
  full.sum_rows = true;
  const V want = compute_outputs(kEmpty, 0, full, {g, a, acc})[0];
  Compute p = rows_op("wgrad", {sl("g", 0, 9), sl("a", 0, 6)}, {3, 3}, {sl("delta", 0, 5)}, {1});
  p.sum_rows = true;
  const V lo = compute_outputs(kEmpty, 0, p, {part(g, 0, 9), part(a, 0, 6)})[0];
  const V hi = compute_outputs(kEmpty, 0, p, {part(g, 9, 18), part(a, 6, 12)})[0];
  Compute add = comp("add", 1, {sl("w", 0, 5), sl("lo", 0, 5), sl("hi", 0, 5)}, {sl("w", 0, 5)});
  add.fn = "add";
  EXPECT_EQ(compute_outputs(kEmpty, 0, add, {acc, lo, hi})[0], want);
  EXPECT_NE(lo, hi);
  // Another row changes the sum.
  V g2 = g;
  g2[17] += 1;
  EXPECT_NE(compute_outputs(kEmpty, 0, full, {g2, a, acc})[0], want);
}

TEST(RowCompute, InterpreterRunsRowWiseOpsAcrossRanks) {
  // Baseline: both ranks compute all 8 rows (replicated input and function). Split: each
  // computes its 4 rows and they all-gather them. Same final y on both ranks.
  auto build = [](bool split) {
    Schedule s;
    s.name = split ? "split" : "full";
    s.comms.push_back({"w", {0, 1}});
    for (int32_t r = 0; r < 2; ++r) {
      s.add_buffer(r, "x", "float32", 16);
      s.ranks[r].buffers.back().replicated = "w";
      s.add_buffer(r, "y", "float32", 8);
      s.add_buffer(r, "half", "float32", 4);
      s.ranks[r].outputs = {"y"};
      const int st = s.add_stream(r, "main");
      Compute c = split ? rows_op("f", {sl("x", 8 * r, 8)}, {4}, {sl("half", 0, 4)}, {4})
                        : rows_op("f", {sl("x", 0, 16)}, {8}, {sl("y", 0, 8)}, {8});
      c.replicated = "w";
      s.append(r, st, c);
      if (split) s.append(r, st, coll(CollOp::AllGather, "w", 4, sl("half", 0, 4), sl("y", 0, 8)));
    }
    return s;
  };
  Interpretation full = interpret(build(false)), split = interpret(build(true));
  ASSERT_FALSE(split.deadlocked);
  EXPECT_EQ(full.buffers[0].at("y"), split.buffers[0].at("y"));
  EXPECT_EQ(full.buffers[1].at("y"), split.buffers[1].at("y"));
  EXPECT_EQ(full.buffers[0].at("y"), full.buffers[1].at("y"));
}

TEST(RowCompute, ValidationNamesTheProblem) {
  auto why = [](Compute c) {
    auto v = validate(one_rank_with(std::move(c)));
    return v.empty() ? std::string() : v[0];
  };
  EXPECT_EQ(why(rows_op("ok", {sl("x", 0, 8)}, {4}, {sl("y", 0, 8)}, {2})), "");
  EXPECT_THAT(why(rows_op("n", {sl("x", 0, 8)}, {4, 1}, {sl("y", 0, 8)}, {2})),
              HasSubstr("one entry per read"));
  EXPECT_THAT(why(rows_op("n", {sl("x", 0, 8)}, {3}, {sl("y", 0, 8)}, {2})),
              HasSubstr("not 3 whole rows"));
  EXPECT_THAT(why(rows_op("n", {sl("x", 0, 6)}, {3}, {sl("y", 0, 8)}, {2})),
              HasSubstr("neither divides the other"));
  Compute t = rows_op("n", {sl("x", 0, 8)}, {4}, {sl("y", 0, 8)}, {4});
  t.transpose = {2, 2};
  EXPECT_THAT(why(t), HasSubstr("transpose without transposed_reads"));
  t.transposed_reads = {1};
  EXPECT_THAT(why(t), HasSubstr("not a per-row read"));
  Compute s = rows_op("n", {sl("x", 0, 8)}, {4}, {sl("y", 0, 8)}, {4});
  s.sum_rows = true;
  EXPECT_THAT(why(s), HasSubstr("write_rows 1"));
  Compute a = comp("n", 1, {sl("x", 0, 8), sl("x", 0, 4)}, {sl("y", 0, 8)});
  a.fn = "add";
  EXPECT_THAT(why(a), HasSubstr("one count"));
  a.fn = "mul";
  EXPECT_THAT(why(a), HasSubstr("unknown fn"));
  Compute r = comp("n", 1, {sl("x", 0, 8)}, {sl("y", 0, 8)});
  r.read_rows = {4};
  EXPECT_THAT(why(r), HasSubstr("without write_rows"));
}

TEST(RowCompute, JsonRoundTripsTheRowFields) {
  Compute c = rows_op("perm", {sl("x", 0, 8), sl("w", 0, 4)}, {4, 0}, {sl("y", 0, 8)}, {4});
  c.transpose = {2, 2};
  c.transposed_reads = {0};
  Compute g = rows_op("wgrad", {sl("x", 0, 8), sl("w", 0, 4)}, {4, 0}, {sl("w", 0, 4)}, {1});
  g.sum_rows = true;
  Compute a = comp("acc", 1, {sl("w", 0, 4), sl("y", 0, 4)}, {sl("w", 0, 4)});
  a.fn = "add";
  Schedule s = one_rank_with(c);
  s.append(0, 0, g);
  s.append(0, 0, a);
  ASSERT_THAT(validate(s), ::testing::IsEmpty());
  const std::string text = to_json(s);
  EXPECT_THAT(text, HasSubstr("\"read_rows\": [4, 0], \"write_rows\": [4], \"transpose\": [2, 2], "
                              "\"transposed_reads\": [0]"));
  EXPECT_THAT(text, HasSubstr("\"sum_rows\": true"));
  EXPECT_THAT(text, HasSubstr("\"fn\": \"add\""));
  EXPECT_EQ(parse_schedule(text), s);
  EXPECT_EQ(to_json(parse_schedule(text)), text);
}

}  // namespace
}  // namespace braid::fusion

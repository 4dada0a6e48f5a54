// The data check in bounded memory (docs/replay.md, "Real sizes in bounded memory"): the exact
// scale of a schedule pair, the scaled check agreeing with the full-size one (passes and
// failures, failures located at full size), the refusal with the size needed, and the README's
// example block at the preset's real size under a 2 GB address-space limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "fusion/scale.h"
#include "fusion/schedule_store.h"
#include "replay/ab.h"
#include "replay/replay_schedules.h"
#include "replay/sim.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/test_util.h"

namespace braid::replay {
namespace {

using ::testing::HasSubstr;
using namespace braid::replay::testing;

analysis::CostModel model() { return analysis::CostModel(*analysis::find_profile("cpu-shm")); }

AbOptions check_only(int64_t max_check_bytes) {
  AbOptions o;
  o.steps = 1;
  o.warmup = 0;
  o.model = model();
  o.replay.max_check_bytes = max_check_bytes;
  return o;
}

constexpr int64_t kUnlimited = int64_t{1} << 40;

TEST(ExactScale, DivisorIsTheGcdOfWhatTheBuffersExchange) {
  // 4 ranks, 16 elements: the reduce-scatter's per-rank count 4 bounds x, g, y and shard alike.
  const fusion::Schedule a = allreduce_pair(false, 4, 16), b = allreduce_pair(true, 4, 16);
  fusion::ExactScale k = fusion::exact_scale({&a, &b});
  for (int32_t r = 0; r < 4; ++r)
    for (const char* buf : {"x", "g", "y", "shard"}) EXPECT_EQ(k.of(r, buf), 4) << r << buf;
  // The baseline alone: every count is 16.
  EXPECT_EQ(fusion::exact_scale({&a}).of(0, "g"), 16);

  const fusion::Schedule sb = fusion::scale_down(b, k);
  EXPECT_TRUE(fusion::validate(sb).empty());
  EXPECT_EQ(sb.ranks[0].find_buffer("g")->size, 4);
  EXPECT_EQ(sb.ranks[0].find_buffer("shard")->size, 1);
  EXPECT_EQ(sb.ranks[0].streams[0].ops[1].collective()->count, 1);

  // A slice off the block grid (the consumer reads from element 2) lowers the whole class:
  // g is linked to x and y by the positional computes and to every rank by the collectives.
  fusion::Schedule c = b;
  c.ranks[2].streams[0].ops[3].compute()->reads[0] = sl("g", 2, 14);
  c.ranks[2].streams[0].ops[3].compute()->writes[0] = sl("y", 2, 14);
  k = fusion::exact_scale({&a, &c});
  EXPECT_EQ(k.of(0, "x"), 2);
  EXPECT_EQ(k.of(3, "shard"), 2);
}

TEST(ExactScale, OneElementSlicesAndRowWiseComputeLinkNothing) {
  // A loss of one element read from a large activation, and its gradient written from it: the
  // activation keeps its divisor.
  fusion::Schedule s;
  s.name = "loss";
  s.add_buffer(0, "x", "bfloat16", 64);
  s.add_buffer(0, "loss", "float32", 1);
  s.add_buffer(0, "dx", "bfloat16", 64);
  const int st = s.add_stream(0, "main");
  s.append(0, st, compute_op("loss", 1000, {sl("x", 0, 64)}, {sl("loss", 0, 1)}));
  s.append(0, st, compute_op("loss.bwd", 1000, {sl("loss", 0, 1)}, {sl("dx", 0, 64)}));
  const fusion::ExactScale k = fusion::exact_scale({&s});
  EXPECT_EQ(k.of(0, "x"), 64);
  EXPECT_EQ(k.of(0, "dx"), 64);
  EXPECT_EQ(k.of(0, "loss"), 1);
  // Row-wise, 8 rows of 8 elements: whole rows merge (the scaled op maps its one row to one).
  fusion::Compute rows = compute_op("router", 1000, {sl("x", 0, 64)}, {sl("dx", 0, 64)});
  rows.read_rows = {8};
  rows.write_rows = {8};
  s.ranks[0].streams[0].ops[1].body = rows;
  const fusion::ExactScale kr = fusion::exact_scale({&s});
  EXPECT_EQ(kr.of(0, "x"), 64);
  EXPECT_EQ(kr.of(0, "dx"), 64);
  const fusion::Schedule sr = fusion::scale_down(s, kr);
  EXPECT_TRUE(fusion::validate(sr).empty());
  EXPECT_EQ(sr.ranks[0].streams[0].ops[1].compute()->read_rows[0], 1);
  // A second write of dx's first row only: dx's rows can no longer merge beyond one row, and x
  // (read one row per dx row) follows, back to rows of 8 elements.
  s.append(0, st, compute_op("touch", 1000, {}, {sl("dx", 0, 8)}));
  const fusion::ExactScale kt = fusion::exact_scale({&s});
  EXPECT_EQ(kt.of(0, "dx"), 8);
  EXPECT_EQ(kt.of(0, "x"), 8);
}

// A row-wise copy (every input row written to two consecutive output rows, as the MoE permute
// copies a token to its top-k experts) split in two ops whose halves a broken rewrite swaps:
// the scaled check merges rows and still sees the swap.
TEST(ScaledCheck, MergedRowsStillSeeSwappedHalvesOfARowCopy) {
  auto make = [](int variant) {  // 0: one op, 1: split, 2: split with the halves swapped
    fusion::Schedule s;
    s.name = "copy" + std::to_string(variant);
    s.add_buffer(0, "x", "bfloat16", 8 * 4);   // 8 rows of 4
    s.add_buffer(0, "y", "bfloat16", 16 * 4);  // 16 rows of 4
    s.add_buffer(0, "z", "bfloat16", 16 * 4);
    s.ranks[0].outputs = {"z"};
    const int st = s.add_stream(0, "main");
    auto copy = [&](int64_t in_row, int64_t out_row) {
      fusion::Compute c =
          compute_op("permute", 1000, {sl("x", in_row * 4, 16)}, {sl("y", out_row * 4, 32)});
      c.read_rows = {4};
      c.write_rows = {8};
      return c;
    };
    if (variant == 0) {
      fusion::Compute c = compute_op("permute", 1000, {sl("x", 0, 32)}, {sl("y", 0, 64)});
      c.read_rows = {8};
      c.write_rows = {16};
      s.append(0, st, c);
    } else {
      s.append(0, st, copy(0, variant == 1 ? 0 : 8));
      s.append(0, st, copy(4, variant == 1 ? 8 : 0));
    }
    s.append(0, st, compute_op("use", 1000, {sl("y", 0, 64)}, {sl("z", 0, 64)}));
    return s;
  };
  SimExecutor ex(model());
  const fusion::Schedule base = make(0), split = make(1), swapped = make(2);
  EXPECT_GT(fusion::exact_scale({&base, &split}).of(0, "y"), 4);  // rows merged
  for (const fusion::Schedule* f : {&split, &swapped}) {
    SCOPED_TRACE(f->name);
    AbReport full = run_ab(ex, base, *f, check_only(kUnlimited));
    AbReport scaled = run_ab(ex, base, *f, check_only(1024));
    EXPECT_GT(scaled.data.scale, 4);
    EXPECT_EQ(full.data.ok(), f == &split);
    EXPECT_EQ(scaled.data.ok(), f == &split) << scaled.data.lines("baseline", "fused")[0];
  }
}

// Every preset's rewrite at a tiny shape: checked on the exact scaled copies it passes as at full
// size, and a corrupted rewrite fails there too, at an element whose full-size range really
// differs.
TEST(ScaledCheck, AgreesWithTheFullSizeCheckOnEveryPreset) {
  SimExecutor ex(model());
  for (const Pair& p : fused_pairs(fusion::preset_names())) {
    SCOPED_TRACE(p.what);
    AbReport full = run_ab(ex, p.baseline, p.fused, check_only(kUnlimited));
    ASSERT_TRUE(full.data_ok()) << full.data.lines("baseline", "fused")[0];
    EXPECT_EQ(full.data.scale, 1);
    AbReport scaled = run_ab(ex, p.baseline, p.fused, check_only(1 << 20));
    ASSERT_TRUE(scaled.data_ok()) << scaled.data.lines("baseline", "fused")[0];
    EXPECT_GT(scaled.data.scale, 1);
    EXPECT_LT(scaled.data.elements, full.data.elements);
    EXPECT_EQ(scaled.data.full_elements, full.data.elements);
    EXPECT_EQ(scaled.data.buffers, full.data.buffers);
    EXPECT_THAT(scaled.lines(), ::testing::Contains(HasSubstr("on the exact scaled copies")));

    fusion::Schedule broken = broken_rewrite(p.fused);
    ASSERT_FALSE(broken.ranks.empty()) << "no corrupting swap found";
    AbReport bad_full = run_ab(ex, p.baseline, broken, check_only(kUnlimited));
    AbReport bad = run_ab(ex, p.baseline, broken, check_only(1 << 20));
    ASSERT_FALSE(bad_full.data.ok());
    ASSERT_FALSE(bad.data.ok());
    EXPECT_GT(bad.data.scale, 1);
    ASSERT_FALSE(bad.data.first.empty());
    const Mismatch& m = bad.data.first[0];
    const auto want = fusion::interpret(p.baseline).buffers[m.rank].at(m.buffer);
    const auto got = fusion::interpret(broken).buffers[m.rank].at(m.buffer);
    bool differs = false;
    for (int64_t i = m.index * m.scale; i < (m.index + 1) * m.scale; ++i)
      differs |= want[i] != got[i];
    EXPECT_TRUE(differs) << "rank " << m.rank << " " << m.buffer << " index " << m.index << " x "
                         << m.scale;
  }
}

TEST(ScaledCheck, OverTheLimitEvenScaledIsRefusedWithTheSizeNeeded) {
  SimExecutor ex(model());
  const Pair p = fused_pairs({"tp-sp"}).front();
  try {
    run_ab(ex, p.baseline, p.fused, check_only(16));
    FAIL() << "not refused";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the data check needs "));
    EXPECT_THAT(e.what(), HasSubstr(" at full size and "));
    EXPECT_THAT(e.what(), HasSubstr("at the smallest exact scale (1/"));
    EXPECT_THAT(e.what(), HasSubstr("--max-check-mb"));
  }
  // The replay's check against the interpreter plans the same way.
  ReplayOptions ro;
  ro.max_check_bytes = plan_check(ex, {&p.fused}, true, kUnlimited).full_bytes - 1;
  DataCheck d = check_against_interpreter(ex, p.fused, ro);
  EXPECT_TRUE(d.ok());
  EXPECT_GT(d.scale, 1);
  ro.max_check_bytes = 16;
  EXPECT_THROW(check_against_interpreter(ex, p.fused, ro), Error);
}

// Runs the test's commands from `dir` under an address-space limit (inherited by the braid
// processes it starts), both restored on destruction.
class InDirWithLimit {
 public:
  InDirWithLimit(const std::string& dir, rlim_t bytes) : old_dir_(getcwd(nullptr, 0)) {
    getrlimit(RLIMIT_AS, &old_);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_AS, &lim), 0);
    EXPECT_EQ(chdir(dir.c_str()), 0);
  }
  ~InDirWithLimit() {
    setrlimit(RLIMIT_AS, &old_);
    if (chdir(old_dir_) != 0) std::perror("chdir");
    std::free(old_dir_);
  }
  InDirWithLimit(const InDirWithLimit&) = delete;
  InDirWithLimit& operator=(const InDirWithLimit&) = delete;

 private:
  rlimit old_{};
  char* old_dir_;
};

// The README's example block, as written, at the preset's real size (a 7B-class model on 8 TP
// ranks: 720 GiB of int64 buffers at full size), each command under a 2 GB address-space limit.
TEST(ReadmeExample, TpSpAtTp8PassesItsDataCheckIn2GB) {
#ifdef BRAID_SANITIZE
  GTEST_SKIP() << "runs braid under a 2 GB address-space limit, where ASan cannot map its shadow";
#endif
  test::TempDir dir;
  test::CliResult synth, fuse, ab, refused;
  size_t runs = 0;
  {
    InDirWithLimit limit(dir.path(), 2'000'000'000);
    synth = test::run_braid(dir, "synth --preset tp-sp --tp 8 -o step.braid");
    ASSERT_EQ(synth.code, 0) << synth.err;
    fuse = test::run_braid(dir, "fuse step.braid");
    ASSERT_EQ(fuse.code, 0) << fuse.err;
    ab = test::run_braid(dir, "ab step.braid --backend sim");
    runs = TraceReader("step.braid").runs().size();
    // Without room even for the scaled copies: one line with the size needed, exit non-zero,
    // nothing stored.
    refused = test::run_braid(dir, "ab step.braid --backend sim --max-check-mb 0");
  }
  ASSERT_EQ(ab.code, 0) << ab.out << ab.err;
  EXPECT_THAT(ab.out, HasSubstr("data check passed"));
  EXPECT_THAT(ab.out, HasSubstr("on the exact scaled copies"));
  EXPECT_THAT(ab.out, HasSubstr("fused vs reference interpreter: data check passed"));
  EXPECT_EQ(runs, 2u);

  EXPECT_EQ(refused.code, 1) << refused.out << refused.err;
  EXPECT_THAT(refused.err,
              HasSubstr("braid: error: the data check needs 1200.50 GiB of int64 buffers at full "
                        "size and 4.7 MiB at the smallest exact scale (1/262144)"));
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  EXPECT_EQ(TraceReader(dir.file("step.braid")).runs().size(), runs);
}

// The moe preset at its real size (16 ranks, Mixtral-like, 10890 GiB of int64 buffers unscaled):
// its row-wise MoE compute merges whole token rows in the exact scaled copy, and `braid replay
// --check` passes under the same 2 GB limit.
TEST(ReadmeExample, MoeAtItsRealSizePassesTheCheckIn2GB) {
#ifdef BRAID_SANITIZE
  GTEST_SKIP() << "runs braid under a 2 GB address-space limit, where ASan cannot map its shadow";
#endif
  test::TempDir dir;
  test::CliResult synth, replay;
  {
    InDirWithLimit limit(dir.path(), 2'000'000'000);
    synth = test::run_braid(dir, "synth --preset moe -o moe.braid");
    ASSERT_EQ(synth.code, 0) << synth.err;
    replay = test::run_braid(dir, "replay moe.braid --backend sim --check");
  }
  EXPECT_EQ(replay.code, 0) << replay.out << replay.err;
  EXPECT_THAT(replay.out, HasSubstr("data check passed"));
  EXPECT_THAT(replay.out, HasSubstr("on the exact scaled copies"));
}

}  // namespace
}  // namespace braid::replay

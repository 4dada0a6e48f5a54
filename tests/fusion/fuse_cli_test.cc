// `braid fuse` end to end: a synthesized schedule is fused, the fused schedule and the findings
// are stored together, and usage errors exit 2 without storing anything.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "analysis/hardware.h"
#include "fusion/interpreter.h"
#include "fusion/pass_schedules.h"
#include "fusion/schedule_store.h"

namespace braid::fusion {
namespace {

struct Out {
  int status = -1;
  std::string text;
};

Out run(const std::string& args) {
  Out o;
  std::string cmd = std::string(BRAID_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.text.append(buf, n);
  int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

class FuseCli : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = (std::filesystem::temp_directory_path() /
             ("braid_fuse_" + std::to_string(::getpid()) + ".braid"))
                .string();
    std::filesystem::remove(file_);
    Out o = run("synth --preset tp-sp --layers 2 --hidden 16 --seq 8 --heads 4 --ffn 32 "
                "--micro-batches 1 -q -o " + file_);
    ASSERT_EQ(o.status, 0) << o.text;
  }
  void TearDown() override {
    for (const char* ext : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(file_ + ext);
  }
  std::string file_;
};

TEST_F(FuseCli, StoresFusedScheduleAndFindingsTogether) {
  Out o = run("fuse " + file_ + " --json");
  ASSERT_EQ(o.status, 0) << o.text;
  EXPECT_NE(o.text.find("\"pass\":\"tp-sp\""), std::string::npos) << o.text;
  auto list = list_schedules(file_);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].parent_id, list[0].id);
  EXPECT_NE(list[1].passes.find("\"pass\":\"tp-sp\""), std::string::npos) << list[1].passes;
  auto opps = list_opportunities(file_);
  ASSERT_FALSE(opps.empty());
  bool applied = false;
  for (const auto& op : opps) applied = applied || op.detail.find("\"applied\":true") != std::string::npos;
  EXPECT_TRUE(applied);
  // The stored fused schedule computes the same outputs as the input.
  Schedule a = load_stored_schedule(file_, list[0].id), b = load_stored_schedule(file_, list[1].id);
  Interpretation ia = interpret(a), ib = interpret(b);
  for (size_t r = 0; r < a.ranks.size(); ++r)
    for (const std::string& out : a.ranks[r].outputs) EXPECT_EQ(ia.buffers[r][out], ib.buffers[r][out]);
  // The table names the pass and the total.
  Out t = run("fuse " + file_ + " --schedule " + std::to_string(list[0].id) + " --dry-run");
  ASSERT_EQ(t.status, 0) << t.text;
  EXPECT_NE(t.text.find("tp-sp"), std::string::npos);
  EXPECT_NE(t.text.find("predicted step time (simulated, profile h100-nvlink)"), std::string::npos)
      << t.text;
  EXPECT_NE(t.text.find("fixed point after"), std::string::npos) << t.text;
  EXPECT_EQ(list_schedules(file_).size(), 2u);  // --dry-run stored nothing
}

TEST_F(FuseCli, UsageErrorsExit2AndStoreNothing) {
  Out o = run("fuse " + file_ + " --passes tp-sp,nope");
  EXPECT_EQ(o.status, 2) << o.text;
  EXPECT_NE(o.text.find("braid: error: unknown pass 'nope'"), std::string::npos) << o.text;
  EXPECT_EQ(list_schedules(file_).size(), 1u);
  Out l = run("fuse --list-passes");
  EXPECT_EQ(l.status, 0);
  EXPECT_NE(l.text.find("coalesce"), std::string::npos);
  Out m = run("fuse " + file_ + " --schedule 999");
  EXPECT_NE(m.status, 0);
  EXPECT_EQ(list_schedules(file_).size(), 1u);
}

// --assume on a pass whose advice has no rewrite says so in one line and applies nothing of it;
// on a pass with rewrites it says nothing of the kind.
TEST_F(FuseCli, AssumeOnAPassWithoutRewritesSaysSo) {
  Out o = run("fuse " + file_ + " --assume coc,tp-sp,pp-ep --dry-run");
  ASSERT_EQ(o.status, 0) << o.text;
  const std::string line =
      "braid fuse: --assume coc, pp-ep: the advice of coc, pp-ep has no rewrite to apply under its "
      "assumption (only reorder, tp-sp, dedup have one); it stays advice\n";
  EXPECT_NE(o.text.find(line), std::string::npos) << o.text;
  EXPECT_EQ(o.text.find("braid fuse: --assume", o.text.find(line) + 1), std::string::npos);
  for (const char* a : {"tp-sp", "all", "dedup,reorder"}) {
    Out t = run("fuse " + file_ + " --assume " + a + " --dry-run");
    ASSERT_EQ(t.status, 0) << t.text;
    EXPECT_EQ(t.text.find("no rewrite to apply"), std::string::npos) << a << ": " << t.text;
  }
}

// The number after `key` in `text` (-1 when absent).
double number_after(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

// The simulated step (ns) of a stored schedule, by `braid replay --backend sim`.
double replayed_step_ns(const std::string& file, int64_t id, const std::string& profile) {
  Out o = run("replay " + file + " --schedule " + std::to_string(id) +
              " --backend sim --no-store --steps 1 --warmup 0 --profile " + profile);
  EXPECT_EQ(o.status, 0) << o.text;
  return number_after(o.text, "simulated step: ");
}

// The prediction `braid fuse` prints and stores is the sim backend's difference of the
// baseline and the fused schedule on the same profile, on every preset (tests' shapes), for the
// shipped RTX 4080 PCIe profile and a built-in one.
TEST_F(FuseCli, PredictionIsTheSimulatedDifferenceOnEveryPreset) {
  const std::string rtx = std::string(BRAID_PROFILES_DIR) + "/rtx4080-pcie4.json";
  int saving_presets = 0;
  for (const std::string& preset : preset_names()) {
    for (const std::string& profile : {rtx, std::string("h100-nvlink")}) {
      SCOPED_TRACE(preset + " on " + profile);
      std::filesystem::remove(file_);
      const int64_t base =
          store_schedule(file_, testing::preset_at_test_shape(preset), -1, "[]", true);
      Out f = run("fuse " + file_ + " --profile " + profile + " --json");
      ASSERT_EQ(f.status, 0) << f.text;
      const double predicted = number_after(f.text, "\"predicted_saving_ns\":");
      const double fused_ns = number_after(f.text, "\"fused_step_ns\":");
      const int64_t fused = static_cast<int64_t>(number_after(f.text, "\"fused_schedule\":"));
      EXPECT_NE(f.text.find("\"fixed_point\":true"), std::string::npos);
      const double a = replayed_step_ns(file_, base, profile);
      const double b = replayed_step_ns(file_, fused, profile);
      ASSERT_GT(a, 0);
      EXPECT_NEAR(b, fused_ns, 0.01 * b);
      EXPECT_NEAR(predicted, a - b, 0.01 * std::max(std::abs(a - b), 1.0)) << f.text.substr(0, 400);
      saving_presets += predicted > 0;
      // Stored on the fused schedule as the pipeline's prediction, quoted by `braid ab`.
      bool stored = false;
      for (const auto& op : list_opportunities(file_, fused))
        if (op.pass == "pipeline") {
          stored = true;
          EXPECT_EQ(op.predicted_saving_ns, static_cast<Ns>(predicted));
        }
      EXPECT_TRUE(stored);
      if (preset == "tp-sp" && profile == rtx) {
        Out ab = run("ab " + file_ + " --backend sim --steps 1 --warmup 0 --no-store --profile " +
                     profile);
        ASSERT_EQ(ab.status, 0) << ab.text;
        EXPECT_NEAR(number_after(ab.text,
                                 "braid fuse's predicted saving (simulated on profile "
                                 "rtx4080-pcie4, schedule " +
                                     std::to_string(fused) + "): "),
                    predicted * 1e-6, 1e-3)
            << ab.text;
      }
    }
  }
  EXPECT_GE(saving_presets, 8);  // the rewrites shorten the simulated step on most presets
}

// The same at the shapes of Chimera's experiments (issue 22) on the RTX 4080 PCIe profile, where
// the rewrites save seconds per step.
TEST_F(FuseCli, PredictionIsTheSimulatedDifferenceAtChimeraShapes) {
  const std::string rtx = std::string(BRAID_PROFILES_DIR) + "/rtx4080-pcie4.json";
  const analysis::CostModel cm(analysis::load_profile(rtx));
  for (const std::string preset : {"tp-pp", "tp-ep", "sp-ep", "pp-ep", "pp-sp"}) {
    SCOPED_TRACE(preset);
    std::filesystem::remove(file_);
    const Preset p = testing::preset_at_chimera_shape(preset);
    const int64_t base = store_schedule(file_, synthesize(p.model, p.layout, cm), -1, "[]", true);
    Out f = run("fuse " + file_ + " --profile " + rtx + " --json");
    ASSERT_EQ(f.status, 0) << f.text;
    const double predicted = number_after(f.text, "\"predicted_saving_ns\":");
    const int64_t fused = static_cast<int64_t>(number_after(f.text, "\"fused_schedule\":"));
    const double a = replayed_step_ns(file_, base, rtx), b = replayed_step_ns(file_, fused, rtx);
    EXPECT_GT(a - b, 1e8);  // more than 100 ms
    EXPECT_NEAR(predicted, a - b, 0.01 * (a - b));
  }
}

}  // namespace
}  // namespace braid::fusion

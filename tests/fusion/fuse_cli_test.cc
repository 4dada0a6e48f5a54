// `braid fuse` end to end: a synthesized schedule is fused, the fused schedule and the findings
// are stored together, and usage errors exit 2 without storing anything.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "fusion/interpreter.h"
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
  EXPECT_NE(t.text.find("predicted step-time change"), std::string::npos);
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

}  // namespace
}  // namespace braid::fusion

// The nccl backend on one GPU, one rank end to end: a replay equals the reference interpreter
// (uint64 check mode), compute spin kernels take their recorded time, and the run has every op.
// Skips, saying why, where no GPU is visible (the backend is still compiled and linked).
#include <gtest/gtest.h>

#include "replay/ab.h"
#include "replay/nccl_executor.h"
#include "replay/replay_schedules.h"
#include "trace/error.h"

namespace braid::replay {
namespace {

using namespace braid::replay::testing;

TEST(Nccl, OneRankEndToEnd) {
  if (std::string why = gpu_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  NcclExecutor ex;
  fusion::Schedule s = allreduce_pair(true, 1, 8);
  DataCheck d = check_against_interpreter(ex, s, {});
  EXPECT_TRUE(d.ok());
  EXPECT_GT(d.elements, 0);
  auto p = ex.prepare(s, {});
  p->run_step(false);
  p->run_step(true);
  ReplayResult r = p->collect();
  ASSERT_EQ(r.steps.size(), 1u);
  ASSERT_EQ(r.steps[0].ranks[0].size(), 4u);
  const OpTime& grad = r.steps[0].ranks[0][0];
  EXPECT_GE(grad.end - grad.start, 200'000 - 2'000);  // event resolution ~0.5 us
  EXPECT_LT(grad.end - grad.start, 400'000);
}

TEST(Nccl, RefusesWithoutAGpuAndSaysWhy) {
  if (gpu_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is visible";
  NcclExecutor ex;
  try {
    ex.prepare(allreduce_pair(true, 1, 8), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a GPU"), std::string::npos);
  }
}

}  // namespace
}  // namespace braid::replay

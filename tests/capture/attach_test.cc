// Attach mode end to end, as a user runs it: a real `braid daemon`, a two-rank job (the fake
// NCCL job, the agent injected by `braid record --attach` through LD_PRELOAD) that runs for a
// few seconds, and `braid trigger --duration` in the middle. The capture holds exactly the NCCL
// calls made inside the window, with the right ranks and communicator; the job is unaffected by
// a daemon that is absent or killed mid-window.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::capture {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void clean_rank_env() {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                        "PMI_RANK", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "NCCL_PROFILER_PLUGIN",
                        "BRAID_CAPTURE_OUTPUT", "BRAID_CAPTURE_ATTACH"})
    unsetenv(v);
}

// The daemons and `braid record` processes a test started and has not waited for yet. The
// fixture kills and reaps them when the test ends, so an assertion that fails early leaves none
// behind (a daemon left running would keep ctest's output pipe open, and ctest waits on it).
std::set<pid_t>& live_children() {
  static std::set<pid_t> pids;
  return pids;
}

class Attach : public ::testing::Test {
 protected:
  void TearDown() override {
    for (pid_t p : live_children()) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    live_children().clear();
  }
};

pid_t start_daemon(const std::string& sock, const std::string& out) {
  fs::create_directories(out);
  pid_t pid = fork();
  if (pid == 0) {
    execl(BRAID_CLI, BRAID_CLI, "daemon", "-q", "--socket", sock.c_str(), "--out", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  live_children().insert(pid);
  for (int i = 0; i < 500 && !fs::exists(sock); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return pid;
}

// `braid record --attach ... -- sh -c SCRIPT`, outputs to files in `dir`.
pid_t start_record(const std::string& dir, const std::vector<std::string>& record_args,
                   const std::string& script) {
  pid_t pid = fork();
  if (pid == 0) {
    clean_rank_env();
    setenv("FAKE_NCCL_DIR", dir.c_str(), 1);
    if (!freopen((dir + "/record.out").c_str(), "w", stdout)) _exit(4);
    if (!freopen((dir + "/record.err").c_str(), "w", stderr)) _exit(4);
    std::vector<std::string> args = {BRAID_CLI, "record", "--attach"};
    args.insert(args.end(), record_args.begin(), record_args.end());
    for (std::string a : {"--", "sh", "-c"}) args.push_back(a);
    args.push_back(script);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(BRAID_CLI, argv.data());
    _exit(127);
  }
  live_children().insert(pid);
  return pid;
}

// One rank of the long-running fake job in the background of a shell script.
std::string rank_cmd(const std::string& dir, int rank, int nranks, const std::string& loop) {
  return "RANK=" + std::to_string(rank) + " WORLD_SIZE=" + std::to_string(nranks) +
         " LOCAL_RANK=" + std::to_string(rank) + " " + CAPTURE_FAKE_NCCL_JOB_PLAIN + " " +
         std::to_string(rank) + " " + std::to_string(nranks) + " " + dir + " " + loop + " >" +
         dir + "/out" + std::to_string(rank);
}

int wait_exit(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  live_children().erase(pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct JobCall {
  int64_t before, after;
};
// seq -> host times of the call, as the job printed them.
std::map<int64_t, JobCall> job_calls(const std::string& path, std::string* last_line = nullptr) {
  std::map<int64_t, JobCall> calls;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (last_line) *last_line = line;
    std::istringstream s(line);
    std::string word;
    int64_t seq, before, after;
    if (s >> word >> seq >> before >> after && word == "call") calls[seq] = {before, after};
  }
  return calls;
}

bool wait_for(const std::function<bool()>& cond, int ms) {
  for (int i = 0; i < ms / 20; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

TEST_F(Attach, TriggerCapturesExactlyTheCallsInsideTheWindow) {
  test::TempDir tmp;
  const std::string sock = tmp.file("d.sock"), out = tmp.file("captures");
  pid_t daemon = start_daemon(sock, out);
  ASSERT_TRUE(fs::exists(sock));
  constexpr int kIters = 40, kSleepMs = 50;
  const std::string loop = std::to_string(kIters) + ":" + std::to_string(kSleepMs);
  pid_t rec = start_record(tmp.path(), {"--socket", sock, "--job", "train"},
                           rank_cmd(tmp.path(), 0, 2, loop) + " & p0=$!; " +
                               rank_cmd(tmp.path(), 1, 2, loop) +
                               " & p1=$!; wait $p0 || exit 1; wait $p1 || exit 1");
  // Both ranks registered and a few calls made before the window opens.
  ASSERT_TRUE(wait_for(
      [&] {
        auto r = test::run_braid(tmp, "status --socket " + sock);
        return r.out.find("2 registered processes") != std::string::npos;
      },
      5000))
      << test::run_braid(tmp, "status --socket " + sock).out;
  ASSERT_TRUE(wait_for([&] { return job_calls(tmp.file("out0")).size() >= 6; }, 5000));
  int64_t t0 = now_ns();
  auto trig = test::run_braid(tmp, "trigger --socket " + sock + " --job train --duration 500ms");
  int64_t t1 = now_ns();
  ASSERT_EQ(trig.code, 0) << trig.err;
  EXPECT_THAT(trig.err, HasSubstr("started on 2 processes"));
  EXPECT_THAT(trig.err, HasSubstr("0 dropped, 0 of 2 processes lost"));
  EXPECT_EQ(wait_exit(rec), 0) << test::slurp(tmp.file("record.err"));
  EXPECT_THAT(test::slurp(tmp.file("record.err")),
              HasSubstr("attach mode, job 'train', daemon socket " + sock));
  kill(daemon, SIGTERM);
  EXPECT_EQ(wait_exit(daemon), 0);

  std::string path = trig.out.substr(0, trig.out.find('\n'));
  ASSERT_TRUE(fs::exists(path)) << path;
  TraceReader r(path);
  ASSERT_EQ(r.runs().size(), 1u);
  auto ranks = r.ranks(1);
  ASSERT_EQ(ranks.size(), 2u);
  std::string world;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(ranks[rank].rank, rank);
    EXPECT_EQ(ranks[rank].world_size, 2);
    std::string last;
    auto job = job_calls(tmp.file("out" + std::to_string(rank)), &last);
    ASSERT_EQ(job.size(), static_cast<size_t>(kIters));
    EXPECT_EQ(last, "calls=" + std::to_string(rank == 0 ? kIters + 3 : kIters + 2));

    sql::Stmt q(r.db(),
                "SELECT c.seq, c.enqueue_ns, s.text, c.comm_rank, c.comm_size FROM nccl_calls c "
                "JOIN strings s ON s.id = c.comm_id WHERE c.rank = ? ORDER BY c.seq");
    q.bind(1, rank);
    std::vector<int64_t> seqs;
    while (q.step()) {
      int64_t seq = q.i64(0), enqueue = q.i64(1);
      seqs.push_back(seq);
      ASSERT_EQ(job.count(seq), 1u) << "seq " << seq;
      // The call recorded is the job's call of that sequence number, made during the trigger.
      EXPECT_GE(enqueue, job[seq].before) << "seq " << seq;
      EXPECT_LE(enqueue, job[seq].after) << "seq " << seq;
      EXPECT_GE(enqueue, t0) << "seq " << seq;
      EXPECT_LE(enqueue, t1) << "seq " << seq;
      if (world.empty()) world = q.text(2);
      EXPECT_EQ(q.text(2), world);
      EXPECT_EQ(q.i64(3), rank);
      EXPECT_EQ(q.i64(4), 2);
    }
    // A contiguous run of calls: none missing inside the window; the calls made before it
    // opened and after it closed are absent.
    ASSERT_GE(seqs.size(), 3u);
    for (size_t i = 1; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], seqs[i - 1] + 1);
    EXPECT_GE(seqs.front(), 5);
    EXPECT_LT(seqs.back(), kIters - 1);
    // ~500 ms of 50 ms iterations, with room for a loaded machine.
    EXPECT_LE(static_cast<int64_t>(seqs.size()), (t1 - t0) / (kSleepMs * 1000000LL) + 1);
    // Every captured call became a collective of this rank (host times: no GPU here).
    sql::Stmt c(r.db(), "SELECT COUNT(*), MIN(seq), MAX(seq) FROM collectives WHERE rank = ?");
    c.bind(1, rank);
    ASSERT_TRUE(c.step());
    EXPECT_EQ(c.i64(0), static_cast<int64_t>(seqs.size()));
    EXPECT_EQ(c.i64(1), seqs.front());
    EXPECT_EQ(c.i64(2), seqs.back());
  }
  EXPECT_EQ(world.rfind("nccl:", 0), 0u) << world;
  auto comms = r.communicators(1);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].comm, world);
  EXPECT_EQ(comms[0].nranks, 2);
}

TEST_F(Attach, WithoutADaemonTheJobRunsUnchanged) {
  test::TempDir tmp;
  const std::string sock = tmp.file("nobody.sock");
  pid_t rec = start_record(tmp.path(), {"--socket", sock},
                           rank_cmd(tmp.path(), 0, 1, "10:10"));
  EXPECT_EQ(wait_exit(rec), 0) << test::slurp(tmp.file("record.err"));
  std::string last;
  EXPECT_EQ(job_calls(tmp.file("out0"), &last).size(), 10u);
  EXPECT_EQ(last, "calls=13");  // + unique id, init, destroy
  EXPECT_THAT(test::slurp(tmp.file("record.err")),
              HasSubstr("no braid daemon is listening on " + sock));
  for (auto& e : fs::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().string().find(".braid"), std::string::npos) << "unexpected " << e.path();
}

TEST_F(Attach, DaemonKilledMidWindowThenRestartedTheJobRunsOnAndReregisters) {
  test::TempDir tmp;
  const std::string sock = tmp.file("d.sock"), out = tmp.file("captures");
  pid_t daemon = start_daemon(sock, out);
  // 8 s of calls: the job must outlive the kill, the restart, the agent's reconnection and two
  // more captures on a slow (sanitized, loaded) machine.
  pid_t rec = start_record(tmp.path(), {"--socket", sock}, rank_cmd(tmp.path(), 0, 1, "200:40"));
  auto registered = [&] {
    return wait_for(
        [&] {
          return test::run_braid(tmp, "status --socket " + sock).out.find("1 registered process") !=
                 std::string::npos;
        },
        5000);
  };
  ASSERT_TRUE(registered());
  auto trig = test::run_braid(tmp, "trigger --socket " + sock + " --duration 10s --no-wait");
  ASSERT_EQ(trig.code, 0) << trig.err;
  std::string path = trig.out.substr(0, trig.out.find('\n'));
  EXPECT_THAT(trig.err, HasSubstr("of job sh started on 1 processes"));  // the command's name
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(daemon, SIGKILL);
  wait_exit(daemon);
  int64_t killed = now_ns();
  // The capture file holds, durably, what arrived before the kill: calls of the job only.
  ASSERT_TRUE(fs::exists(path)) << path;
  {
    TraceReader r(path);
    sql::Stmt q(r.db(), "SELECT seq, enqueue_ns FROM nccl_calls");
    while (q.step()) EXPECT_LE(q.i64(1), killed);
  }

  // A new daemon on the same socket: the agent registers again and captures again.
  daemon = start_daemon(sock, out);
  ASSERT_TRUE(registered());
  // No CUDA in this process, so no NVTX step ranges: a steps window ends at once, saying why.
  auto steps = test::run_braid(tmp, "trigger --socket " + sock + " --steps 2");
  ASSERT_EQ(steps.code, 0) << steps.err;
  EXPECT_THAT(steps.err, HasSubstr("0 of 1 processes lost"));
  {
    TraceReader r(steps.out.substr(0, steps.out.find('\n')));
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM nccl_calls"), 0);
    bool said = false;
    for (auto& d : r.diagnostics(1)) said |= d.code == "capture.steps_unavailable";
    EXPECT_TRUE(said);
  }
  int64_t t0 = now_ns();
  auto again = test::run_braid(tmp, "trigger --socket " + sock + " --duration 300ms");
  ASSERT_EQ(again.code, 0) << again.err;
  std::string path2 = again.out.substr(0, again.out.find('\n'));
  EXPECT_EQ(wait_exit(rec), 0) << test::slurp(tmp.file("record.err"));
  kill(daemon, SIGTERM);
  EXPECT_EQ(wait_exit(daemon), 0);

  std::string last;
  auto job = job_calls(tmp.file("out0"), &last);
  EXPECT_EQ(job.size(), 200u);
  EXPECT_EQ(last, "calls=203");  // + unique id, init, destroy
  EXPECT_GT(job.rbegin()->second.before, killed) << "the job went on after the daemon died";
  TraceReader r(path2);
  sql::Stmt q(r.db(), "SELECT seq, enqueue_ns FROM nccl_calls ORDER BY seq");
  std::vector<int64_t> seqs;
  while (q.step()) {
    seqs.push_back(q.i64(0));
    ASSERT_EQ(job.count(q.i64(0)), 1u);
    EXPECT_GE(q.i64(1), t0);
  }
  ASSERT_GE(seqs.size(), 2u);
  for (size_t i = 1; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], seqs[i - 1] + 1);
}

TEST_F(Attach, AForkedChildDoesNotKeepItsParentRegistered) {
  // A forked worker inherits the agent's daemon connection; it must let go of it, or the daemon
  // would think the parent alive (and wait for it in captures) until the worker exits.
  test::TempDir tmp;
  const std::string sock = tmp.file("d.sock"), out = tmp.file("captures");
  pid_t daemon = start_daemon(sock, out);
  setenv("FAKE_JOB_FORK_MS", "4000", 1);
  pid_t rec = start_record(tmp.path(), {"--socket", sock}, rank_cmd(tmp.path(), 0, 1, "10:20"));
  unsetenv("FAKE_JOB_FORK_MS");
  EXPECT_EQ(wait_exit(rec), 0) << test::slurp(tmp.file("record.err"));
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(wait_for(
      [&] {
        return test::run_braid(tmp, "status --socket " + sock).out.find("0 registered processes") !=
               std::string::npos;
      },
      3000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(3000));
  kill(daemon, SIGTERM);
  EXPECT_EQ(wait_exit(daemon), 0);
}

// No launcher rank variables: each process learns its rank from its communicator, tells the
// daemon (`braid status` shows it) and its rows of a capture carry it.
TEST_F(Attach, RanksLearntFromTheCommunicatorReachTheDaemonAndTheCapture) {
  test::TempDir tmp;
  const std::string sock = tmp.file("d.sock"), out = tmp.file("captures");
  pid_t daemon = start_daemon(sock, out);
  ASSERT_TRUE(fs::exists(sock));
  auto plain = [&](int rank, int nranks, const std::string& loop) {
    return std::string(CAPTURE_FAKE_NCCL_JOB_PLAIN) + " " + std::to_string(rank) + " " +
           std::to_string(nranks) + " " + tmp.path() + " " + loop + " >" + tmp.path() + "/out" +
           std::to_string(rank);
  };
  pid_t rec = start_record(tmp.path(), {"--socket", sock, "--job", "train"},
                           plain(1, 2, "40:50") + " & p1=$!; " + plain(0, 2, "40:50") +
                               " & p0=$!; wait $p0 || exit 1; wait $p1 || exit 1");
  std::string st;
  ASSERT_TRUE(wait_for(
      [&] {
        st = test::run_braid(tmp, "status --socket " + sock).out;
        return st.find("2 registered processes") != std::string::npos &&
               st.find("rank    0") != std::string::npos &&
               st.find("rank    1") != std::string::npos;
      },
      5000))
      << st;
  ASSERT_TRUE(wait_for([&] { return job_calls(tmp.file("out1")).size() >= 4; }, 5000));
  auto trig = test::run_braid(tmp, "trigger --socket " + sock + " --job train --duration 400ms");
  ASSERT_EQ(trig.code, 0) << trig.err;
  EXPECT_EQ(wait_exit(rec), 0) << test::slurp(tmp.file("record.err"));

  // One process whose window opens before its communicator exists: its rows are moved onto the
  // rank it learns inside the window (rank 0, which is also the agent's placeholder).
  std::string uid = tmp.file("uid");
  fs::remove(uid);
  setenv("FAKE_JOB_INIT_DELAY_MS", "3000", 1);
  rec = start_record(tmp.path(), {"--socket", sock, "--job", "solo"}, plain(0, 1, "20:20"));
  unsetenv("FAKE_JOB_INIT_DELAY_MS");
  ASSERT_TRUE(wait_for(
      [&] {
        st = test::run_braid(tmp, "status --socket " + sock).out;
        return st.find("1 registered processes") != std::string::npos &&
               st.find("rank   -1") != std::string::npos;
      },
      5000))
      << st;
  auto trig2 = test::run_braid(tmp, "trigger --socket " + sock + " --job solo --duration 4s");
  ASSERT_EQ(trig2.code, 0) << trig2.err;
  EXPECT_EQ(wait_exit(rec), 0) << test::slurp(tmp.file("record.err"));
  kill(daemon, SIGTERM);
  EXPECT_EQ(wait_exit(daemon), 0);

  for (const auto& [t, ranks] : {std::pair{trig, 2}, std::pair{trig2, 1}}) {
    std::string path = t.out.substr(0, t.out.find('\n'));
    SCOPED_TRACE(path);
    ASSERT_TRUE(fs::exists(path));
    TraceReader r(path);
    EXPECT_EQ(r.meta("capture.rank_source"), "largest communicator");
    auto rs = r.ranks(1);
    ASSERT_EQ(rs.size(), static_cast<size_t>(ranks));
    for (int rank = 0; rank < ranks; ++rank) {
      EXPECT_EQ(rs[rank].rank, rank);
      EXPECT_EQ(rs[rank].world_size, ranks);
      EXPECT_GE(sql::scalar(r.db(),
                            "SELECT COUNT(*) FROM nccl_calls WHERE rank = " + std::to_string(rank),
                            -1),
                2);
    }
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM nccl_calls WHERE rank != comm_rank", -1),
              0);
    for (const char* table : {"nccl_calls", "collectives", "streams", "diagnostics"})
      EXPECT_EQ(sql::scalar(r.db(), std::string("SELECT COUNT(*) FROM ") + table +
                                        " WHERE rank < 0 OR rank >= " + std::to_string(ranks),
                            -1),
                0)
          << table;
  }
}

// Issue 19 review: no forced flush mid-run. When a window closes in attach mode the agent asks
// CUPTI for its completed buffers only; a forced flush (which hands over records still in
// flight, to be dropped as incomplete) happens once, at the process's exit. The window's kernels
// reach the capture. The job runs on the CUPTI call recorder (tests/capture/fake_cupti.cc).
TEST_F(Attach, WindowCloseDoesNotForceAFlush) {
  test::TempDir tmp;
  const std::string sock = tmp.file("d.sock"), out = tmp.file("captures");
  pid_t daemon = start_daemon(sock, out);
  ASSERT_TRUE(fs::exists(sock));
  setenv("BRAID_CAPTURE_LIB", CAPTURE_FAKECUPTI_AGENT, 1);
  setenv("FAKE_CUPTI_LOG", tmp.file("cupti.log").c_str(), 1);
  pid_t rec = start_record(tmp.path(), {"--socket", sock, "--job", "fake"},
                           std::string(CAPTURE_FAKE_CUDA_JOB) + " alone 2500 >" + tmp.file("out0"));
  unsetenv("BRAID_CAPTURE_LIB");
  unsetenv("FAKE_CUPTI_LOG");
  ASSERT_TRUE(wait_for(
      [&] {
        auto r = test::run_braid(tmp, "status --socket " + sock);
        return r.out.find("1 registered process") != std::string::npos;
      },
      5000))
      << test::run_braid(tmp, "status --socket " + sock).out;
  auto trig = test::run_braid(tmp, "trigger --socket " + sock + " --job fake --duration 300ms");
  ASSERT_EQ(trig.code, 0) << trig.err;
  EXPECT_EQ(wait_exit(rec), 0) << test::slurp(tmp.file("record.err"));
  EXPECT_EQ(test::slurp(tmp.file("out0")), "alone done\n");
  kill(daemon, SIGTERM);
  EXPECT_EQ(wait_exit(daemon), 0);
  std::string log = test::slurp(tmp.file("cupti.log"));
  int forced = 0, flushes = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("cuptiActivityFlushAll") == std::string::npos) continue;
    ++flushes;
    forced += line.find("cuptiActivityFlushAll 1") != std::string::npos;
  }
  EXPECT_GT(flushes, 3);
  EXPECT_EQ(forced, 1) << log;  // the final drain at exit
  std::string path = trig.out.substr(0, trig.out.find('\n'));
  ASSERT_TRUE(fs::exists(path)) << path;
  TraceReader r(path);
  EXPECT_GT(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels"), 20);
  // Issue 21: the trigger's window (--duration 300ms, timed by the agent's writer cycles)
  // reaches the daemon's file (protocol item 16).
  auto windows = r.capture_windows(1);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_GE(windows[0].end - windows[0].start, 200'000'000);
  EXPECT_LT(windows[0].end - windows[0].start, 2'000'000'000);
}

TEST_F(Attach, UsageErrors) {
  test::TempDir tmp;
  auto r = test::run_braid(tmp, "record --attach -o x.braid -- true");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("with --attach the daemon writes the files"));
  r = test::run_braid(tmp, "record --attach --duration 3 -- true");
  EXPECT_EQ(r.code, 2);
  r = test::run_braid(tmp, "record --job x -- true");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--socket and --job go with --attach"));
}

}  // namespace
}  // namespace braid::capture

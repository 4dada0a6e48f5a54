// `braid daemon`, `braid trigger` and `braid status` as a user runs them: a real daemon process,
// fake agents speaking the real protocol, exit codes and one-line errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "daemon/fake_agent.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::daemon {
namespace {

using ::testing::HasSubstr;
using test::TempDir;




TEST(DaemonCli, DaemonTriggerStatusEndToEnd) {
  TempDir tmp;
  std::string sock = tmp.file("d.sock"), out = tmp.file("captures");
  // No daemon yet: a clear error, exit 1.
  auto r = test::run_braid(tmp, "status --socket " + sock);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("braid: error: no braid daemon is listening on " + sock));
  r = test::run_braid(tmp, "trigger --socket " + sock);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("give --duration or --steps"));
  r = test::run_braid(tmp, "trigger --socket " + sock + " --duration 5parsecs");
  EXPECT_EQ(r.code, 2);

  pid_t pid = fork();
  if (pid == 0) {
    execl(BRAID_CLI, BRAID_CLI, "daemon", "-q", "--socket", sock.c_str(), "--out", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 500 && !std::filesystem::exists(sock); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  {
    testing::FakeAgent a(sock, "train", 0), b(sock, "train", 1);
    ASSERT_TRUE(a.client().wait_registered(5000) && b.client().wait_registered(5000));
    r = test::run_braid(tmp, "status --socket " + sock);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("2 registered processes"));
    EXPECT_THAT(r.out, HasSubstr("job train"));
    r = test::run_braid(tmp, "trigger --socket " + sock + " --duration 300ms");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("started on 2 processes"));
    EXPECT_THAT(r.err, HasSubstr("0 dropped, 0 of 2 processes lost"));
    std::string path = r.out.substr(0, r.out.find('\n'));
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    EXPECT_EQ(path.rfind(out + "/train.", 0), 0u) << path;
    for (int i = 0; i < 500 && (a.window_open() || b.window_open()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    TraceReader reader(path);
    EXPECT_EQ(sql::scalar(reader.db(), "SELECT COUNT(*) FROM kernels") +
                  sql::scalar(reader.db(), "SELECT COUNT(*) FROM collectives"),
              a.rows_sent() + b.rows_sent());
    r = test::run_braid(tmp, "trigger --socket " + sock + " --job nope --steps 2");
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("no registered process of job 'nope' (registered jobs: train)"));
    r = test::run_braid(tmp, "status --json --socket " + sock);
    EXPECT_THAT(r.out, HasSubstr("\"completed\": ["));
  }
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_FALSE(std::filesystem::exists(sock)) << "the socket is removed at exit";
}

}  // namespace
}  // namespace braid::daemon

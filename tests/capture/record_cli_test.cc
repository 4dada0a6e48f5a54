// `braid record` as a user runs it, on a machine where capture is not possible (no GPU or no
// driver, as on the CPU build machines): the command runs unchanged with its exit status, and
// one line says nothing was captured and why. Option errors are usage errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "capture/launcher.h"
#include "trace/test_util.h"

namespace braid::capture {
namespace {

struct Result {
  int code;
  std::string out, err;
};

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result braid(const test::TempDir& tmp, const std::string& args) {
  std::string cmd = std::string(BRAID_CLI) + " " + args + " >" + tmp.file("stdout") + " 2>" +
                    tmp.file("stderr") + " </dev/null";
  int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, slurp(tmp.file("stdout")), slurp(tmp.file("stderr"))};
}

bool any_braid_file(const std::string& dir) {
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().find(".braid") != std::string::npos) return true;
  return false;
}

TEST(RecordCli, WithoutGpuRunsTheCommandUnchangedAndSaysWhy) {
  std::string reason = capture_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "this machine can capture: capture_gpu_test covers it";
  test::TempDir tmp;
  auto r = braid(tmp, "record -o " + tmp.file("job.braid") +
                          " -- sh -c 'echo \"out ${CUDA_INJECTION64_PATH:-none} ${LD_PRELOAD:-none}\";"
                          " echo err >&2; exit 7'");
  EXPECT_EQ(r.code, 7);
  EXPECT_EQ(r.out, "out none none\n");  // no agent injected
  EXPECT_EQ(r.err.rfind("err\n", 0), 0u) << r.err;
  std::string said = r.err.substr(4);
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
  EXPECT_EQ(said.rfind("braid record: nothing captured: ", 0), 0u) << said;
  EXPECT_NE(said.find(reason), std::string::npos) << said;
  EXPECT_NE(said.find("the command ran without capture"), std::string::npos);
  EXPECT_FALSE(any_braid_file(tmp.path()));

  r = braid(tmp, "record -q -o " + tmp.file("job.braid") + " -- sh -c 'kill -TERM $$'");
  EXPECT_EQ(r.code, 128 + 15);  // a signalled command, as a shell reports it
  r = braid(tmp, "record -o " + tmp.file("job.braid") + " -- true");
  EXPECT_EQ(r.code, 0);
}

TEST(RecordCli, OptionErrorsAreUsageErrors) {
  test::TempDir tmp;
  for (const char* args :
       {"record --steps 5-2 -- true", "record --buffer-mb 20 -- true", "record --delay 1 -- true",
        "record --duration 0 -- true", "record --window sometimes -- true",
        "record --trace cuda,gpu -- true", "record --trace , -- true"}) {
    auto r = braid(tmp, std::string(args));
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("braid: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  auto r = braid(tmp, "record -q --trace cuda,nccl -o " + tmp.file("t.braid") + " -- true");
  EXPECT_EQ(r.code, 0) << r.err;  // a valid choice (docs/cli.md's example)
  r = braid(tmp, "record");       // no command
  EXPECT_NE(r.code, 0);
  r = braid(tmp, "record --steps 1-2 --nvtx x -- true");  // two windows
  EXPECT_NE(r.code, 0);
  r = braid(tmp, "record --window steps:3 --steps 1-2 -- true");
  EXPECT_NE(r.code, 0);
  r = braid(tmp, "record -o " + tmp.file("no/such/dir/job.braid") + " -- true");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = braid(tmp, "record -- " + tmp.file("no-such-program"));
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(r.err.find("cannot run"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace braid::capture

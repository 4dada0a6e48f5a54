// scripts/gpu_check.sh on a machine without a GPU (issue 32, item 4): one line saying why, exit 0,
// nothing run; bad usage is one line and exit 2. And what the GPU machine runs (the script and
// every script it starts, transitively) uses no `bc`, which the lent machine does not have: the
// overhead benchmark's whole-run rows came out empty there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "capture/launcher.h"
#include "trace/test_util.h"

namespace braid::capture {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kRoot = BRAID_SOURCE_DIR;

struct Outcome {
  int code = -1;
  std::string out, err;
};

Outcome script(const test::TempDir& tmp, const std::string& shell, const std::string& args) {
  const std::string cmd = shell + " '" + kRoot + "/scripts/gpu_check.sh' " + args + " >'" +
                          tmp.file("out") + "' 2>'" + tmp.file("err") + "' </dev/null";
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, test::slurp(tmp.file("out")),
          test::slurp(tmp.file("err"))};
}

TEST(GpuCheck, WithoutAGpuSaysWhyOnOneLineAndExitsZero) {
  unsetenv("BRAID_CAPTURE_LIB");
  const std::string reason = capture_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "this machine can capture: gpu_check.sh runs for real here";
  test::TempDir tmp;
  // As docs/BENCHMARKS.md shows it (bash), and under a plain sh.
  for (const char* shell : {"bash", "sh"}) {
    Outcome r = script(tmp, shell, "'" BRAID_BINARY_DIR "' 1 '" + tmp.file("logs") + "'");
    EXPECT_EQ(r.code, 0) << shell << ": " << r.err;
    EXPECT_EQ(r.out, "gpu_check: skipped, no GPU to check on: " + reason + "\n") << shell;
    EXPECT_EQ(r.err, "") << shell;
    // Nothing ran: no test log, no benchmark measurements.
    EXPECT_FALSE(fs::exists(tmp.file("logs/capture_gpu_test.log")));
    EXPECT_FALSE(fs::exists(tmp.file("logs/overhead")));
  }
}

TEST(GpuCheck, BadUsageIsOneLineAndExitTwo) {
  test::TempDir tmp;
  Outcome r = script(tmp, "sh", "");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "usage: scripts/gpu_check.sh BUILD_DIR [RUNS] [OUT_DIR]\n");
  r = script(tmp, "sh", "'" + tmp.file("nowhere") + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpu_check: " + tmp.file("nowhere") + ": no such build directory\n");
  r = script(tmp, "sh", "'" + tmp.path() + "'");  // a folder without a build of braid
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(tmp.path() + "/app/braid: not built"));
  r = script(tmp, "sh", "'" BRAID_BINARY_DIR "' five");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpu_check: RUNS must be a positive number, got 'five'\n");
  EXPECT_EQ(r.out, "");
  r = script(tmp, "BRAID_GPU_CHECK_PART_S=soon sh", "'" BRAID_BINARY_DIR "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpu_check: BRAID_GPU_CHECK_PART_S must be a number of seconds, got 'soon'\n");
}

// What one host clock read costs on the machine (braid-bench-capture-ops clock|tsc, quoted in
// docs/BENCHMARKS.md for the H100 machine): no GPU needed, one line per round.
TEST(GpuScripts, ClockCostOpsRunWithoutAGpu) {
  const std::string ops = BRAID_BINARY_DIR "/bench/braid-bench-capture-ops";
  if (!fs::exists(ops)) GTEST_SKIP() << ops << " is not built (it needs nvcc)";
  test::TempDir tmp;
  for (const std::string op : {"clock", "tsc"}) {
    const int st =
        std::system((ops + " " + op + " 1000 2 >'" + tmp.file("out") + "' 2>&1").c_str());
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << test::slurp(tmp.file("out"));
    std::istringstream in(test::slurp(tmp.file("out")));
    int lines = 0;
    for (std::string name; in >> name;) {
      double ns = 0;
      in >> ns;
      EXPECT_EQ(name, op);
      EXPECT_GT(ns, 0.0);
      EXPECT_LT(ns, 100000.0);
      ++lines;
    }
    EXPECT_EQ(lines, 2) << op;
  }
}

// The code of a shell script: comment lines and trailing comments removed.
std::vector<std::string> code_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    if (size_t c = line.find(" #"); c != std::string::npos) line.resize(c);
    out.push_back(line);
  }
  return out;
}

// The scripts the GPU machine runs: scripts/gpu_check.sh and every script of bench/ or scripts/
// it starts, transitively.
std::set<std::string> gpu_scripts() {
  std::set<std::string> seen;
  std::vector<std::string> todo = {"scripts/gpu_check.sh"};
  const std::regex ref(R"(\$(root|here)/((bench/|scripts/)?[A-Za-z0-9_]+\.sh))");
  while (!todo.empty()) {
    const std::string rel = todo.back();
    todo.pop_back();
    if (!seen.insert(rel).second) continue;
    const std::string dir = fs::path(rel).parent_path().string();
    for (const std::string& line : code_lines(kRoot + "/" + rel))
      for (std::sregex_iterator m(line.begin(), line.end(), ref), end; m != end; ++m)
        todo.push_back((*m)[1] == "here" ? dir + "/" + (*m)[2].str() : (*m)[2].str());
  }
  return seen;
}

TEST(GpuScripts, NoScriptTheGpuMachineRunsCallsBc) {
  const std::set<std::string> scripts = gpu_scripts();
  for (const char* s :
       {"scripts/gpu_check.sh", "bench/capture_overhead.sh", "bench/capture_launches.sh"})
    EXPECT_EQ(scripts.count(s), 1u) << s << " is not reached from scripts/gpu_check.sh";
  // bc as a command: at the start of a line or after a pipe, ;, &, ( or a backquote.
  const std::regex bc(R"((^|[|;&(`]|\$\()\s*bc(\s|$))");
  for (const std::string& rel : scripts) {
    ASSERT_TRUE(fs::is_regular_file(kRoot + "/" + rel)) << rel;
    for (const std::string& line : code_lines(kRoot + "/" + rel))
      EXPECT_FALSE(std::regex_search(line, bc)) << rel << ": " << line;
  }
  // The pattern finds what the benchmark did before (its whole-run seconds were `... | bc -l`).
  EXPECT_TRUE(std::regex_search(std::string(R"(echo "$e - $s" | bc -l; })"), bc));
  EXPECT_TRUE(std::regex_search(std::string("x=$(bc <<EOF"), bc));
  EXPECT_FALSE(std::regex_search(std::string("abc def"), bc));
}

}  // namespace
}  // namespace braid::capture

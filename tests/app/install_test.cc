// Braid installed and moved (issue 32, item 6): `cmake --install` of this build into a temporary
// prefix, the tree then moved elsewhere, and the build tree's own agent hidden, so nothing can
// reach back into the build. From the moved tree: braid injects the agent installed beside it
// (and says where it looked when that one is missing too), records the fake CUDA job, reads the
// recording, imports a sample it installed, and braid-view draws the recording. The daemon's
// systemd unit is installed as docs/daemon.md shows it, naming this prefix's braid; the Debian
// package (cpack -G DEB) holds the same tree under /usr.
//
// Recording on a CPU machine: the real agent's CUPTI needs a GPU, so the installed agent is
// checked for what it is (its entry points, the NCCL plugin's name for it), then replaced in the
// moved tree by the same objects built against the CUPTI call recorder (the agent the documentation
// tests inject), and braid finds that one where it finds the real one.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct Outcome {
  int code = -1;
  std::string out, err;
};

// Runs a shell command line in `dir` (stdout and stderr kept apart; a pipeline reads no input).
Outcome sh(const std::string& dir, const std::string& line) {
  const std::string cmd =
      "cd '" + dir + "' && (" + line + ") >'" + dir + "/sh.out' 2>'" + dir + "/sh.err' </dev/null";
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, test::slurp(dir + "/sh.out"),
          test::slurp(dir + "/sh.err")};
}

// The unit as docs/daemon.md shows it: its ini block without the comment line naming where an
// administrator would put it.
std::string documented_unit() {
  std::ifstream in(std::string(BRAID_SOURCE_DIR) + "/docs/daemon.md");
  std::string unit, line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line == "```ini")
      inside = true;
    else if (inside && line == "```")
      break;
    else if (inside && line.rfind("#", 0) != 0)
      unit += line + "\n";
  }
  return unit;
}

std::string without_comments(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("#", 0) != 0) out += line + "\n";
  return out;
}

// The build tree's agent, out of the way for the test's length (restored whatever happens).
class HiddenAgent {
 public:
  explicit HiddenAgent(std::string path) : path_(std::move(path)) {
    fs::rename(path_, path_ + ".hidden-by-install-test");
  }
  ~HiddenAgent() {
    std::error_code ec;
    fs::rename(path_ + ".hidden-by-install-test", path_, ec);
  }

 private:
  std::string path_;
};

TEST(Install, AMovedInstallRecordsReadsAndDrawsWithoutTheBuildTree) {
  test::TempDir tmp;
  const std::string stage = tmp.file("stage"), prefix = tmp.file("moved/opt/braid");
  Outcome r = sh(tmp.path(),
                 "'" CMAKE_COMMAND "' --install '" BRAID_BINARY_DIR "' --prefix '" + stage + "'");
  ASSERT_EQ(r.code, 0) << r.out << r.err;

  // What the prefix holds.
  for (const char* f : {"bin/braid", "bin/braid-view", "share/doc/braid/README.md",
                        "share/doc/braid/docs/capture.md", "share/doc/braid/docs/daemon.md",
                        "share/braid/assets/traces/hta-dlrm/rank-0.json.gz"})
    EXPECT_TRUE(fs::is_regular_file(stage + "/" + f)) << f;
  const std::string agent_dir = stage + "/" BRAID_INSTALL_AGENT_DIR;
  ASSERT_TRUE(fs::is_regular_file(agent_dir + "/libbraid_capture.so"));
  EXPECT_EQ(fs::read_symlink(agent_dir + "/libnccl-profiler-braid.so"), "libbraid_capture.so");
  // The real agent: CUDA's and NVTX's injection hooks, NCCL's API and its profiler plugin.
  void* h = dlopen((agent_dir + "/libbraid_capture.so").c_str(), RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  for (const char* sym :
       {"InitializeInjection", "InitializeInjectionNvtx2", "ncclAllReduce", "ncclProfiler_v5"})
    EXPECT_NE(dlsym(h, sym), nullptr) << sym;
  // The daemon's unit: docs/daemon.md's, with this prefix's braid.
  const std::string unit = test::slurp(stage + "/lib/systemd/system/braid-daemon.service");
  std::string expected = documented_unit();
  ASSERT_THAT(expected, HasSubstr("ExecStart=/usr/local/bin/braid daemon"));
  expected = std::regex_replace(expected, std::regex("/usr/local/bin/braid"), stage + "/bin/braid");
  EXPECT_EQ(without_comments(unit), expected);

  // Moved: a relocatable tree has no path into where it was installed.
  fs::create_directories(fs::path(prefix).parent_path());
  fs::rename(stage, prefix);
  const std::string braid = prefix + "/bin/braid", agent = prefix + "/" BRAID_INSTALL_AGENT_DIR;
  HiddenAgent hidden(CAPTURE_AGENT_LIB);
  const std::string env =
      "unset BRAID_CAPTURE_LIB BRAID_ASSETS_DIR RANK WORLD_SIZE LOCAL_RANK "
      "LD_PRELOAD NCCL_PROFILER_PLUGIN NVTX_INJECTION64_PATH; "
      "export LD_LIBRARY_PATH='" +
      std::string(CAPTURE_FAKE_DRIVER_DIR) + "'; ";

  // The agent injected is the one beside this braid, in every variable that names it.
  r = sh(tmp.path(), env + "'" + braid +
                         "' record -o probe.braid -- sh -c 'echo \"$CUDA_INJECTION64_PATH "
                         "$LD_PRELOAD $NCCL_PROFILER_PLUGIN $NVTX_INJECTION64_PATH\"'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string installed = agent + "/libbraid_capture.so";
  EXPECT_EQ(r.out, installed + " " + installed + " " + installed + " " + installed + "\n");
  // Without it (and the build tree's hidden), braid says where it looked and runs the command.
  fs::rename(installed, installed + ".away");
  r = sh(tmp.path(), env + "'" + braid + "' record -o probe.braid -- true");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "braid record: nothing captured: the capture agent is missing (looked for " +
                       installed +
                       ", then " CAPTURE_AGENT_LIB
                       "; BRAID_CAPTURE_LIB names another); the command ran without capture\n");

  // Recording from the moved tree (the CUPTI-recorder build of the agent where braid looks).
  fs::copy_file(CAPTURE_FAKECUPTI_AGENT, installed);
  r = sh(tmp.path(),
         env + "export RANK=0 WORLD_SIZE=1 FAKE_NCCL_DIR='" + tmp.path() + "'; '" + braid +
             "' record -o job.braid --steps 5-9 -- '" CAPTURE_FAKE_CUDA_JOB "' train 12");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "train 12 steps\n");
  EXPECT_THAT(r.err, HasSubstr("wrote 1 file"));
  const std::string job = tmp.file("job.rank0.braid");
  {
    TraceReader tr(job);
    EXPECT_EQ(tr.steps(1).size(), 5u);
    EXPECT_EQ(sql::scalar(tr.db(), "SELECT COUNT(*) FROM kernels"), 15);
    EXPECT_EQ(tr.capture_windows(1).size(), 1u);
  }
  r = sh(tmp.path(), "'" + braid + "' info job.rank0.braid");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("job.rank0.braid"));
  // A sample of the installed assets, imported.
  r = sh(tmp.path(), "unset BRAID_ASSETS_DIR; '" + braid + "' import '" + prefix +
                         "/share/braid/assets/traces/hta-dlrm/rank-0.json.gz' -o dlrm.braid");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(fs::file_size(tmp.file("dlrm.braid")), 10000u);
  // braid-view of the moved tree draws the recording.
  if (std::system("command -v xvfb-run >/dev/null 2>&1") != 0) {
    std::printf("braid-view not run: no xvfb-run on this machine\n");
    return;
  }
  r = sh(tmp.path(), "xvfb-run -a -s '-screen 0 1280x800x24' '" + prefix +
                         "/bin/braid-view' job.rank0.braid --size 1024x640 --screenshot view.png");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_GT(fs::file_size(tmp.file("view.png")), 1000u);
}

// The Debian package (cpack -G DEB, offline): the same tree under /usr, the unit naming
// /usr/bin/braid, and the Debian packages of the libraries the binaries load as its dependencies.
TEST(Install, TheDebianPackageHoldsTheTreeUnderUsr) {
  test::TempDir tmp;
  if (std::system("command -v dpkg-deb >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no dpkg-deb on this machine (not a Debian system)";
  Outcome r = sh(tmp.path(), "'" CPACK_COMMAND "' --config '" BRAID_BINARY_DIR
                             "/CPackConfig.cmake' -G DEB -B '" +
                                 tmp.path() + "'");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::string deb;
  for (auto& e : fs::directory_iterator(tmp.path()))
    if (e.path().extension() == ".deb") deb = e.path().string();
  ASSERT_FALSE(deb.empty()) << r.out;
  r = sh(tmp.path(), "dpkg-deb -c '" + deb + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string f :
       {"./usr/bin/braid", "./usr/bin/braid-view",
        "./usr/" BRAID_INSTALL_AGENT_DIR "/libbraid_capture.so",
        "./usr/" BRAID_INSTALL_AGENT_DIR "/libnccl-profiler-braid.so",
        "./usr/lib/systemd/system/braid-daemon.service", "./usr/share/doc/braid/README.md",
        "./usr/share/braid/assets/traces/hta-dlrm/rank-0.json.gz"})
    EXPECT_THAT(r.out, HasSubstr(" " + f)) << f;
  r = sh(tmp.path(), "dpkg-deb --fsys-tarfile '" + deb +
                         "' | tar -xO ./usr/lib/systemd/system/braid-daemon.service");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(without_comments(r.out),
            std::regex_replace(documented_unit(), std::regex("/usr/local/bin/"), "/usr/bin/"));
  r = sh(tmp.path(), "dpkg-deb -f '" + deb + "' Depends");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* dep : {"libc6", "libsqlite3-0", "libstdc++6"})
    EXPECT_THAT(r.out, HasSubstr(dep)) << r.out;
}

}  // namespace
}  // namespace braid

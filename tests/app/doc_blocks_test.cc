// The example blocks of README.md and docs/*.md, executed: every command line of a code block
// (fenced or indented) that runs `braid` (directly, as build/app/braid, or under mpirun, torchrun
// or /usr/bin/time) runs in a fresh directory, one directory per document and the lines in the
// document's order (a later line uses what an earlier one wrote), and must exit 0; where the
// document says what a line prints, a key line of it is asserted. The documents' file names are
// bound to test inputs by links in that directory (the real traces of assets/ and tests/data),
// `braid` and build/app/braid to the braid under test, and the parts that need hardware absent
// here to the CPU test doubles of tests/capture: `torchrun` and `python` are scripts that start
// ranks of the fake CUDA job (fake_cuda_job.cc's `train`: NVTX steps, kernels and all-reduces on
// the fake CUPTI and NCCL, with the agent built against them injected by `braid record`), and
// libcuda.so.1 is fake_libcuda.cc, so `braid record` captures as on a GPU machine. Paths outside
// the directory (/scratch/captures) and shapes that would take minutes (docs/replay.md's 8-rank
// recipe) are rewritten per line, each rewrite asserted to still match its document. A line of
// braid-view (build/app/view/braid-view FILE ...) runs under `xvfb-run -a` with `--size 1600x900
// --screenshot` appended: the window loads what the line names (and runs `--replay`'s A/B), draws
// one frame and must write it.
//
// Lines shown with placeholders (`braid replay FILE.braid [--steps N]`, synopses) are not run;
// doc_examples_test checks their verbs and flags like every other line. The lines that cannot
// run here are listed in kNotRunnable with the reason; the list must stay small.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "trace/test_util.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

// The environment braid-view's lines run with (the sanitized build's GL preload,
// tests/CMakeLists.txt).
#ifndef BRAID_VIEW_ENV
#define BRAID_VIEW_ENV ""
#endif
// Seconds one line may run (tests/CMakeLists.txt: longer in the sanitized build, where README's
// `braid fuse` of the tp-sp step takes 35 s alone instead of 3, and several times that beside the
// MPI lines of another document under `ctest -j2`).
#ifndef BRAID_DOC_LINE_TIMEOUT_S
#define BRAID_DOC_LINE_TIMEOUT_S 240
#endif
using ::testing::HasSubstr;

const fs::path kRoot = fs::path(BRAID_TESTS_DATA_ROOT);

struct DocLine {
  std::string doc;   // "README.md", "docs/replay.md"
  int n = 0;         // first line number
  std::string text;  // the command, continuation lines joined, comment and `$ ` removed
};

std::vector<std::string> split(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> v;
  for (std::string t; in >> t;) v.push_back(t);
  return v;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t a = s.find_first_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a);
}

// The program a command line runs, after environment assignments: `braid`, build/app/braid,
// build/app/view/braid-view (under xvfb-run), mpirun, torchrun, /usr/bin/time, a script of
// scripts/, mkdir; not anything else (output shown in a block, `braid: error: ...`, cmake, the
// benchmarks).
bool is_command(const std::string& text) {
  auto t = split(text);
  size_t i = 0;
  while (i < t.size() && std::regex_match(t[i], std::regex("[A-Za-z_][A-Za-z0-9_]*=\\S*"))) ++i;
  if (i >= t.size()) return false;
  const std::string& p = t[i];
  // `braid fuse: ...`, `braid: error: ...`: what a command printed.
  if (i + 1 < t.size() && t[i + 1].back() == ':') return false;
  if (p == "braid" || p == "build/app/braid" || p == "torchrun") return true;
  if (p == "build/app/view/braid-view" || p == "braid-view") return true;
  if (p == "xvfb-run") return text.find("braid-view") != std::string::npos;
  if (p == "mkdir") return true;  // the folder the next lines write into
  if (p == "mpirun" || p == "mpiexec" || p == "/usr/bin/time" || p == "time")
    return std::regex_search(text, std::regex("(^|[ /])braid( |$)"));
  return p.rfind("scripts/braid", 0) == 0;
}

// A synopsis, not an example: placeholders (FILE.braid, N, ID), optional parts ([--steps N]),
// alternatives (sim|mpi) or an ellipsis.
bool is_synopsis(const std::string& text) {
  for (const std::string& tok : split(text)) {
    if (tok[0] == '[' || tok == "..." || tok.find('|') != std::string::npos) return true;
    if (std::regex_match(tok, std::regex("[A-Z][A-Z_]*(\\.braid)?"))) return true;
  }
  return false;
}

// The command lines of a Markdown file's code blocks: fenced ones (not those of another language
// than the shell's, nor a --help output) and indented ones.
std::vector<DocLine> command_lines(const fs::path& p, const std::string& doc) {
  std::vector<std::string> all;
  {
    std::ifstream in(p);
    for (std::string l; std::getline(in, l);) all.push_back(l);
  }
  std::vector<DocLine> out;
  bool fenced = false, skip_fence = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& line = all[i];
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      if (fenced) {
        const std::string lang = trim(line.substr(3));
        skip_fence = !(lang.empty() || lang == "sh" || lang == "bash" || lang == "shell" ||
                       lang == "console");
        for (size_t k = i + 1; k < all.size() && all[k].rfind("```", 0) != 0; ++k)
          if (all[k].find("Usage:") != std::string::npos) skip_fence = true;
      }
      continue;
    }
    if (fenced ? skip_fence : line.rfind("    ", 0) != 0) continue;
    DocLine d{doc, static_cast<int>(i + 1), line};
    while (!d.text.empty() && trim(d.text).back() == '\\' && i + 1 < all.size()) {
      d.text = trim(d.text);
      d.text = d.text.substr(0, d.text.size() - 1) + " " + trim(all[++i]);
    }
    if (size_t hash = d.text.find(" #"); hash != std::string::npos) d.text.resize(hash);
    d.text = trim(d.text);
    if (d.text.rfind("$ ", 0) == 0) d.text = d.text.substr(2);
    if (is_command(d.text)) out.push_back(d);
  }
  return out;
}

std::vector<std::string> documents() {
  std::vector<std::string> docs = {"README.md"};
  std::vector<std::string> more;
  for (auto& e : fs::directory_iterator(kRoot / "docs"))
    if (e.path().extension() == ".md") more.push_back("docs/" + e.path().filename().string());
  std::sort(more.begin(), more.end());
  docs.insert(docs.end(), more.begin(), more.end());
  return docs;
}

// Lines that cannot run on a test machine, with the reason. Keep it small: a line that can run
// on the test doubles belongs in the bindings below.
struct NotRunnable {
  const char* doc;
  const char* prefix;
  const char* why;
};
const NotRunnable kNotRunnable[] = {
    {"docs/daemon.md", "scripts/braid-trigger-all.sh --hosts node[01-16]",
     "fans out over ssh/pdsh to 16 cluster nodes; each node runs the `braid trigger` the "
     "walkthrough above runs"},
    {"docs/daemon.md", "braid merge /shared/captures/train.*.braid",
     "merges the per-node files of that fan-out (one node writes one file per capture, and a rank "
     "in two inputs is refused); docs/capture.md's block runs braid merge on recorded files"},
};

// How a document's lines are bound to this machine.
struct Binding {
  std::vector<std::pair<std::string, std::string>> links;  // name in the directory -> input
  // Text rewrites of the document's lines (each must match at least one line).
  std::vector<std::pair<std::string, std::string>> rewrites;
  std::string env;                      // more `export` assignments for every line
  std::string setup;                    // shell lines run once before the document's lines
  bool needs_capture = false;           // the fake CUDA job and its agent (a CUPTI build)
  std::vector<std::string> background;  // lines (prefixes) started in the background
  // Run after the line with this prefix, before the next one (the daemon's walkthrough waits
  // for the job's processes to register, as its user does).
  std::map<std::string, std::function<void(const std::string& dir)>> after;
};

// A key line the document says a command prints: `out` in its stdout (or stderr) when the
// command is the `nth` (1-based; 0: every) occurrence of `line` in `doc`.
struct Expect {
  std::string doc, line;
  int nth;
  std::string out;
};

std::string assets(const std::string& rel) { return (kRoot / "assets" / rel).string(); }

bool have(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

bool wait_for(const std::function<bool()>& cond, int ms) {
  for (int i = 0; i < ms / 50; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

// `braid status` (default socket) in `dir` lists `n` registered processes.
bool registered(const std::string& dir, int n) {
  const std::string cmd = "cd '" + dir + "' && XDG_RUNTIME_DIR='" + dir + "/run' " + BRAID_CLI +
                          " status > status.out 2>&1";
  if (std::system(cmd.c_str()) != 0) return false;
  return test::slurp(dir + "/status.out").find(std::to_string(n) + " registered processes") !=
         std::string::npos;
}

Binding binding_for(const std::string& doc) {
  Binding b;
  const std::string dlrm = assets("traces/hta-dlrm");
  if (doc == "README.md") {
    b.links = {{"rank0.json.gz", dlrm + "/rank-0.json.gz"},
               {"rank1.json.gz", dlrm + "/rank-1.json.gz"}};
  } else if (doc == "docs/cli.md") {
    b.links = {{"rank-0.json.gz", dlrm + "/rank-0.json.gz"},
               {"rank-1.json.gz", dlrm + "/rank-1.json.gz"}};
  } else if (doc == "docs/analysis.md") {
    b.links = {{"negative_queue_length_values_check/rank0.json.gz",
                test::traces("hta/tests/data/negative_queue_length_values_check/rank0.json.gz")}};
    for (int r = 0; r < 4; ++r)  // the project's 4-rank gloo job, one file per rank
      b.links.push_back(
          {"rank-" + std::to_string(r) + ".json.gz",
           std::string(BRAID_TEST_DATA_DIR) + "/et_tp/a/rank-" + std::to_string(r) + ".json.gz"});
  } else if (doc == "docs/import-kineto.md") {
    for (int r = 0; r < 3; ++r)
      b.links.push_back(
          {"rank-" + std::to_string(r) + ".json",
           std::string(BRAID_TEST_DATA_DIR) + "/legacy_gloo/rank-" + std::to_string(r) + ".json"});
  } else if (doc == "docs/import-et.md") {
    // Two ranks of the project's 4-rank gloo job with its execution traces, and PARAM's
    // one-GPU Kineto + ET pair.
    for (int r = 0; r < 2; ++r)
      for (const char* ext : {".json.gz", ".et.json.gz"})
        b.links.push_back(
            {"rank-" + std::to_string(r) + ext,
             std::string(BRAID_TEST_DATA_DIR) + "/et_tp/a/rank-" + std::to_string(r) + ext});
    b.links.push_back(
        {"trace.json.gz", test::traces("param/et_replay/tests/inputs/linear_kineto.json.gz")});
    b.links.push_back(
        {"et.json.gz", test::traces("param/et_replay/tests/inputs/linear_et.json.gz")});
  } else if (doc == "docs/BENCHMARKS.md") {
    // The import benchmark's 1 GB generated trace: a small real one, same command and flags.
    b.links = {{"g1g.json", std::string(BRAID_TEST_DATA_DIR) + "/legacy_gloo/rank-0.json"}};
  } else if (doc == "docs/replay.md") {
    // The 8-rank recipe at a shape that runs in seconds on two cores (the doc's takes minutes
    // per step): the same commands and flags.
    b.rewrites = {{"--hidden 1024 --heads 8 --seq 512", "--hidden 128 --heads 2 --seq 64"},
                  {"--steps 10 --no-data-check", "--steps 2 --no-data-check"}};
  } else if (doc == "docs/gui.md") {
    // job.braid: README's own job (the DLRM trace imported, lifted, fused and replayed in the
    // sim: runs 1 to 3 and a fused schedule); step.braid: the explorer's schedule of the doc's
    // later block, which the first block opens before that block creates it.
    b.links = {{"rank0.json.gz", dlrm + "/rank-0.json.gz"},
               {"rank1.json.gz", dlrm + "/rank-1.json.gz"}};
    b.setup =
        "braid import rank0.json.gz rank1.json.gz -o job.braid && braid lift job.braid && "
        "braid fuse job.braid && braid ab job.braid --backend sim --steps 2 && "
        "braid synth --preset tp-sp --tp 4 --layers 2 --hidden 256 --seq 128 -o step.braid\n";
  } else if (doc == "docs/capture.md") {
    b.needs_capture = true;
    b.env = "export FAKE_TRAIN='30 5'\n";  // 30 steps: --steps 10-20 is inside
  } else if (doc == "docs/daemon.md") {
    b.needs_capture = true;
    b.env = "export FAKE_TRAIN='300 50'\n";  // long enough for both triggers
    b.env = "mkdir -p scratch-captures\n" + b.env;
    b.rewrites = {{"/scratch/captures", "\"$PWD/scratch-captures\""}};
    b.background = {"braid record --attach"};
    // The job's 8 processes have registered (each at its first CUDA or NCCL call).
    b.after["braid record --attach"] = [](const std::string& dir) {
      ASSERT_TRUE(wait_for([&] { return registered(dir, 8); }, 30000))
          << test::slurp(dir + "/status.out") << test::slurp(dir + "/bg.err");
    };
  }
  return b;
}

const std::vector<Expect> kExpect = {
    // README's own job: the fidelity beside every A/B, and its data check (none can be proved
    // after --assume).
    {"README.md", "build/app/braid ab job.braid --backend sim", 0,
     "median replayed/original over ranks"},
    {"README.md", "build/app/braid ab job.braid --backend sim", 1, "data check passed"},
    {"README.md", "build/app/braid ab job.braid --backend sim", 2,
     "data check: cannot prove equivalence"},
    {"README.md", "build/app/braid ab step.braid --backend sim", 1, "data check passed"},
    {"README.md",
     "mpirun -np 8 --oversubscribe build/app/braid ab small.braid --backend mpi --steps 3", 1,
     "data check passed: 10569736 elements of 40 buffers identical"},
    {"docs/cli.md", "braid replay job.braid", 1, "median replayed/original over ranks"},
    {"docs/analysis.md",
     "mpirun -np 4 --oversubscribe braid analyze rank0.braid rank1.braid rank2.braid rank3.braid",
     1, "rank0.braid and 3 more files: run 1, 4 ranks"},
    {"docs/import-et.md",
     "braid import rank-0.json.gz rank-1.json.gz --et rank-0.et.json.gz rank-1.et.json.gz -o "
     "job.braid",
     1, "execution trace: rank 1: "},
    {"docs/import-et.md", "braid import trace.json.gz et.json.gz -o one-gpu.braid", 1,
     "928 of 928 execution-trace ops joined"},
    {"docs/synth.md", "braid synth --preset tp-sp --tp 8 -o step.braid", 1, "schedule 1 in "},
    {"docs/daemon.md", "braid trigger --duration 5s", 1, "0 dropped, 0 of 8 processes lost"},
    {"docs/daemon.md", "braid trigger --job train --steps 3 --out /scratch/captures", 1,
     "0 dropped, 0 of 8 processes lost"},
    {"docs/daemon.md", "braid trigger --job train --steps 3 --out /scratch/captures", 1,
     "scratch-captures/train."},
    {"docs/daemon.md", "braid status", 1, "8 registered processes"},
    {"docs/capture.md", "braid merge runs/job.rank*.braid -o runs/job.braid", 1,
     "merged 8 files (8 ranks"},
    {"docs/fusion.md", "braid fuse step.braid --assume coc", 1,
     "braid fuse: --assume coc: the advice of coc has no rewrite to apply under its assumption"},
};

class DocBlocks : public ::testing::TestWithParam<std::string> {};

TEST_P(DocBlocks, EveryCommandLineRuns) {
  const std::string doc = GetParam();
  const std::vector<DocLine> lines = command_lines(kRoot / doc, doc);
  if (lines.empty()) GTEST_SKIP() << doc << " shows no braid command line";
  Binding b = binding_for(doc);
#ifndef CAPTURE_FAKE_CUDA_JOB
  if (b.needs_capture)
    GTEST_SKIP() << doc << ": built without the capture agent (no CUPTI): its `braid record` "
                 << "lines have no agent to inject";
#endif
  test::TempDir tmp;
  const std::string dir = tmp.path();
  fs::create_directories(dir + "/bin");
  fs::create_directories(dir + "/build/app");
  fs::create_directories(dir + "/run");
  fs::create_symlink(BRAID_CLI, dir + "/bin/braid");
  fs::create_symlink(BRAID_CLI, dir + "/build/app/braid");
#ifdef BRAID_VIEW
  fs::create_directories(dir + "/build/app/view");
  fs::create_symlink(BRAID_VIEW, dir + "/build/app/view/braid-view");
#endif
  for (auto& [name, target] : b.links) {
    ASSERT_TRUE(fs::exists(target)) << target;
    fs::create_directories(fs::path(dir + "/" + name).parent_path());
    fs::create_symlink(target, dir + "/" + name);
  }
  std::string env = "export PATH='" + dir + "/bin':\"$PATH\" XDG_RUNTIME_DIR='" + dir +
                    "/run' OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n";
#ifdef CAPTURE_FAKE_CUDA_JOB
  if (b.needs_capture) {
    // torchrun --nproc-per-node N SCRIPT and python SCRIPT: ranks of the fake CUDA job,
    // $FAKE_TRAIN steps and ms per step (until the test creates $FAKE_NCCL_DIR/stop), each
    // rank's output in rank<R>.out. The agent injected is the one built against the fake CUPTI.
    const std::string job = std::string(CAPTURE_FAKE_CUDA_JOB) + " train $FAKE_TRAIN";
    test::write_file(dir + "/bin/torchrun",
                     "#!/bin/sh\n"
                     "n=1\n"
                     "while [ $# -gt 1 ]; do case $1 in --nproc-per-node) n=$2; shift 2;; "
                     "*) shift;; esac; done\n"
                     "rm -f \"$FAKE_NCCL_DIR/uid\"; i=0; pids=\n"
                     "while [ $i -lt $n ]; do\n"
                     "  RANK=$i LOCAL_RANK=$i WORLD_SIZE=$n " +
                         job +
                         " > \"$FAKE_NCCL_DIR/rank$i.out\" &\n"
                         "  pids=\"$pids $!\"; i=$((i+1))\n"
                         "done\n"
                         "for p in $pids; do wait $p || exit 1; done\n");
    test::write_file(dir + "/bin/python", "#!/bin/sh\nRANK=0 LOCAL_RANK=0 WORLD_SIZE=1 exec " +
                                              job + " > \"$FAKE_NCCL_DIR/rank0.out\"\n");
    fs::permissions(dir + "/bin/torchrun", fs::perms::owner_all, fs::perm_options::add);
    fs::permissions(dir + "/bin/python", fs::perms::owner_all, fs::perm_options::add);
    env += std::string("export BRAID_CAPTURE_LIB='") + CAPTURE_FAKECUPTI_AGENT +
           "' LD_LIBRARY_PATH='" + CAPTURE_FAKE_DRIVER_DIR + "' FAKE_NCCL_DIR='" + dir + "'\n";
    env +=
        "unset RANK WORLD_SIZE LOCAL_RANK OMPI_COMM_WORLD_RANK SLURM_PROCID PMI_RANK "
        "SLURM_JOB_ID TORCHELASTIC_RUN_ID NCCL_PROFILER_PLUGIN NVTX_INJECTION64_PATH "
        "BRAID_CAPTURE_OUTPUT BRAID_CAPTURE_ATTACH\n";
  }
#endif
  env += b.env;

  // The daemon the walkthrough triggers: the systemd unit's ExecStart, its paths bound here.
  pid_t daemon = -1;
  if (doc == "docs/daemon.md") {
    std::ifstream in(kRoot / doc);
    std::string exec;
    for (std::string l; std::getline(in, l);)
      if (l.rfind("ExecStart=", 0) == 0) exec = l.substr(10);
    ASSERT_THAT(exec, HasSubstr("/usr/local/bin/braid daemon --socket /run/braid/daemon.sock"));
    for (auto [from, to] : {std::pair<std::string, std::string>{"/usr/local/bin/braid", BRAID_CLI},
                            {"/run/braid/daemon.sock", dir + "/run/braid/daemon.sock"},
                            {"/var/lib/braid/captures", dir + "/var-captures"}})
      exec.replace(exec.find(from), from.size(), to);
    fs::create_directories(dir + "/var-captures");
    daemon = fork();
    if (daemon == 0) {
      if (!freopen((dir + "/daemon.err").c_str(), "w", stderr)) _exit(4);
      execl("/bin/sh", "sh", "-c", ("exec " + exec).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ASSERT_TRUE(wait_for([&] { return fs::exists(dir + "/run/braid/daemon.sock"); }, 10000))
        << test::slurp(dir + "/daemon.err");
  }

  if (!b.setup.empty()) {
    test::write_file(dir + "/setup.sh", "cd '" + dir + "'\n" + env + b.setup);
    const int st = std::system(("sh '" + dir + "/setup.sh' >'" + dir + "/setup.out' 2>&1").c_str());
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << test::slurp(dir + "/setup.out");
  }

  std::map<std::string, int> seen;  // occurrences of each line so far
  std::vector<pid_t> background;
  size_t ran = 0, synopses = 0;
  std::vector<bool> rewrite_used(b.rewrites.size(), false);
  for (const DocLine& d : lines) {
    const std::string where = d.doc + ":" + std::to_string(d.n) + ": " + d.text;
    if (is_synopsis(d.text)) {
      ++synopses;
      continue;
    }
    bool listed = false;
    for (const NotRunnable& nr : kNotRunnable)
      listed |= d.doc == nr.doc && d.text.rfind(nr.prefix, 0) == 0;
    if (listed) continue;
    if ((d.text.rfind("mpirun", 0) == 0 || d.text.find(" mpirun ") != std::string::npos) &&
        !have("mpirun")) {
      std::printf("%s: not run, no mpirun on this machine\n", where.c_str());
      continue;
    }
    // braid-view: one frame of the window, written as a PNG, under a virtual display.
    const bool view = d.text.find("braid-view") != std::string::npos;
    std::string screenshot;
    if (view) {
#ifndef BRAID_VIEW
      std::printf("%s: not run, braid-view is not built here\n", where.c_str());
      continue;
#endif
      if (!have("xvfb-run")) {
        std::printf("%s: not run, no xvfb-run on this machine\n", where.c_str());
        continue;
      }
    }
    std::string cmd = d.text;
    if (view && d.text.rfind("xvfb-run", 0) != 0) {
      screenshot = "view" + std::to_string(d.n) + ".png";
      cmd = std::string(BRAID_VIEW_ENV) + " xvfb-run -a -s \"-screen 0 1920x1080x24\" " + cmd +
            " --size 1600x900 --screenshot " + screenshot;
    }
    for (size_t k = 0; k < b.rewrites.size(); ++k)
      for (size_t at = cmd.find(b.rewrites[k].first); at != std::string::npos;
           at = cmd.find(b.rewrites[k].first, at + b.rewrites[k].second.size())) {
        cmd.replace(at, b.rewrites[k].first.size(), b.rewrites[k].second);
        rewrite_used[k] = true;
      }
    const int nth = ++seen[d.text];
    bool bg = false;
    for (const std::string& p : b.background) bg |= d.text.rfind(p, 0) == 0;
    test::write_file(dir + "/line.sh", "cd '" + dir + "'\n" + env + cmd + "\n");
    ++ran;
    std::printf("[%s] %s\n", bg ? "background" : "run", where.c_str());
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    if (bg) {
      fs::rename(dir + "/line.sh", dir + "/bg.sh");
      pid_t pid = fork();
      if (pid == 0) {
        if (!freopen((dir + "/bg.out").c_str(), "w", stdout)) _exit(4);
        if (!freopen((dir + "/bg.err").c_str(), "w", stderr)) _exit(4);
        execl("/bin/sh", "sh", (dir + "/bg.sh").c_str(), static_cast<char*>(nullptr));
        _exit(127);
      }
      background.push_back(pid);
    } else {
      const int st =
          std::system(("timeout -k 5 " + std::to_string(BRAID_DOC_LINE_TIMEOUT_S) + " sh '" + dir +
                       "/line.sh' >'" + dir + "/out' 2>'" + dir + "/err' </dev/null")
                          .c_str());
      const std::string out = test::slurp(dir + "/out"), err = test::slurp(dir + "/err");
      ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
          << where << "\nran: " << cmd << "\nexit " << (WIFEXITED(st) ? WEXITSTATUS(st) : -1)
          << "\n"
          << out << err;
      if (!screenshot.empty()) {
        EXPECT_GT(fs::exists(dir + "/" + screenshot) ? fs::file_size(dir + "/" + screenshot) : 0,
                  1000u)
            << where << ": no screenshot\n"
            << out << err;
        fs::remove(dir + "/" + screenshot);
      }
      for (const Expect& e : kExpect) {
        if (e.doc == d.doc && e.line == d.text && (e.nth == 0 || e.nth == nth)) {
          EXPECT_THAT(out + err, HasSubstr(e.out)) << where;
        }
      }
    }
    std::printf("  %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (auto& [prefix, hook] : b.after)
      if (d.text.rfind(prefix, 0) == 0) hook(dir);
    if (::testing::Test::HasFatalFailure()) break;
  }
  // The background job ends (the fake job's ranks stop at their next step), with status 0.
  test::write_file(dir + "/stop", "");
  for (pid_t pid : background) {
    int st = -1;
    bool done = wait_for([&] { return waitpid(pid, &st, WNOHANG) == pid; }, 30000);
    if (!done) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
    }
    EXPECT_TRUE(done && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << doc << ": background line: " << test::slurp(dir + "/bg.err");
  }
  if (daemon > 0) {
    kill(daemon, SIGTERM);
    int st = -1;
    waitpid(daemon, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << test::slurp(dir + "/daemon.err");
  }
  for (size_t k = 0; k < b.rewrites.size(); ++k)
    EXPECT_TRUE(rewrite_used[k]) << doc << ": the rewrite of '" << b.rewrites[k].first
                                 << "' matches no line any more";
  for (const Expect& e : kExpect) {
    if (e.doc == doc) {
      EXPECT_GE(seen[e.line], std::max(e.nth, 1)) << doc << ": no line '" << e.line << "'";
    }
  }
  std::printf("%s: %zu lines run, %zu synopses\n", doc.c_str(), ran, synopses);
}

INSTANTIATE_TEST_SUITE_P(Docs, DocBlocks, ::testing::ValuesIn(documents()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// The list of lines that are not run stays small, each entry names a line that still exists
// (doc_examples_test checks its verb and flags), and a document with bindings still has command
// lines.
TEST(DocBlocks, FewLinesAreNotRunAndEachIsStillThere) {
  EXPECT_LE(std::size(kNotRunnable), 2u);
  for (const NotRunnable& nr : kNotRunnable) {
    bool found = false;
    for (const DocLine& d : command_lines(kRoot / nr.doc, nr.doc))
      found |= d.text.rfind(nr.prefix, 0) == 0;
    EXPECT_TRUE(found) << nr.doc << ": no line '" << nr.prefix << "' any more";
    EXPECT_GT(std::string(nr.why).size(), 20u);
  }
  size_t total = 0;
  for (const std::string& doc : documents()) total += command_lines(kRoot / doc, doc).size();
  EXPECT_GT(total, 40u);
}

}  // namespace
}  // namespace braid

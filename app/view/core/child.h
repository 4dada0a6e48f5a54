// braid-view's "Replay A/B...": `braid ab` for a baseline / fused pair, run as a child process
// (under mpirun for the mpi and nccl backends) in its own process group, with its output read
// live by a thread, a cancel that ends the whole group, and what the window needs from the
// output when it ends (the stored runs, the speedup, the data-check verdict, the first error
// line). No OpenGL, no ImGui: unit-tested in tests/view/core_test.cc.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace braid::view {

// One child process with stdout and stderr merged into one log.
class ChildProcess {
 public:
  // Starts argv[0] (searched in PATH when it has no '/') with `argv`. A start that fails (no
  // such program) shows as a finished child with exit status 127 and the reason in the log.
  explicit ChildProcess(std::vector<std::string> argv);
  ~ChildProcess();  // cancels a running child and waits for it
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool finished() const { return finished_.load(); }
  // After finished(): the exit code, or 128 + the signal that ended it.
  int exit_status() const { return status_.load(); }
  bool cancelled() const { return cancel_.load(); }
  std::string log() const;
  pid_t pid() const { return pid_; }
  // SIGTERM to the child's process group, SIGKILL to it 2 s later if it is still there.
  void cancel();

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::atomic<bool> finished_{false}, cancel_{false};
  std::atomic<int> status_{-1};
  mutable std::mutex mu_;
  std::string log_;
  std::thread thread_;
  void reader();
};

enum class AbBackend { Sim, Mpi, Nccl };

struct AbRequest {
  std::string braid;  // the `braid` executable
  std::string file;
  int64_t baseline = -1, fused = -1;  // schedule ids (-1: braid ab's defaults)
  AbBackend backend = AbBackend::Sim;
  int ranks = 0;   // mpi / nccl: mpirun -np (0: the schedule's rank count)
  int steps = 10;  // braid ab --steps
  std::string mpirun = "mpirun";
};
// The command line run for `r`.
std::vector<std::string> ab_command(const AbRequest& r);
std::string shell_line(const std::vector<std::string>& argv);  // for the panel and the docs

// What the window shows of a finished `braid ab --json` (its JSON, docs/cli.md "JSON output";
// the first error line from the rest of the log).
struct AbOutcome {
  int64_t baseline_run = -1, fused_run = -1;  // "stored_runs"
  std::string speedup;                        // "speedup 1.250x (paired per-step ratios: ...)"
  std::string data_check;                     // "data check passed: N elements of M buffers ..."
  std::string first_error;                    // the first line with "error" in it
};
AbOutcome parse_ab_output(const std::string& log);

// The `braid` executable next to braid-view: $BRAID_EXE, else ../braid from the build tree
// (build/app/braid beside build/app/view/braid-view), else braid beside braid-view, else `braid`
// from PATH.
std::string find_braid_exe();

}  // namespace braid::view

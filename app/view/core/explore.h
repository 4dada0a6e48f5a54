// The schedule explorer (braid-view's Opportunities tab): a choice of the findings of a stored
// schedule, re-run in the background with the library calls of `braid fuse`
// (replay::fuse_simulated: fusion::run_pipeline judged by the sim backend) and of `braid replay
// --backend sim` (replay::SimExecutor, one step), with the simulated baseline and fused steps
// written as runs of a scratch `.braid` file that the window shows in compare mode. "Save"
// stores the chosen fused schedule in the file as `braid fuse` does (fusion::store_fused).
// No OpenGL, no ImGui: unit-tested in tests/view/core_test.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fusion/ir.h"
#include "fusion/pipeline.h"

namespace braid::view {

// One finding of the pipeline as the explorer lists it.
struct ExploreFinding {
  enum class Status { Applied, Advice, Skipped, Deselected };
  fusion::FindingKey key;
  Status status = Status::Advice;
  std::vector<int32_t> ranks;
  Ns local_saving_ns = 0;
  std::string summary, assumption;
  bool legal = false;
  bool assumed = false;     // applied advice, under its assumption (braid fuse --assume)
  bool can_assume = false;  // advice the pass has a rewrite for
  bool ticked = false;      // applied in this result
  // Whether ticking it can apply it: legal findings (forced in when the pipeline would not
  // apply them by itself) and advice with a rewrite (applied under its assumption, as
  // `braid fuse --assume PASS` does, the other advice of that pass left out); advice the pass
  // cannot rewrite cannot be ticked.
  bool can_tick() const { return legal || can_assume || assumed; }
};
const char* to_string(ExploreFinding::Status s);

// What one run of the explorer gives.
struct ExploreResult {
  int64_t schedule_id = -1;  // the stored schedule explored (the fused one's parent)
  std::string profile;       // the profile's name
  fusion::PipelineResult pipeline;
  std::vector<ExploreFinding> findings;  // applied first (pipeline order), then the rest
  // The scratch file: the baseline schedule, the fused one (parent: the baseline) and one
  // simulated step of each as runs `baseline_run` and `fused_run`.
  std::string scratch;
  int64_t baseline_run = -1, fused_run = -1;
  double seconds = 0;  // wall time of the run
  Ns baseline_step_ns() const { return pipeline.baseline_step_ns; }
  Ns fused_step_ns() const { return pipeline.fused_step_ns; }
};

struct ExploreRequest {
  std::string path;          // the .braid file
  int64_t schedule_id = -1;  // -1: the newest root schedule
  std::string profile = "h100-nvlink";
  std::set<fusion::FindingKey> skip, force;  // fusion::PipelineOptions
  std::vector<std::string> assume;           // passes whose ticked advice is applied
};

// Runs one request on the caller's thread. `cancel` / `progress` as in PipelineOptions;
// `scratch` is the file to write (created; must not exist). Throws braid::Error.
ExploreResult explore(const ExploreRequest& req, const std::string& scratch,
                      const std::atomic<bool>* cancel = nullptr,
                      std::atomic<double>* progress = nullptr);

// The root schedule explore() opens by default: the newest schedule without a parent, -1 when
// the file has none.
int64_t default_root_schedule(const std::string& path);

// A file operation of the Opportunities tab ("Save", "Lift") on a thread of its own, so a frame
// never waits for the file: at most one at a time, with the explorer's progress and cancel (the
// `cancel` flag and `progress` fraction its function is handed, as PipelineOptions takes them).
// The function returns what the window says when it is done and the id it stored (a schedule),
// or throws braid::Error; a
// cancelled one leaves the file as it was (the operations it runs store all or nothing, after
// their last cancellation point).
class FileTask {
 public:
  struct Outcome {
    std::string message;
    int64_t id = -1;
  };
  using Fn = std::function<Outcome(const std::atomic<bool>& cancel, std::atomic<double>& progress)>;
  FileTask() = default;
  ~FileTask();  // cancels and joins
  FileTask(const FileTask&) = delete;
  FileTask& operator=(const FileTask&) = delete;

  // Starts `fn`, named `what` ("save", "lift"); false (nothing started) while one is running.
  bool start(std::string what, Fn fn);
  bool busy() const { return !taken_; }
  double fraction() const { return progress_.load(); }
  void cancel() { cancel_ = true; }
  // Takes a finished task in: true once per task, when message() or error() is its outcome.
  bool poll();
  void wait();  // blocks until it has finished and polls it
  const std::string& what() const { return what_; }
  const std::string& message() const { return out_.message; }
  int64_t id() const { return out_.id; }
  const std::string& error() const { return error_; }
  bool cancelled() const { return cancelled_; }
  // Counts the tasks taken in (whoever polled).
  int generation() const { return generation_; }

 private:
  std::thread thread_;
  std::atomic<bool> cancel_{false}, finished_{false};
  std::atomic<double> progress_{0};
  bool taken_ = true;
  std::string what_, error_;
  Outcome out_;            // written by the thread before finished_, read once taken
  std::string out_error_;  // the same
  bool cancelled_ = false;
  int generation_ = 0;
};

// The explorer's state across frames: at most one run in flight; a new request cancels the one
// running (which is joined once it has stopped, never by a frame waiting for it).
class Explorer {
 public:
  Explorer();
  ~Explorer();  // cancels and joins; removes the scratch files
  Explorer(const Explorer&) = delete;
  Explorer& operator=(const Explorer&) = delete;

  // Starts a run (cancelling the one in flight).
  void start(ExploreRequest req);
  // The user's choice, from the last result: the keys to skip and to force so that exactly
  // `ticked` findings (by key) are chosen. Then start()s.
  void choose(const std::vector<ExploreFinding>& findings);
  void cancel();
  bool busy() const;
  double fraction() const;
  // Takes a finished run in: true when `result()` or `error()` changed.
  bool poll();
  // Counts the changes of `result()` and `error()` (whoever polled).
  int generation() const { return generation_; }
  const std::optional<ExploreResult>& result() const { return result_; }
  const std::string& error() const { return error_; }
  const ExploreRequest& request() const { return request_; }
  // Blocks until nothing is in flight (tests, the headless screenshot).
  void wait();
  // Stores the result's fused schedule in the request's file as `braid fuse` does; returns its
  // id. Throws braid::Error (ErrorCode::Usage "cancelled" when `cancel` was set before the
  // store began: the file is then as it was).
  int64_t save(const std::atomic<bool>* cancel = nullptr,
               std::atomic<double>* progress = nullptr) const;
  // The same for a FileTask: a copy of the result and the request, so the explorer may go on
  // with new choices while it stores. Its outcome: the saved schedule's id, and "saved as
  // schedule N (parent M) in FILE".
  FileTask::Fn save_task() const;

 private:
  struct Job {
    std::thread thread;
    std::atomic<bool> cancel{false}, finished{false};
    std::atomic<double> progress{0};
    std::mutex mu;
    std::optional<ExploreResult> result;
    std::string error;
  };
  std::string dir_;  // scratch directory
  int counter_ = 0;
  int generation_ = 0;
  ExploreRequest request_;
  std::unique_ptr<Job> job_;                   // in flight
  std::vector<std::unique_ptr<Job>> retired_;  // cancelled, still stopping
  std::optional<ExploreResult> result_;
  std::string error_;
  std::string shown_scratch_;
  void reap();
};

}  // namespace braid::view

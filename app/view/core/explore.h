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
  // id. Throws braid::Error.
  int64_t save() const;

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

// Loading a run of a `.braid` file into ViewRun, on the caller's thread or in the background
// with a progress fraction that frames can show while they keep drawing. A load hands over the
// run as it grows: its ranks and steps first, then the lanes and collectives a rank at a time,
// so frames show the first ranks while the rest stream in (the way Tracy shows a capture as it
// arrives); the cross-rank matching and the metrics come with the last.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "app/view/core/view_run.h"

namespace braid::view {

struct LoadProgress {
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> total{1};
  std::atomic<bool> cancel{false};
  double fraction() const {
    int64_t t = total.load();
    return t > 0 ? std::min(1.0, static_cast<double>(done.load()) / static_cast<double>(t)) : 0.0;
  }
};

// Called on the loading thread with each ViewRun a load hands over; the last one is complete.
using Publish = std::function<void(std::shared_ptr<ViewRun>)>;

// Reads every event of `run_id` (kernels, memcpys, collectives, CPU calls, annotations) into
// lanes, one rank at a time: each rank read once through the analysis's per-rank load
// (analysis::fill_collectives, fill_rank), its metrics rows and each collective's exposed time
// computed, its rows let go as soon as its lanes are made (its collectives are kept, once, for
// the view and the matching); then the matching and the per-collective metrics, as `braid
// analyze` computes them. A second thread reads the next rank while one is made into lanes.
// Returns the complete run. Throws braid::Error naming the file (missing file, no such run,
// cancelled).
std::shared_ptr<ViewRun> load_view_run(const std::string& path, int64_t run_id,
                                       LoadProgress* progress = nullptr,
                                       const Publish& publish = nullptr);

// A process that loads runs (braid-view, its benchmark) calls this first: every allocation of
// 1 MiB or more (a rank's rows, a lane's events) is mapped on its own and given back to the
// system when freed, where glibc by default raises that threshold as large blocks are freed and
// keeps later ones in its heaps, which a load a rank at a time then leaves behind (about 10% of
// the resident memory of a 100 M-event run).
void lean_malloc();

// One load on its own thread. The destructor cancels and joins.
class BackgroundLoad {
 public:
  // `derive`, when given, runs on the loading thread after the data is loaded (statistics
  // that would otherwise stall a frame); its exceptions count as load errors.
  BackgroundLoad(std::string path, int64_t run_id,
                 std::function<void(const ViewRun&)> derive = nullptr);
  ~BackgroundLoad();
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

  bool finished() const { return finished_.load(); }
  double fraction() const { return progress_.fraction(); }
  // The latest ViewRun handed over (null before the first), and how many have been: a frame
  // takes the latest when the count moved. After finished(): the complete run, or null with
  // error() set.
  std::shared_ptr<ViewRun> result() const;
  int64_t handed_over() const { return handed_over_.load(); }
  std::string error() const;
  const std::string& path() const { return path_; }
  int64_t run_id() const { return run_id_; }

 private:
  std::string path_;
  int64_t run_id_;
  LoadProgress progress_;
  std::atomic<bool> finished_{false};
  std::atomic<int64_t> handed_over_{0};
  mutable std::mutex mu_;
  std::shared_ptr<ViewRun> data_;
  std::string error_;
  std::thread thread_;
};

}  // namespace braid::view

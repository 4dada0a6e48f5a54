// `braid analyze`: everything the analysis component computes for one run, as one result, with
// a readable text report, a JSON form, and storage into the `.braid` file for the GUI
// (analysis/store.h; tables in docs/schema.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/clock.h"
#include "analysis/critical_path.h"
#include "analysis/exchange.h"
#include "analysis/hardware.h"
#include "analysis/job.h"
#include "analysis/matching.h"
#include "analysis/metrics.h"
#include "analysis/parallelism.h"
#include "analysis/trace_calibration.h"
#include "trace/reader.h"

namespace braid::analysis {

struct AnalyzeOptions {
  int64_t run = -1;             // -1: default_run()
  int64_t step = -1;            // -1: the whole run and every step
  std::string profile = "h100-nvlink";  // built-in name or JSON file
  bool solve_clocks = true;     // false: keep the offsets stored in the file
  int top_kernels = 10;
  bool hta_compat = false;  // whole-run rows in HTA's default window (MetricsOptions)
  // One file analyzed rank by rank and a batch of steps at a time (analysis/stream.h): -1 when
  // the whole run would take more than stream_above_bytes or half the memory left, and more
  // than streaming it; 0 never; 1 always. The result is the same either way.
  int stream = -1;
  int64_t stream_above_bytes = int64_t{1} << 30;
  // GPU ops of every rank in one batch of steps, about; 0: as many as one rank has on average
  // (at least 10,000), so that a batch holds about what one rank's pass holds.
  int64_t batch_ops = 0;
  // Called as a streamed analysis goes ("ranks": each rank's pass; "steps": the critical paths'
  // batches) with what is done of how much; may be empty.
  std::function<void(std::string_view what, int64_t done, int64_t total)> progress;
};

struct CollectiveSummary {  // per (communicator, op, size)
  std::string comm;
  CollOp op = CollOp::Unknown;
  int64_t bytes = -1;
  int32_t nranks = 0;
  int64_t count = 0;
  Ns median_wait_ns = 0, median_transfer_ns = 0;
  double median_busbw_gbps = 0;
  Ns predicted_ns = -1;  // calibrated model (or profile) for this size, -1 if size unknown
};

struct Analysis {
  std::string path;            // the file, or the first of the job's files and how many more
  std::vector<JobFile> files;  // the job's files: their runs, ranks, and who loaded them
  int64_t run_id = -1;
  int64_t step = -1;
  bool hta_compat = false;
  std::vector<int32_t> ranks;
  HardwareProfile profile;
  MatchResult match;
  ClockFit clocks;
  Metrics metrics;
  std::vector<CriticalPath> paths;  // one per step (or the whole run when there are no steps)
  std::map<std::string, CommCost> costs;  // calibrated communicators
  std::vector<CollectiveSummary> summary;
  std::vector<CommLabel> labels;
  std::vector<Diagnostic> diagnostics;  // matching + clocks
  std::map<int32_t, int64_t> collectives_per_rank;
};

Analysis analyze(const TraceReader& reader, const AnalyzeOptions& opt = {});

// A job stored as several files (one per rank or node; analysis/job.h), by this process alone or
// spread over the processes of `ex` (`mpirun -np N braid analyze FILES...`): every process ends
// with the same result, that of one process analyzing all the files.
Analysis analyze_files(const std::vector<std::string>& paths, const AnalyzeOptions& opt,
                       Exchange& ex);

// The parts of analyze(), for its streamed form (analysis/stream.h). begin_analysis: the
// header, the step's check, matching and clocks, on a job whose ranks have at least their
// collectives and steps; metrics_options: the metrics `opt` asks for; path_steps: the steps with
// a critical path (-1 alone: the whole run); finish_analysis, once metrics and paths are in: the
// paths' diagnostics, calibrated costs, parallelism labels and the per-size summary.
Analysis begin_analysis(const Job& job, const AnalyzeOptions& opt);
MetricsOptions metrics_options(const AnalyzeOptions& opt);
std::set<int64_t> path_steps(const RunData& run, const AnalyzeOptions& opt);
void finish_analysis(Analysis& a, const RunData& run);

std::string report_text(const Analysis& a);
std::string report_json(const Analysis& a);

}  // namespace braid::analysis

// `braid analyze`: everything the analysis component computes for one run, as one result, with
// a readable text report, a JSON form, and storage into the `.braid` file for the GUI
// (analysis/store.h; tables in docs/schema.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
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

std::string report_text(const Analysis& a);
std::string report_json(const Analysis& a);

}  // namespace braid::analysis

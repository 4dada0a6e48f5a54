// What `braid info` reports about a .braid file: per run, ranks, streams, time span, event
// counts, kernel categories, per-collective totals and diagnostics. (Durations and byte counts
// for text are trace/format.h's.)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trace/format.h"
#include "trace/json.h"
#include "trace/reader.h"

namespace braid {

struct CollectiveTotals {
  int64_t count = 0;
  int64_t bytes = 0;        // sum over collectives with a known size
  int64_t sized = 0;        // how many had a known size
  int64_t time_ns = 0;      // sum of (end - start)
};

struct RunSummary {
  RunRow run;
  std::vector<RankInfo> ranks;
  int64_t gpu_streams = 0, cpu_threads = 0;
  Ns start = 0, end = 0;  // on the job axis (clock offsets applied); 0/0 if empty
  int64_t kernels = 0, memcpys = 0, memsets = 0, api_calls = 0, ranges = 0, steps = 0;
  int64_t collectives = 0, communicators = 0;
  std::map<std::string, int64_t> kernels_by_category;       // category name -> count
  std::map<std::string, int64_t> kernel_time_by_category;   // category name -> ns
  std::map<std::string, CollectiveTotals> collectives_by_op;
  std::vector<Diagnostic> diagnostics;
};

std::vector<RunSummary> summarize(const TraceReader& reader);

std::string summary_json(const std::string& path, const std::vector<RunSummary>& runs);
// One diagnostic as a JSON object {rank, severity, code, count, detail} (braid info and analyze).
void put_diagnostic(json::Writer& w, const Diagnostic& d);
std::string summary_text(const std::string& path, const std::vector<RunSummary>& runs);

}  // namespace braid

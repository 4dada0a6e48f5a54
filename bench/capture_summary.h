// The capture overhead table (docs/BENCHMARKS.md, "Capture overhead") from the measurements
// bench/capture_overhead.sh collects: lines "<config> <workload> <value>", where config is
// `none` (no capture), `floor` (CUPTI's floor: a client enabling braid's activity kinds and
// reading nothing, bench/cupti_floor.cc), `braid` (braid record) or `torch` (torch.profiler), and
// value one measurement (ns per operation, or ms per step) of one interleaved run.
#pragma once

#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace braid::bench {

struct OverheadRow {
  std::string workload;
  std::map<std::string, double> median;  // by config
  std::map<std::string, int> runs;       // measurements per config
};

// Reads the measurements; throws braid::Error(BadFormat) naming `source` and the line of a
// malformed one. Workloads keep their first-seen order.
std::vector<OverheadRow> summarize_overhead(std::istream& in, const std::string& source);

// The markdown table: per workload the configs' medians (plain, CUPTI floor, braid), braid's cost
// above the floor and above no capture, braid's and the floor's ratio to no capture, and
// torch.profiler's median and ratio.
std::string overhead_table(const std::vector<OverheadRow>& rows);

}  // namespace braid::bench

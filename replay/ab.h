// A/B replay of a baseline and a fused schedule: the data check first (both run once on the
// same deterministic int64 inputs; every buffer the rewrite claims to preserve is compared, and
// each replay against the reference interpreter), then the timing: warm-up steps, then measured
// steps interleaved A B A B ... so drift affects both alike. A fused schedule built under
// assumptions (braid fuse --assume) gets the timing only, and the report says why. Runs on every process of a
// multi-process backend; the report is complete on the reporting process.
#pragma once

#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/ir.h"
#include "fusion/scale.h"
#include "replay/data_check.h"
#include "replay/executor.h"
#include "replay/sim.h"

namespace braid::replay {

struct AbOptions {
  int steps = 10;   // measured steps of each schedule
  int warmup = 2;   // unmeasured steps of each schedule first
  ReplayOptions replay;          // timing runs (data = Timing)
  bool data_check = true;
  bool oracle = true;            // also compare each replay with fusion::interpret
  size_t max_report = 20;        // mismatches listed
  analysis::CostModel model;     // the prediction (sim of both schedules)
  SimOptions sim;
};

struct AbReport {
  std::string backend;
  std::vector<Ns> baseline_ns, fused_ns;  // per measured step (job step time)
  Ns baseline_median = 0, fused_median = 0;
  double speedup = 0;                      // baseline median / fused median
  double speedup_p25 = 0, speedup_p75 = 0; // spread of the paired per-step ratios
  Ns predicted_baseline_ns = 0, predicted_fused_ns = 0;  // sim with `model`
  bool data_checked = false;
  // The fused schedule's rewrites applied under assumptions about opaque compute (braid fuse
  // --assume; fusion::assumed_rewrites): then there is no data check, since comparing outputs
  // of compute the replay does not model cannot prove them; the report says so.
  std::vector<std::string> assumptions;
  DataCheck data;                          // fused vs baseline, preserved buffers
  DataCheck oracle_baseline, oracle_fused; // each replay vs the reference interpreter
  ReplayResult baseline_run, fused_run;    // measured steps, for the store
  Ns measured_saving_ns() const { return baseline_median - fused_median; }
  Ns predicted_saving_ns() const { return predicted_baseline_ns - predicted_fused_ns; }
  bool data_ok() const { return data.ok() && oracle_baseline.ok() && oracle_fused.ok(); }
  std::vector<std::string> lines() const;
  // The fields `braid ab --json` prints (docs/cli.md, "JSON output"), into an open object.
  void write_fields(json::Writer& w) const;
};

AbReport run_ab(Executor& ex, const fusion::Schedule& baseline, const fusion::Schedule& fused,
                const AbOptions& o);

// How a data check runs within `max_bytes` of int64 data per process: at full size when that
// fits, else on the schedules' exact scaled copies (fusion/scale.h; docs/replay.md, "Real sizes
// in bounded memory").
struct CheckPlan {
  int64_t full_bytes = 0;  // the check's int64 data at full size (this process, at the peak)
  int64_t bytes = 0;       // what it holds as planned
  bool scaled = false;
  fusion::ExactScale scale;                 // when scaled
  std::vector<fusion::Schedule> schedules;  // when scaled: the copies, in the order given
};
// Throws braid::Error(Unsupported) naming the size needed at full size and at the smallest exact
// scale when even that is over `max_bytes`: before anything is allocated. `oracle`: the check
// also interprets each schedule on all ranks (the comparison with the reference interpreter).
CheckPlan plan_check(Executor& ex, const std::vector<const fusion::Schedule*>& schedules,
                     bool oracle, int64_t max_bytes);

// Runs `s` once in Check mode (planned by plan_check) and compares its outputs
// (preserved_buffers(s, s, rank)) on every rank with fusion::interpret. Collective; the result is
// complete on the reporting process.
DataCheck check_against_interpreter(Executor& ex, const fusion::Schedule& s,
                                    const ReplayOptions& o, size_t max_report = 20);

// Sums a per-process data check over all processes (mismatch lists gathered on the reporting
// process). Collective.
DataCheck reduce_check(Executor& ex, const DataCheck& local, size_t max_report = 20);

// Median of a list of times (0 when empty); `q` in [0, 1] for other quantiles.
double quantile(std::vector<double> v, double q);

}  // namespace braid::replay

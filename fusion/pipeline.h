// Runs rewrite passes over a schedule (docs/fusion.md): each pass in order, to a fixed point,
// applying only legal findings with a positive predicted saving. An enabling finding
// (decompose, reorder, an all-gather moved to its first full consumer) is applied only when a
// later pass then fires on the ops it touched or created. Advice is collected, never applied.
#pragma once

#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/pass.h"

namespace braid::fusion {

struct PipelineOptions {
  // Pass names in the order to run; empty: every pass in the default order.
  std::vector<std::string> passes;
  bool fixed_point = true;  // re-run each pass until it finds nothing more to apply
  int max_rounds = 256;     // bound on applications per pass
};

struct PipelineResult {
  Schedule schedule;              // the fused schedule (valid)
  std::vector<Finding> applied;   // in the order applied (each on the schedule of its time)
  std::vector<Finding> advice;    // not applied: advice, or legal without a positive saving
  std::vector<std::string> passes;  // the passes run, in order
  Ns total_saving_ns() const;       // of the applied findings
  int64_t total_saving_bytes() const;
  // The `schedules.passes` JSON: [{"pass": .., "applied": n, "advice": m}, ...].
  std::string passes_json() const;
};

// Throws braid::Error(Usage) for an unknown pass name and (BadFormat) when `s` is not valid.
PipelineResult run_pipeline(const Schedule& s, const analysis::CostModel& cm,
                            const PipelineOptions& opt = {});

}  // namespace braid::fusion

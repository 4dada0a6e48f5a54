// Runs rewrite passes over a schedule (docs/fusion.md): each pass in order, to a fixed point,
// applying only legal findings with a positive predicted saving (for a pass judged by the step,
// coc, only those that shorten the simulated step). An enabling finding
// (decompose, reorder, an all-gather moved to its first full consumer) is applied only when a
// later pass then fires on the ops it touched or created. Advice is collected, never applied.
#pragma once

#include <atomic>
#include <compare>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/pass.h"

namespace braid::fusion {

// Names a finding across runs of the pipeline on the same input: its pass and the ids of the ops
// it rewrites (ids of the schedule it was found on; untouched ops keep their ids, new ops get
// the same fresh ids when the same rewrites come first).
struct FindingKey {
  std::string pass;
  std::vector<int64_t> ops;
  auto operator<=>(const FindingKey&) const = default;
};
FindingKey key_of(const Finding& f);

struct PipelineOptions {
  // Pass names in the order to run; empty: every pass in the default order.
  std::vector<std::string> passes;
  bool fixed_point = true;  // re-run each pass until it finds nothing more to apply
  int max_rounds = 256;     // bound on rounds per pass
  // The simulated step time of a schedule on the profile (`braid fuse` passes the sim backend's,
  // replay::simulate; the fusion library does not depend on the simulator). When set, the
  // pipeline's prediction is step_ns(input) - step_ns(fused), and a pass judged by the step
  // (Pass::judged_by_step: coc) applies a family of findings only when it makes the simulated
  // step shorter.
  // Must throw (braid::Error) for a schedule that is not valid (replay::simulate validates):
  // the findings are then not applied.
  std::function<Ns(const Schedule&)> step_ns = nullptr;
  // A choice of rewrites (braid-view's explorer): findings in `skip` are never applied (they
  // are reported with the advice, "not applied: deselected"); legal findings in `force` (and
  // advice of a pass in `assume`) are applied even without a positive saving or a shorter
  // simulated step.
  std::set<FindingKey> skip = {}, force = {};
  // Polled between rounds: when it becomes true the pipeline throws braid::Error(Usage,
  // "cancelled"). `progress`, when set, is told each pass as it starts (index, count).
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(size_t pass, size_t passes)> progress = nullptr;
  // Passes whose advice is applied under its stated assumption, where the pass can build the
  // rewrite (`braid fuse --assume`); "all": every pass. Applied like legal findings (positive
  // saving, validated, judged by the step where the pass is), marked Finding::assumed, and each
  // assumption is added to the fused schedule's provenance (assumed_rewrites reads them back).
  std::vector<std::string> assume = {};
  bool assumes(std::string_view pass) const;
};

// The assumptions a fused schedule was built under (PipelineOptions::assume), one line each
// ("<pass>: <assumption>"), from its provenance; empty when every rewrite was proven.
std::vector<std::string> assumed_rewrites(const Schedule& s);

struct PipelineResult {
  Schedule schedule;              // the fused schedule (valid)
  std::vector<Finding> applied;   // in the order applied (each on the schedule of its time);
                                  // Finding::assumed for advice applied under --assume
  std::vector<Finding> advice;    // not applied: advice, or legal without a positive saving
  std::vector<Finding> rejected;  // not applied: the data flow proves them illegal
  std::vector<std::string> passes;  // the passes run, in order
  std::vector<int> rounds;          // per pass: rounds run (the last one applied nothing)
  bool fixed_point = true;          // every pass stopped because a round applied nothing
  // Simulated step time of the input and of the fused schedule (PipelineOptions::step_ns);
  // -1 when no step_ns was given.
  Ns baseline_step_ns = -1, fused_step_ns = -1;
  // The prediction: baseline_step_ns - fused_step_ns (0 without step_ns).
  Ns predicted_saving_ns() const;
  // Sum of the applied findings' own (local) estimates: each counted as if it alone were on the
  // critical path; overlapping savings are counted twice. Detail, not the prediction.
  Ns local_saving_ns() const;
  int64_t total_saving_bytes() const;
  // The `schedules.passes` JSON: [{"pass": .., "applied": n, "advice": m, "rounds": r}, ...],
  // with "rejected": k before "rounds" when the pass rejected findings.
  std::string passes_json() const;
};

// Throws braid::Error(Usage) for an unknown pass name and (BadFormat) when `s` is not valid.
PipelineResult run_pipeline(const Schedule& s, const analysis::CostModel& cm,
                            const PipelineOptions& opt = {});

}  // namespace braid::fusion

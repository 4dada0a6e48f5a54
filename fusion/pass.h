// Rewrite passes over the schedule IR (docs/fusion.md). A pass finds a pattern whose legality it
// proves from data flow, predicts the saving with the cost model, and applies the rewrite. Where
// a schedule's compute is opaque (lifted from a trace) and legality cannot be proven, the finding
// is advice: it names the assumption it needs and the saving it would bring, and is not applied.
//
// Every rewrite keeps the collective order identical on all members of a communicator: a pass
// rewrites every member of a matched collective together, or does not fire.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/ir.h"

namespace braid::fusion {

class Dataflow;

struct Finding {
  std::string pass;
  std::vector<int32_t> ranks;  // ranks whose ops the rewrite touches
  std::vector<int64_t> ops;    // ids of the ops it replaces, moves or removes
  Ns saving_ns = 0;            // predicted communication (or step) time saved; may be <= 0
  int64_t saving_bytes = 0;    // wire bytes saved per rank (closed forms in docs/fusion.md)
  bool legal = false;          // proven from data flow; false: advice only
  // Saves nothing by itself but makes a later rewrite possible (decompose, reorder, an
  // all-gather moved to its first full consumer); the pipeline applies it only when a later
  // pass then fires on the ops it created.
  bool enabling = false;
  // Findings of one family are the same rewrite on sibling communicators (the DP replicas of a
  // TP group) and micro-batches; a pass judged by the step is judged a family at a time (chunking
  // one of four DP replicas' all-reduces cannot shorten a step the other three still bound).
  // Empty: a family of its own.
  std::string family;
  std::string summary;     // what it does, one line
  std::string assumption;  // advice: what must hold for it to be legal
  // Rejected: the data flow proves the rewrite illegal (a known reader needs what it would drop);
  // names the op that breaks it. Never applied, not advice. Passes report these on lifted
  // schedules, where a user asks why a trace's collective was not fused.
  std::string rejection;
  // The rewrite, bound to the schedule the finding was made on (ops named by id). Advice has one
  // too where the pass can build it (the rewrite is known; only its legality over opaque compute
  // is not): it is applied only under its assumption (PipelineOptions::assume). Empty for advice
  // the pass cannot rewrite.
  std::function<void(Schedule&)> rewrite;
  // Advice applied under its assumption (braid fuse --assume): the fused schedule is what the job
  // would run if the assumption holds; no data check can prove it.
  bool assumed = false;
  // Advice the pass has a rewrite for (set by the pipeline on the advice it reports, whose
  // `rewrite` it clears): applicable under PipelineOptions::assume.
  bool can_assume = false;
};

// Ranks a search may be limited to (the pipeline's look-ahead after an enabling rewrite).
struct Focus {
  std::vector<int32_t> ranks;  // sorted
  std::vector<int64_t> ops;    // sorted; when not empty, patterns must include one of these
  bool only_worth = false;     // leave out enabling findings (they cost a validation each)
  // The caller validates every rewrite before it uses it (the pipeline applies findings to a
  // copy and keeps the copy only when it validates), so a pass may skip its own probe
  // validation of a finding (tp-sp's moved all-gather): the costly part of a search.
  bool caller_validates = false;
  // The data flow of the schedule being searched, built once by the caller and shared by the
  // passes it runs on that schedule (building it is the bulk of a focused search). Used only
  // when it is the data flow of that very schedule object.
  const Dataflow* dataflow = nullptr;
  bool has(int32_t r) const;
  // A member on a focus rank and, when `ops` is set, one of them among the members.
  bool hits(const Schedule& s, const std::vector<OpRef>& members) const;
  template <typename Refs>
  bool any(const Refs& members) const {
    for (const auto& m : members)
      if (has(m.rank)) return true;
    return false;
  }
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  std::vector<Finding> find(const Schedule& s, const analysis::CostModel& cm) const {
    return find_in(s, cm, nullptr);
  }
  // With `focus`, only patterns with a member on one of its ranks (a pass may return more).
  virtual std::vector<Finding> find_in(const Schedule& s, const analysis::CostModel& cm,
                                       const Focus* focus) const = 0;
  // Applies a legal or assumed finding made on `s` (throws braid::Error(Usage) for advice not
  // assumed, advice without a rewrite, or an op that is gone). New ops get fresh ids and `replaces` naming the ops they stand for.
  virtual void apply(Schedule& s, const Finding& f) const;
  // Whether the pipeline judges this pass's findings by the simulated step (when it has a
  // simulator, PipelineOptions::step_ns) instead of their own estimate: each family
  // (Finding::family) is applied together and kept only when the step gets shorter (coc, whose
  // gain depends on what overlaps it).
  virtual bool judged_by_step() const { return false; }
  // Whether the pass's advice carries the rewrite that would apply it under its assumption
  // (`braid fuse --assume`; Finding::can_assume). The other passes' advice has no rewrite.
  virtual bool rewrites_advice() const { return false; }
};

// Every pass, in the pipeline's default order: decompose, reorder, tp-sp, tp-ep, pp-ep, pp-sp,
// tp-pp, sp-ep, coalesce, dedup, coc (the registry: fusion/pass_registry.cc).
const std::vector<std::unique_ptr<Pass>>& all_passes();
// nullptr when no pass has that name.
const Pass* find_pass(std::string_view name);

// The detail JSON stored with an opportunity: {"summary", "applied", "legal", "enabling",
// "assumption", "assumed" (only when true), "rejection" (only when rejected), "saving_bytes"}.
std::string finding_detail_json(const Finding& f, bool applied);

// A finding's status as `braid fuse` reports it: "applied", "assumed" (advice applied under
// --assume), "rejected", "advice" (not proven: an assumption about opaque compute), or "skipped"
// (legal, but not worth it or deselected).
std::string_view finding_status(const Finding& f, bool applied);

}  // namespace braid::fusion

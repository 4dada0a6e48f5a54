// Constructors of the rewrite passes (one file each) and helpers they share.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusion/dataflow.h"
#include "fusion/pass.h"

namespace braid::fusion::passes {

// The data flow of `s`: the caller's (Focus::dataflow) when it is that of `s`, else built into
// `own`.
inline const Dataflow& dataflow_of(const Schedule& s, const Focus* focus,
                                   std::optional<Dataflow>& own) {
  if (focus && focus->dataflow && &focus->dataflow->schedule() == &s) return *focus->dataflow;
  own.emplace(s);
  return *own;
}

// Ids and ranks of a group's members.
std::vector<int64_t> member_ids(const Schedule& s, const MatchGroup& g);
std::vector<int32_t> member_ranks(const MatchGroup& g);

// The base of every pass: find_in takes the focus's data flow when it is that of `s` (the
// pipeline shares one per round) or builds one, and hands it to find_on; a pass that only
// enables others finds nothing when the focus asks only for findings worth applying.
class DataflowPass : public Pass {
 public:
  DataflowPass(std::string_view name, std::string_view description)
      : name_(name), description_(description) {}
  std::string_view name() const final { return name_; }
  std::string_view description() const final { return description_; }
  std::vector<Finding> find_in(const Schedule& s, const analysis::CostModel& cm,
                               const Focus* focus) const final {
    if (focus && focus->only_worth && enabling_only()) return {};
    std::optional<Dataflow> own;
    return find_on(s, dataflow_of(s, focus, own), cm, focus);
  }

 protected:
  virtual bool enabling_only() const { return false; }
  virtual std::vector<Finding> find_on(const Schedule& s, const Dataflow& df,
                                       const analysis::CostModel& cm, const Focus* focus) const = 0;
  // A finding of this pass on group `g`'s members (pass, ranks, ops set; the rest is the
  // caller's).
  Finding finding_on(const Schedule& s, const MatchGroup& g) const {
    Finding f;
    f.pass = std::string(name());
    f.ranks = member_ranks(g);
    f.ops = member_ids(s, g);
    return f;
  }

 private:
  std::string_view name_, description_;  // string literals
};

std::unique_ptr<Pass> make_decompose();
std::unique_ptr<Pass> make_reorder();
std::unique_ptr<Pass> make_tp_sp();
std::unique_ptr<Pass> make_tp_ep();
std::unique_ptr<Pass> make_pp_ep();
std::unique_ptr<Pass> make_pp_sp();
std::unique_ptr<Pass> make_tp_pp();
std::unique_ptr<Pass> make_sp_ep();
std::unique_ptr<Pass> make_coalesce();
std::unique_ptr<Pass> make_dedup();
std::unique_ptr<Pass> make_coc();

// Sorted, without duplicates.
template <typename T>
void sort_unique(std::vector<T>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}
// "op 12 'gate'", "ops 12, 14" for assumption texts.
std::string name_ops(const Schedule& s, const std::vector<OpRef>& refs, size_t most = 3);
// True when the schedule is valid (deadlock check included); `why` gets the first problem.
bool valid(const Schedule& s, std::string* why = nullptr);

// The Chimera "replace" step for chains of data-movement collectives (all-gather, all-to-all,
// send/recv): follows every element the last stage writes back to where its value was before
// the first stage, and builds one manytomany that sends each element straight from there.
struct MovementPlan {
  bool built = false;       // the fused schedule exists (legal unless `assumption` is set)
  std::string problem;      // why no plan could be built (structure), empty when built
  std::string assumption;   // why it is advice only (self copies, live intermediates, opaque)
  // The rewrite, by op id: the new communicator, per rank the chain op the manytomany takes
  // the place of (with the ids it replaces), and the other chain ops removed.
  Comm comm;
  struct Put {
    int64_t at = -1;
    Collective op;
    std::vector<int64_t> replaces;
  };
  std::vector<Put> puts;
  std::vector<int64_t> drop;
  std::vector<int64_t> removed;  // chain op ids
  std::vector<int32_t> ranks;
  int64_t baseline_bytes = 0, fused_bytes = 0;
  Ns baseline_ns = 0, fused_ns = 0;
};
// `stage1`, `stage2`: match groups of `df.schedule()`; every stage-2 op must come after the
// stage-1 ops of its rank.
MovementPlan plan_movement(const Dataflow& df, const std::vector<MatchGroup>& stage1,
                           const std::vector<MatchGroup>& stage2,
                           const analysis::CostModel& cm, const std::string& comm_stem);
void apply_movement(Schedule& s, const MovementPlan& p);
// A finding from a movement plan (legal, advice, or nothing when the plan has a `problem`).
bool finding_from_plan(const MovementPlan& p, const std::string& pass, const std::string& summary,
                       Finding& f);

}  // namespace braid::fusion::passes

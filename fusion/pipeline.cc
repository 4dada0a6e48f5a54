#include "fusion/pipeline.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "fusion/passes/passes.h"
#include "trace/error.h"
#include "trace/json.h"

namespace braid::fusion {

Ns PipelineResult::predicted_saving_ns() const {
  return baseline_step_ns < 0 ? 0 : baseline_step_ns - fused_step_ns;
}

Ns PipelineResult::local_saving_ns() const {
  Ns t = 0;
  for (const Finding& f : applied) t += f.saving_ns;
  return t;
}

int64_t PipelineResult::total_saving_bytes() const {
  int64_t t = 0;
  for (const Finding& f : applied) t += f.saving_bytes;
  return t;
}

std::string PipelineResult::passes_json() const {
  json::Writer w;
  w.begin_array();
  for (size_t i = 0; i < passes.size(); ++i) {
    size_t a = 0, d = 0, x = 0;
    for (const Finding& f : applied) a += f.pass == passes[i];
    for (const Finding& f : advice) d += f.pass == passes[i];
    for (const Finding& f : rejected) x += f.pass == passes[i];
    w.begin_object().field("pass", passes[i]).field("applied", a).field("advice", d);
    if (x > 0) w.field("rejected", x);  // findings the data flow disproves (lifted schedules)
    w.field("rounds", i < rounds.size() ? rounds[i] : 0).end_object();
  }
  return w.end_array().take();
}

FindingKey key_of(const Finding& f) { return FindingKey{f.pass, f.ops}; }

namespace {

// Ids of the ops `after` has that `before` had not: passes give new ops fresh ids, above every
// id of the schedule they rewrote.
void add_new_ids(const Schedule& before, const Schedule& after, std::set<int64_t>& out) {
  const int64_t first_new = before.next_op_id();
  for (const auto& r : after.ranks)
    for (const auto& st : r.streams)
      for (const auto& op : st.ops)
        if (op.id >= first_new) out.insert(op.id);
}

// Every rank, for a whole-schedule search by the pipeline, which validates each rewrite itself.
Focus whole(const Schedule& s) {
  Focus f;
  for (const RankSchedule& r : s.ranks) f.ranks.push_back(r.rank);
  std::sort(f.ranks.begin(), f.ranks.end());
  f.caller_validates = true;
  return f;
}

bool worth(const Finding& f) { return (f.legal || f.assumed) && !f.enabling && f.saving_ns > 0; }

constexpr std::string_view kAssumedPrefix = "assumed (braid fuse --assume) ";

// Applies `f` to a copy of `s`; true (with the copy in `out`) when it validates.
bool try_apply(const Pass& p, const Schedule& s, const Finding& f, Schedule& out) {
  out = s;
  try {
    p.apply(out, f);
  } catch (const Error&) {
    return false;
  }
  return passes::valid(out);
}

// Does a later pass fire (legal, positive saving) on ops `f` touched or created? Looks through
// one further enabling step (decompose then reorder, say).
bool enables(const Schedule& after, const std::set<int64_t>& touched, const Focus& focus,
             const std::vector<const Pass*>& later, const analysis::CostModel& cm, int depth) {
  Focus f = focus;
  f.only_worth = depth == 0;
  f.caller_validates = true;  // an enabling finding is applied by try_apply, which validates
  f.ops.assign(touched.begin(), touched.end());
  const Dataflow df(after);  // shared by the later passes' searches
  f.dataflow = &df;
  for (const Pass* p : later) {
    for (const Finding& g : p->find_in(after, cm, &f)) {
      bool hits = std::any_of(g.ops.begin(), g.ops.end(), [&](int64_t id) { return touched.count(id); });
      if (!hits || !g.legal) continue;
      if (worth(g)) return true;
      if (g.enabling && depth > 0) {
        Schedule next;
        if (!try_apply(*p, after, g, next)) continue;
        std::set<int64_t> t2 = touched;
        for (int64_t id : g.ops) t2.insert(id);
        add_new_ids(after, next, t2);
        if (enables(next, t2, focus, later, cm, depth - 1)) return true;
      }
    }
  }
  return false;
}

// Would a later pass already fire on the ops of enabling finding `f` without it? (Then the
// enabling step is not needed: tp-sp rewrites an all-reduce directly, no decompose first.)
bool direct(const Schedule& s, const Dataflow& df, const Finding& f, const Focus& focus,
            const std::vector<const Pass*>& later, const analysis::CostModel& cm) {
  Focus worth_only = focus;
  worth_only.dataflow = &df;
  worth_only.only_worth = true;
  // Only whether something would fire matters here, not the rewrite: no probe validation.
  worth_only.caller_validates = true;
  worth_only.ops = f.ops;
  std::sort(worth_only.ops.begin(), worth_only.ops.end());
  for (const Pass* p : later)
    for (const Finding& g : p->find_in(s, cm, &worth_only))
      if (worth(g) && std::any_of(g.ops.begin(), g.ops.end(), [&](int64_t id) {
            return std::find(f.ops.begin(), f.ops.end(), id) != f.ops.end();
          }))
        return true;
  return false;
}

// The passes to run, in order: all of them, or those named.
std::vector<const Pass*> pass_order(const PipelineOptions& opt) {
  std::vector<const Pass*> order;
  if (opt.passes.empty()) {
    for (const auto& p : all_passes()) order.push_back(p.get());
    return order;
  }
  for (const std::string& n : opt.passes) {
    const Pass* p = find_pass(n);
    if (!p) {
      std::string known;
      for (const auto& q : all_passes())
        known += (known.empty() ? "" : ", ") + std::string(q->name());
      throw Error(ErrorCode::Usage, "unknown pass '" + n + "' (passes: " + known + ")");
    }
    order.push_back(p);
  }
  return order;
}

// One pass's run on the pipeline's schedule: rounds of search and apply until a round applies
// nothing (or one round without fixed_point), then what the pass still reports.
class PassRun {
 public:
  PassRun(const Pass& pass, std::vector<const Pass*> later, const analysis::CostModel& cm,
          const PipelineOptions& opt, PipelineResult& res, Ns& step)
      : pass_(pass),
        later_(std::move(later)),
        cm_(cm),
        opt_(opt),
        res_(res),
        step_(step),
        by_step_(step >= 0 && pass.judged_by_step()) {}

  void run() {
    int rounds = 0;
    bool settled = false;  // a round applied nothing
    for (int round = 0; round < opt_.max_rounds; ++round) {
      if (opt_.cancel && opt_.cancel->load()) throw Error(ErrorCode::Usage, "cancelled");
      ++rounds;
      // The data flow of the schedule as this round starts, shared by the pass's search and
      // the look-aheads on it (valid until the round changes the schedule).
      const Dataflow cur(res_.schedule);
      Focus everything = whole(res_.schedule);
      everything.dataflow = &cur;
      last_ = pass_.find_in(res_.schedule, cm_, &everything);
      if (opt_.assumes(pass_.name()))
        for (Finding& f : last_) f.assumed = !f.legal && f.rewrite != nullptr;
      std::stable_sort(last_.begin(), last_.end(), [](const Finding& a, const Finding& b) {
        return a.saving_ns > b.saving_ns;
      });
      bool applied;
      if (by_step_) {
        applied = apply_families();
      } else {
        // Findings that save time on their own: every one whose ops no other took this round.
        // First all of them on one copy, validated once (validating the whole schedule per
        // finding made a round quadratic: a full-size preset has hundreds); one by one only if
        // that copy does not validate. Otherwise one enabling step.
        std::set<int64_t> used;
        applied = apply_batch(used);
        applied = apply_one_by_one(used) || applied;
        if (!applied) applied = apply_enabling(cur);
      }
      if (!applied) settled = true;
      if (!applied || !opt_.fixed_point) break;
    }
    res_.rounds.push_back(rounds);
    res_.fixed_point = res_.fixed_point && settled;
    report_the_rest();
  }

 private:
  bool skipped(const Finding& f) const { return !opt_.skip.empty() && opt_.skip.count(key_of(f)); }
  bool forced(const Finding& f) const {
    return (f.legal || f.assumed) && !opt_.force.empty() && opt_.force.count(key_of(f));
  }
  // Worth applying (and chosen): a legal finding with a positive saving, or one forced in.
  bool wanted(const Finding& f) const { return (worth(f) || forced(f)) && !skipped(f); }
  // A wanted finding not rejected before, none of whose ops another took (`used`).
  bool candidate(const Finding& f, const std::set<int64_t>& used) const {
    return wanted(f) && !rejected_.count(f.ops) &&
           std::none_of(f.ops.begin(), f.ops.end(), [&](int64_t id) { return used.count(id); });
  }
  void keep(const Finding& f) {
    Finding kept = f;
    kept.rewrite = nullptr;
    res_.applied.push_back(std::move(kept));
  }

  // A family at a time (largest summed local estimate first), applied together to a copy and
  // kept only when the simulated step gets shorter than it is. The simulator validates
  // (PipelineOptions::step_ns throws for an invalid schedule).
  bool apply_families() {
    std::set<int64_t> used;
    std::map<std::string, std::vector<const Finding*>> families;
    std::vector<std::string> order_of;
    for (const Finding& f : last_) {
      if (!candidate(f, used)) continue;
      used.insert(f.ops.begin(), f.ops.end());
      const std::string key = f.family.empty() ? "#" + std::to_string(order_of.size()) : f.family;
      if (!families.count(key)) order_of.push_back(key);
      families[key].push_back(&f);
    }
    auto total = [&](const std::string& k) {
      Ns t = 0;
      for (const Finding* f : families[k]) t += f->saving_ns;
      return t;
    };
    std::stable_sort(
        order_of.begin(), order_of.end(),
        [&](const std::string& a, const std::string& b) { return total(a) > total(b); });
    bool applied = false;
    for (const std::string& key : order_of) {
      const auto& fam = families[key];
      Schedule next = res_.schedule;
      Ns t = step_;
      bool ok = true;
      try {
        for (const Finding* f : fam) pass_.apply(next, *f);
        t = opt_.step_ns(next);
      } catch (const Error&) {
        ok = false;
      }
      const bool force_family =
          std::any_of(fam.begin(), fam.end(), [&](const Finding* f) { return forced(*f); });
      if (!ok || (t >= step_ && !force_family)) {
        for (const Finding* f : fam) rejected_.insert(f->ops);
        continue;
      }
      step_ = t;
      res_.schedule = std::move(next);
      for (const Finding* f : fam) keep(*f);
      applied = true;
    }
    return applied;
  }

  // Every candidate on one copy, validated once; on success `used` holds their ops (after a
  // batch every finding overlaps it), else it is empty.
  bool apply_batch(std::set<int64_t>& used) {
    std::vector<const Finding*> batch;
    for (const Finding& f : last_) {
      if (!candidate(f, used)) continue;
      used.insert(f.ops.begin(), f.ops.end());
      batch.push_back(&f);
    }
    used.clear();
    if (batch.size() <= 1) return false;
    Schedule next = res_.schedule;
    try {
      for (const Finding* f : batch) pass_.apply(next, *f);
    } catch (const Error&) {
      return false;
    }
    if (!passes::valid(next)) return false;
    res_.schedule = std::move(next);
    for (const Finding* f : batch) {
      keep(*f);
      used.insert(f->ops.begin(), f->ops.end());
    }
    return true;
  }

  bool apply_one_by_one(std::set<int64_t>& used) {
    bool applied = false;
    for (const Finding& f : last_) {
      if (!candidate(f, used)) continue;
      Schedule next;
      if (!try_apply(pass_, res_.schedule, f, next)) {
        rejected_.insert(f.ops);
        continue;
      }
      res_.schedule = std::move(next);
      used.insert(f.ops.begin(), f.ops.end());
      keep(f);
      applied = true;
    }
    return applied;
  }

  // One enabling step, if a later pass then fires on what it touched. Cheapest test first: a
  // later pass firing without it (on the unchanged schedule, whose data flow `cur` is shared);
  // then the look-ahead on the rewritten copy; the copy is validated only when it enables
  // something (most candidates enable nothing).
  bool apply_enabling(const Dataflow& cur) {
    for (const Finding& f : last_) {
      if (!f.legal || !f.enabling || rejected_.count(f.ops) || skipped(f)) continue;
      Focus focus;
      focus.ranks = f.ranks;
      std::sort(focus.ranks.begin(), focus.ranks.end());
      if (!later_.empty() && direct(res_.schedule, cur, f, focus, later_, cm_)) {
        rejected_.insert(f.ops);
        continue;
      }
      Schedule next = res_.schedule;
      try {
        pass_.apply(next, f);
      } catch (const Error&) {
        rejected_.insert(f.ops);
        continue;
      }
      std::set<int64_t> touched(f.ops.begin(), f.ops.end());
      add_new_ids(res_.schedule, next, touched);
      if (later_.empty() || !enables(next, touched, focus, later_, cm_, 1) ||
          !passes::valid(next)) {
        rejected_.insert(f.ops);
        continue;
      }
      res_.schedule = std::move(next);
      keep(f);
      return true;
    }
    return false;
  }

  // What this pass still reports on the schedule as it leaves it: advice, and legal findings
  // not worth applying (enabling steps that enable nothing are left out).
  void report_the_rest() {
    Focus everything = whole(res_.schedule);
    for (Finding& f : pass_.find_in(res_.schedule, cm_, &everything)) {
      bool was_applied = false;
      for (const Finding& a : res_.applied)
        was_applied = was_applied || (a.pass == f.pass && a.ops == f.ops);
      if (was_applied) continue;
      if (!f.rejection.empty()) {
        f.rewrite = nullptr;
        res_.rejected.push_back(std::move(f));
        continue;
      }
      if (skipped(f)) {
        f.summary += "; not applied: deselected";
      } else {
        if (f.legal && f.enabling) continue;
        if (f.legal && (worth(f) || forced(f)) && !by_step_) continue;  // rejected by validation
        if (f.legal && worth(f))
          f.summary += "; not applied: the simulated step does not get shorter";
      }
      f.can_assume = !f.legal && f.rewrite != nullptr;
      f.rewrite = nullptr;
      res_.advice.push_back(std::move(f));
    }
  }

  const Pass& pass_;
  const std::vector<const Pass*> later_;  // the passes after this one, for look-aheads
  const analysis::CostModel& cm_;
  const PipelineOptions& opt_;
  PipelineResult& res_;
  Ns& step_;  // the simulated step of the schedule as it stands (-1: no simulator)
  const bool by_step_;
  std::set<std::vector<int64_t>> rejected_;  // findings that failed or enabled nothing
  std::vector<Finding> last_;                // this round's findings, largest saving first
};

}  // namespace

PipelineResult run_pipeline(const Schedule& s, const analysis::CostModel& cm,
                            const PipelineOptions& opt) {
  std::string why;
  if (!passes::valid(s, &why))
    throw Error(ErrorCode::BadFormat, "schedule '" + s.name + "' is not valid: " + why);
  const std::vector<const Pass*> order = pass_order(opt);
  PipelineResult res;
  res.schedule = s;
  Ns step = opt.step_ns ? opt.step_ns(s) : -1;
  res.baseline_step_ns = step;
  for (size_t pi = 0; pi < order.size(); ++pi) {
    res.passes.push_back(std::string(order[pi]->name()));
    if (opt.progress) opt.progress(pi, order.size());
    std::vector<const Pass*> later(order.begin() + static_cast<long>(pi) + 1, order.end());
    PassRun(*order[pi], std::move(later), cm, opt, res, step).run();
  }
  for (const Finding& f : res.applied)
    if (f.assumed)
      res.schedule.provenance.push_back(std::string(kAssumedPrefix) + f.pass + ": " + f.assumption);
  if (opt.step_ns) res.fused_step_ns = opt.step_ns(res.schedule);
  return res;
}

bool PipelineOptions::assumes(std::string_view pass) const {
  return std::any_of(assume.begin(), assume.end(),
                     [&](const std::string& a) { return a == "all" || a == pass; });
}

std::vector<std::string> assumed_rewrites(const Schedule& s) {
  std::vector<std::string> v;
  for (const std::string& p : s.provenance)
    if (p.rfind(kAssumedPrefix, 0) == 0) v.push_back(p.substr(kAssumedPrefix.size()));
  return v;
}

}  // namespace braid::fusion

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

}  // namespace

PipelineResult run_pipeline(const Schedule& s, const analysis::CostModel& cm,
                            const PipelineOptions& opt) {
  std::string why;
  if (!passes::valid(s, &why))
    throw Error(ErrorCode::BadFormat, "schedule '" + s.name + "' is not valid: " + why);
  std::vector<const Pass*> order;
  if (opt.passes.empty()) {
    for (const auto& p : all_passes()) order.push_back(p.get());
  } else {
    for (const std::string& n : opt.passes) {
      const Pass* p = find_pass(n);
      if (!p) {
        std::string known;
        for (const auto& q : all_passes()) known += (known.empty() ? "" : ", ") + std::string(q->name());
        throw Error(ErrorCode::Usage, "unknown pass '" + n + "' (passes: " + known + ")");
      }
      order.push_back(p);
    }
  }
  PipelineResult res;
  res.schedule = s;
  // The simulated step of the schedule as it stands (-1: no simulator).
  Ns step = opt.step_ns ? opt.step_ns(s) : -1;
  res.baseline_step_ns = step;
  for (size_t pi = 0; pi < order.size(); ++pi) {
    const Pass& pass = *order[pi];
    res.passes.push_back(std::string(pass.name()));
    std::vector<const Pass*> later(order.begin() + static_cast<long>(pi) + 1, order.end());
    std::set<std::vector<int64_t>> rejected;  // enabling findings that enabled nothing
    std::vector<Finding> last;
    Focus everything;
    const bool by_step = step >= 0 && pass.judged_by_step();
    if (opt.progress) opt.progress(pi, order.size());
    auto skipped = [&](const Finding& f) { return !opt.skip.empty() && opt.skip.count(key_of(f)); };
    auto forced = [&](const Finding& f) {
      return (f.legal || f.assumed) && !opt.force.empty() && opt.force.count(key_of(f));
    };
    // Worth applying (and chosen): a legal finding with a positive saving, or one forced in.
    auto wanted = [&](const Finding& f) { return (worth(f) || forced(f)) && !skipped(f); };
    int rounds = 0;
    bool settled = false;  // a round applied nothing
    for (int round = 0; round < opt.max_rounds; ++round) {
      if (opt.cancel && opt.cancel->load()) throw Error(ErrorCode::Usage, "cancelled");
      ++rounds;
      // The data flow of the schedule as this round starts, shared by the pass's search and
      // the look-aheads on it (valid until the round changes the schedule).
      std::optional<Dataflow> cur;
      cur.emplace(res.schedule);
      everything = whole(res.schedule);
      everything.dataflow = &*cur;
      last = pass.find_in(res.schedule, cm, &everything);
      if (opt.assumes(pass.name()))
        for (Finding& f : last) f.assumed = !f.legal && f.rewrite != nullptr;
      std::stable_sort(last.begin(), last.end(),
                       [](const Finding& a, const Finding& b) { return a.saving_ns > b.saving_ns; });
      // Findings that save time on their own: every one whose ops no other took this round.
      // First all of them on one copy, validated once (validating the whole schedule per
      // finding made a round quadratic: a full-size preset has hundreds); one by one only if
      // that copy does not validate.
      bool applied = false;
      std::set<int64_t> used;
      if (by_step) {
        // A family at a time (largest summed local estimate first), applied together to a copy
        // and kept only when the simulated step gets shorter than it is. The simulator
        // validates (PipelineOptions::step_ns throws for an invalid schedule).
        std::map<std::string, std::vector<const Finding*>> families;
        std::vector<std::string> order_of;
        for (const Finding& f : last) {
          if (!wanted(f) || rejected.count(f.ops)) continue;
          if (std::any_of(f.ops.begin(), f.ops.end(), [&](int64_t id) { return used.count(id); }))
            continue;
          used.insert(f.ops.begin(), f.ops.end());
          const std::string key =
              f.family.empty() ? "#" + std::to_string(order_of.size()) : f.family;
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
        for (const std::string& key : order_of) {
          const auto& fam = families[key];
          Schedule next = res.schedule;
          Ns t = step;
          bool ok = true;
          try {
            for (const Finding* f : fam) pass.apply(next, *f);
            t = opt.step_ns(next);
          } catch (const Error&) {
            ok = false;
          }
          const bool force_family =
              std::any_of(fam.begin(), fam.end(), [&](const Finding* f) { return forced(*f); });
          if (!ok || (t >= step && !force_family)) {
            for (const Finding* f : fam) rejected.insert(f->ops);
            continue;
          }
          step = t;
          res.schedule = std::move(next);
          for (const Finding* f : fam) {
            Finding kept = *f;
            kept.rewrite = nullptr;
            res.applied.push_back(std::move(kept));
          }
          applied = true;
        }
        if (!applied) settled = true;
        if (!applied || !opt.fixed_point) break;
        continue;
      }
      {
        std::vector<const Finding*> batch;
        for (const Finding& f : last) {
          if (!wanted(f) || rejected.count(f.ops)) continue;
          if (std::any_of(f.ops.begin(), f.ops.end(), [&](int64_t id) { return used.count(id); }))
            continue;
          used.insert(f.ops.begin(), f.ops.end());
          batch.push_back(&f);
        }
        used.clear();
        if (batch.size() > 1) {
          Schedule next = res.schedule;
          bool ok = true;
          try {
            for (const Finding* f : batch) pass.apply(next, *f);
          } catch (const Error&) {
            ok = false;
          }
          if (ok && passes::valid(next)) {
            res.schedule = std::move(next);
            for (const Finding* f : batch) {
              Finding kept = *f;
              kept.rewrite = nullptr;
              res.applied.push_back(std::move(kept));
              used.insert(f->ops.begin(), f->ops.end());
            }
            applied = true;
          }
        }
      }
      // (After a batch every finding overlaps `used`: nothing more here.)
      for (const Finding& f : last) {
        if (!wanted(f) || rejected.count(f.ops)) continue;
        if (std::any_of(f.ops.begin(), f.ops.end(), [&](int64_t id) { return used.count(id); }))
          continue;
        Schedule next;
        if (!try_apply(pass, res.schedule, f, next)) {
          rejected.insert(f.ops);
          continue;
        }
        res.schedule = std::move(next);
        used.insert(f.ops.begin(), f.ops.end());
        Finding kept = f;
        kept.rewrite = nullptr;
        res.applied.push_back(std::move(kept));
        applied = true;
      }
      // Otherwise one enabling step, if a later pass then fires on what it touched. Cheapest
      // test first: a later pass firing without it (on the unchanged schedule, whose data flow
      // `cur` is shared); then the look-ahead on the rewritten copy; the copy is validated only
      // when it enables something (most candidates enable nothing).
      for (const Finding& f : last) {
        if (applied) break;
        if (!f.legal || !f.enabling || rejected.count(f.ops) || skipped(f)) continue;
        Focus focus;
        focus.ranks = f.ranks;
        std::sort(focus.ranks.begin(), focus.ranks.end());
        if (!later.empty() && direct(res.schedule, *cur, f, focus, later, cm)) {
          rejected.insert(f.ops);
          continue;
        }
        Schedule next = res.schedule;
        try {
          pass.apply(next, f);
        } catch (const Error&) {
          rejected.insert(f.ops);
          continue;
        }
        std::set<int64_t> touched(f.ops.begin(), f.ops.end());
        add_new_ids(res.schedule, next, touched);
        if (later.empty() || !enables(next, touched, focus, later, cm, 1) ||
            !passes::valid(next)) {
          rejected.insert(f.ops);
          continue;
        }
        res.schedule = std::move(next);
        Finding kept = f;
        kept.rewrite = nullptr;
        res.applied.push_back(std::move(kept));
        applied = true;
      }
      if (!applied) settled = true;
      if (!applied || !opt.fixed_point) break;
    }
    res.rounds.push_back(rounds);
    res.fixed_point = res.fixed_point && settled;
    // What this pass still reports on the schedule as it leaves it: advice, and legal findings
    // not worth applying (enabling steps that enable nothing are left out).
    everything = whole(res.schedule);
    last = pass.find_in(res.schedule, cm, &everything);
    for (Finding& f : last) {
      bool was_applied = false;
      for (const Finding& a : res.applied) was_applied = was_applied || (a.pass == f.pass && a.ops == f.ops);
      if (was_applied) continue;
      if (!f.rejection.empty()) {
        f.rewrite = nullptr;
        res.rejected.push_back(std::move(f));
        continue;
      }
      if (skipped(f)) {
        f.summary += "; not applied: deselected";
      } else {
        if (f.legal && f.enabling) continue;
        if (f.legal && (worth(f) || forced(f)) && !by_step) continue;  // rejected by validation
        if (f.legal && worth(f))
          f.summary += "; not applied: the simulated step does not get shorter";
      }
      f.can_assume = !f.legal && f.rewrite != nullptr;
      f.rewrite = nullptr;
      res.advice.push_back(std::move(f));
    }
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

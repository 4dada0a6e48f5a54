#include "analysis/stream.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analysis/timeline.h"
#include "trace/error.h"

namespace braid::analysis {

namespace {

// Where a step's work lies on one rank's own clock: per stream (-1: the host pseudo-stream of
// its collectives), the start of the stream predecessor of its first piece there; over all
// streams, its first start and its last end.
struct StepReach {
  std::map<int64_t, Ns> lo;
  Ns first = INT64_MAX, hi = INT64_MIN;
  int64_t ops = 0;
};

// What the second pass needs of a rank, from the first.
struct RankPlan {
  RankShape shape;
  std::vector<bool> host_side;  // its collectives on the host pseudo-stream (timeline.h)
  std::map<int64_t, StepReach> steps;
};

std::map<int64_t, StepReach> step_reach(const RankTimeline& tl) {
  std::map<int64_t, StepReach> out;
  for (const auto& [step, ops] : tl.by_step) {
    StepReach r;
    for (OpPos p : ops) {
      const StreamOps& s = tl.streams[p.stream];
      const GpuOp& op = s.ops[p.index];
      const Ns lo = p.index > 0 ? s.ops[p.index - 1].start : op.start;
      auto [it, fresh] = r.lo.emplace(s.stream, lo);
      if (!fresh) it->second = std::min(it->second, lo);
      r.first = std::min(r.first, op.start);
      r.hi = std::max(r.hi, op.end);
      ++r.ops;
    }
    if (r.ops > 0) out[step] = std::move(r);
  }
  return out;
}

// Consecutive steps, each batch with about `budget` GPU ops of every rank (one step at least).
std::vector<std::vector<int64_t>> batches(const std::set<int64_t>& steps,
                                          const std::map<int32_t, RankPlan>& plans,
                                          int64_t budget) {
  std::vector<std::vector<int64_t>> out(1);
  int64_t ops = 0;
  for (int64_t s : steps) {
    int64_t n = 0;
    for (const auto& [r, p] : plans)
      if (auto it = p.steps.find(s); it != p.steps.end()) n += it->second.ops;
    if (!out.back().empty() && ops + n > budget) out.emplace_back(), ops = 0;
    out.back().push_back(s);
    ops += n;
  }
  return out;
}

// The window of `t`'s rank that holds the work of `steps` (fill_window); false when the rank
// has none of their work.
bool window_of(const RankTrace& t, const RankPlan& p, const std::vector<int64_t>& steps,
               Ns dep_slack, RankWindow& w) {
  std::map<int64_t, Ns> lo;
  Ns first = INT64_MAX, hi = INT64_MIN, host0 = INT64_MAX, host1 = INT64_MIN;
  for (int64_t s : steps)
    if (auto it = p.steps.find(s); it != p.steps.end()) {
      for (auto [stream, at] : it->second.lo) {
        auto [l, fresh] = lo.emplace(stream, at);
        if (!fresh) l->second = std::min(l->second, at);
      }
      first = std::min(first, it->second.first);
      hi = std::max(hi, it->second.hi);
    }
  if (first > hi) return false;
  for (const Step& s : t.steps)
    if (std::binary_search(steps.begin(), steps.end(), s.step))
      host0 = std::min(host0, s.start), host1 = std::max(host1, s.end);
  // Each stream from the start of the predecessor of its first piece, and every stream from
  // dep_slack before the first piece on any: the work of other streams that ended that close
  // before a piece started may be its dependency (timeline.h). A launch call that holds another
  // (a runtime call and the driver call inside it) starts up to the longest launch call before.
  w.streams.clear();
  w.t0 = first - dep_slack;
  for (int64_t s : p.shape.streams) {
    auto it = lo.find(s);
    w.streams.push_back(
        {s, it != lo.end() ? std::min(it->second, first - dep_slack) : first - dep_slack});
    w.t0 = std::min(w.t0, w.streams.back().t0);
  }
  if (auto it = lo.find(-1); it != lo.end()) w.t0 = std::min(w.t0, it->second);
  w.t1 = hi + 1;
  w.threads = p.shape.threads;
  w.host0 = host0 <= host1 ? host0 - p.shape.longest_launch : 0;
  w.host1 = host0 <= host1 ? host1 : 0;
  return true;
}

int64_t mib(int64_t b) { return (b + (1 << 20) - 1) >> 20; }

// AnalyzeOptions::batch_ops, 0 resolved.
int64_t batch_budget(const TraceReader::Counts& c, int64_t ranks, const AnalyzeOptions& opt) {
  const int64_t ops = c.kernels + c.memcpys + c.memsets;
  return opt.batch_ops > 0 ? opt.batch_ops
                           : std::max<int64_t>(10'000, ops / std::max<int64_t>(1, ranks));
}

}  // namespace

int64_t streamed_bytes(const TraceReader& reader, int64_t run, const AnalyzeOptions& opt) {
  const TraceReader::Counts c = reader.counts(run);
  const int64_t ranks = std::max<int64_t>(1, static_cast<int64_t>(reader.ranks(run).size()));
  constexpr int64_t kPerCollective = sizeof(Collective) + 24 + 96;  // launch, group, metrics
  const int64_t skeleton =
      2 * (c.collectives * kPerCollective + c.steps * static_cast<int64_t>(sizeof(Step)));
  constexpr int64_t kPerOp = sizeof(Kernel) + sizeof(GpuOp) + 24;  // timeline, index, launch
  // A batch holds one step of every rank at least (a step's critical path walks all its work):
  // a run of a few long steps holds as much as one of them (the steps rows count each rank's).
  const int64_t ops = c.kernels + c.memcpys + c.memsets;
  const int64_t step_ops = c.steps > 0 ? ops / std::max<int64_t>(1, c.steps / ranks) : ops;
  const int64_t batch = std::min(std::max(batch_budget(c, ranks, opt), step_ops), ops);
  return skeleton + load_bytes(reader, run) / ranks + 2 * batch * kPerOp;
}

bool streams(const TraceReader& reader, int64_t run, const AnalyzeOptions& opt) {
  if (opt.stream >= 0) return opt.stream > 0;
  const int64_t need = load_bytes(reader, run);
  return (need > opt.stream_above_bytes || need > memory_left() / 2) &&
         streamed_bytes(reader, run, opt) < need;
}

Analysis analyze_streamed(const TraceReader& reader, int64_t run_id, const AnalyzeOptions& opt) {
  bool exists = false;
  for (const RunRow& r : reader.runs()) exists = exists || r.run_id == run_id;
  if (!exists)
    throw Error(ErrorCode::NotFound, reader.path() + ": no run " + std::to_string(run_id));
  if (const int64_t need = streamed_bytes(reader, run_id, opt), left = memory_left(); need > left)
    throw Error(ErrorCode::Unsupported,
                reader.path() + ": run " + std::to_string(run_id) + " has " +
                    std::to_string(reader.counts(run_id).collectives) +
                    " collectives; analyzing it rank by rank needs about " +
                    std::to_string(mib(need)) +
                    " MiB (its collectives, one rank's events, one "
                    "batch of steps), more than the " +
                    std::to_string(mib(left)) +
                    " MiB this process may still use (free memory, ulimit -v, "
                    "BRAID_MEMORY_LIMIT_MB)");
  Job job;
  job.run = load_skeleton(reader, run_id);
  job.files.push_back({reader.path(), run_id, 0, job.run.rank_ids()});
  for (int32_t r : job.files[0].ranks) job.owner[r] = 0;
  Analysis a = begin_analysis(job, opt);
  RunData& run = job.run;
  const SyncNames names = sync_names(reader, run_id);

  // 1. Rank by rank: metrics, and where each step's work lies.
  const MetricsOptions mo = metrics_options(opt);
  add_collective_metrics(run, a.match, a.clocks, mo, a.metrics);
  const auto members = members_by_rank(a.metrics);
  std::map<int32_t, RankPlan> plans;
  auto tell = [&](std::string_view what, size_t done, size_t total) {
    if (opt.progress) opt.progress(what, static_cast<int64_t>(done), static_cast<int64_t>(total));
  };
  for (auto& [r, t] : run.ranks) {
    tell("ranks", plans.size(), run.ranks.size());
    RankPlan& p = plans[r];
    fill_rank(reader, run_id, names, t, &p.shape);
    const std::vector<Interval> comp = add_rank_metrics(run, r, a.clocks, mo, a.metrics);
    if (auto it = members.find(r); it != members.end()) add_exposure(a.metrics, it->second, comp);
    const RankTimeline tl = build_timeline(t);
    p.host_side = host_side(tl, t.collectives.size());
    p.steps = step_reach(tl);
    strip_rank(t);
  }

  // 2. The critical paths, a batch of steps at a time. A run without steps has one, over the
  // whole run: every rank whole.
  const std::set<int64_t> steps = path_steps(run, opt);
  const TimelineOptions whole;
  const int64_t budget =
      batch_budget(reader.counts(run_id), static_cast<int64_t>(plans.size()), opt);
  tell("ranks", plans.size(), run.ranks.size());
  size_t walked = 0;
  for (const std::vector<int64_t>& batch : batches(steps, plans, budget)) {
    tell("steps", walked, steps.size());
    walked += batch.size();
    std::map<int32_t, RankTimeline> timelines;
    for (auto& [r, t] : run.ranks) {
      const RankPlan& p = plans.at(r);
      TimelineOptions to;
      to.host_side = &p.host_side;
      RankWindow w;
      if (batch.size() == 1 && batch[0] < 0) {
        fill_rank(reader, run_id, names, t);
      } else if (window_of(t, p, batch, whole.dep_slack_ns, w)) {
        fill_window(reader, run_id, names, w, t);
        to.colls_from = w.t0, to.colls_to = w.t1;
      } else {
        to.colls_from = to.colls_to = 0;  // none of the batch's work: nothing to walk here
      }
      timelines[r] = build_timeline(t, to);
    }
    for (int64_t s : batch) {
      CriticalPathOptions co;
      co.step = s;
      a.paths.push_back(critical_path(run, a.match, a.clocks, timelines, co));
    }
    for (auto& [r, t] : run.ranks) strip_rank(t);
  }
  tell("steps", walked, steps.size());
  finish_analysis(a, run);
  return a;
}

}  // namespace braid::analysis

#include "replay/fidelity.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "analysis/metrics.h"
#include "analysis/run_data.h"
#include "analysis/timeline.h"
#include "fusion/lift_et.h"
#include "replay/ab.h"
#include "trace/error.h"
#include "trace/reader.h"

namespace braid::replay {

namespace {

using analysis::Interval;

// Compute, exposed communication per communicator and gaps in [lo, hi) from intervals.
TimeBreakdown breakdown(std::vector<Interval> compute, Ns compute_sum,
                        std::map<std::string, std::vector<Interval>> comm, Ns lo, Ns hi) {
  TimeBreakdown b;
  b.known = true;
  b.compute_ns = compute_sum;
  analysis::merge_intervals(compute);
  std::vector<Interval> all_comm, busy = compute;
  for (auto& [id, v] : comm) {
    const Ns len = analysis::merge_intervals(v);
    b.exposed_by_comm[id] = len - analysis::intersect_length(v, compute);
    all_comm.insert(all_comm.end(), v.begin(), v.end());
  }
  const Ns comm_len = analysis::merge_intervals(all_comm);
  b.exposed_comm_ns = comm_len - analysis::intersect_length(all_comm, compute);
  busy.insert(busy.end(), all_comm.begin(), all_comm.end());
  for (Interval& i : busy) i.start = std::max(i.start, lo), i.end = std::min(i.end, hi);
  std::erase_if(busy, [](const Interval& i) { return i.end <= i.start; });
  b.gaps_ns = std::max<Ns>(0, (hi - lo) - analysis::merge_intervals(busy));
  return b;
}

// The original of a lifted schedule per schedule rank (its i-th is the run's i-th rank): its
// step time and breakdown from the run's ops in the lifted step (or the whole run), a CPU job's
// compute from its execution traces as the lift takes it, each rank from the job's step start
// (fusion::lifted_spans); every op that carried a collective counts as communication, as the
// replay's counterpart does.
std::map<int32_t, std::pair<Ns, TimeBreakdown>> lifted_originals(const TraceReader& reader,
                                                                 const fusion::LiftSource& src) {
  std::map<int32_t, std::pair<Ns, TimeBreakdown>> out;
  analysis::RunData run = analysis::load_run(reader, src.run);
  const analysis::MatchResult match = analysis::match_trace_collectives(run);
  const fusion::EtFlow et = fusion::load_et_flow(reader, src.run);
  const fusion::LiftedSpans spans = fusion::lifted_spans(run, match, src.step, &et);
  int32_t index = 0;
  for (int32_t r : run.rank_ids()) {
    const int32_t sr = index++;
    const fusion::LiftedSpan& sp = spans.ranks.at(r);
    if (!sp.has_ops) continue;
    const analysis::RankTrace t = fusion::with_host_compute(run.ranks.at(r), &et, r);
    const analysis::RankTimeline tl = analysis::build_timeline(t);
    std::vector<Interval> compute;
    std::map<std::string, std::vector<Interval>> comm;
    Ns sum = 0;
    for (const analysis::StreamOps& so : tl.streams)
      for (const analysis::GpuOp& op : so.ops) {
        if (src.step >= 0 && analysis::op_step(t, op) != src.step) continue;
        if (op.coll >= 0) {
          comm[fusion::lifted_comm_id(run.str(t.collectives[op.coll].comm))].push_back(
              {op.start, op.end});
        } else {
          compute.push_back({op.start, op.end});
          sum += op.end - op.start;
        }
      }
    out[sr] = {sp.step_ns,
               breakdown(std::move(compute), sum, std::move(comm), sp.first - sp.lead, sp.last)};
  }
  return out;
}

// The replay's breakdown of schedule rank `r` in the measured step whose time is the rank's
// median.
TimeBreakdown replayed_breakdown(const fusion::Schedule& s, const ReplayResult& res, int32_t r) {
  if (res.steps.empty()) return {};
  std::vector<std::pair<Ns, size_t>> by_time;
  for (size_t i = 0; i < res.steps.size(); ++i) by_time.emplace_back(res.steps[i].rank_ns(r), i);
  std::sort(by_time.begin(), by_time.end());
  const StepRecord& st = res.steps[by_time[(by_time.size() - 1) / 2].second];
  if (r >= static_cast<int32_t>(st.ranks.size())) return {};
  std::vector<Interval> compute;
  std::map<std::string, std::vector<Interval>> comm;
  Ns sum = 0;
  for (const OpTime& t : st.ranks[r]) {
    auto ref = s.find_op(t.op_id);
    if (!ref) continue;
    const fusion::Op& op = s.op(*ref);
    if (const fusion::Collective* c = op.collective()) {
      comm[c->comm].push_back({t.start, t.end});
    } else if (const fusion::Compute* c = op.compute()) {
      // A collective the lift left as opaque compute is communication in the original.
      if (c->opaque && c->label.rfind("opaque ", 0) == 0) {
        comm["opaque"].push_back({t.start, t.end});
      } else {
        compute.push_back({t.start, t.end});
        sum += t.end - t.start;
      }
    }
  }
  return breakdown(std::move(compute), sum, std::move(comm), 0, st.rank_ns(r));
}

}  // namespace

Fidelity fidelity(const std::string& path, int64_t run, const ReplayResult& replayed,
                  const fusion::LiftSource& lifted, const fusion::Schedule* schedule) {
  TraceReader reader(path);
  bool found = false;
  std::string have;
  for (const RunRow& r : reader.runs()) {
    found |= r.run_id == run;
    have += (have.empty() ? "" : ", ") + std::to_string(r.run_id) + " (" +
            std::string(to_string(r.kind)) + ")";
  }
  if (!found)
    throw Error(ErrorCode::NotFound,
                path + ": no run " + std::to_string(run) + " to compare with (runs: " + have + ")");
  Fidelity f;
  f.original_run = run;
  std::map<int32_t, Ns> original;  // by schedule rank when lifted, else by trace rank
  std::map<int32_t, TimeBreakdown> decomposed;
  if (lifted.run == run) {
    f.original_source = (lifted.step >= 0 ? "lifted step " + std::to_string(lifted.step)
                                          : std::string("lifted whole run")) +
                        ", from the job's start on aligned clocks to the rank's last op";
    for (auto& [sr, od] : lifted_originals(reader, lifted)) {
      original[sr] = od.first;
      decomposed[sr] = od.second;
    }
  } else {
    std::map<int32_t, std::vector<double>> steps;
    for (const Step& s : reader.steps(run))
      steps[s.rank].push_back(static_cast<double>(s.end - s.start));
    if (!steps.empty()) {
      f.original_source = "steps";
      for (auto& [rank, v] : steps) original[rank] = static_cast<Ns>(quantile(v, 0.5));
    } else {
      f.original_source = "kernel span";
      std::map<int32_t, std::pair<Ns, Ns>> span;
      reader.kernels(run, [&](const Kernel& k) {
        auto [it, fresh] = span.emplace(k.rank, std::make_pair(k.start, k.end));
        if (!fresh) {
          it->second.first = std::min(it->second.first, k.start);
          it->second.second = std::max(it->second.second, k.end);
        }
        return true;
      });
      for (auto& [rank, se] : span) original[rank] = se.second - se.first;
    }
  }
  const int32_t n = replayed.steps.empty() ? 0 : static_cast<int32_t>(replayed.steps[0].ranks.size());
  for (int32_t r = 0; r < n; ++r) {
    std::vector<double> v;
    for (const StepRecord& s : replayed.steps) v.push_back(static_cast<double>(s.rank_ns(r)));
    RankFidelity rf;
    rf.rank = r;
    rf.replayed_ns = static_cast<Ns>(quantile(v, 0.5));
    auto it = original.find(r);
    rf.original_ns = it == original.end() ? 0 : it->second;
    if (schedule && decomposed.count(r) && lifted.run == run) {
      rf.original = decomposed.at(r);
      rf.replayed = replayed_breakdown(*schedule, replayed, r);
    }
    f.ranks.push_back(rf);
  }
  return f;
}

double median_ratio(const Fidelity& f) {
  std::vector<double> v;
  for (const RankFidelity& r : f.ranks)
    if (r.original_ns > 0) v.push_back(r.ratio());
  return v.empty() ? 0 : quantile(v, 0.5);
}

std::vector<std::string> Fidelity::lines() const {
  std::vector<std::string> v;
  char buf[256];
  std::snprintf(buf, sizeof buf, "fidelity vs run %lld (original step time from its %s):",
                static_cast<long long>(original_run), original_source.c_str());
  v.push_back(buf);
  v.push_back("  rank   original ms   replayed ms   replayed/original");
  for (const RankFidelity& r : ranks) {
    if (r.original_ns > 0)
      std::snprintf(buf, sizeof buf, "  %4d   %11.3f   %11.3f   %.3f", r.rank,
                    static_cast<double>(r.original_ns) * 1e-6,
                    static_cast<double>(r.replayed_ns) * 1e-6, r.ratio());
    else
      std::snprintf(buf, sizeof buf, "  %4d   %11s   %11.3f   -", r.rank, "-",
                    static_cast<double>(r.replayed_ns) * 1e-6);
    v.push_back(buf);
  }
  if (double m = median_ratio(*this); m > 0) {
    std::snprintf(buf, sizeof buf, "  median replayed/original over ranks: %.3f (%+.1f%%)", m,
                  100 * (m - 1));
    v.push_back(buf);
  }
  if (double w = worst_ratio(*this); w > 0) {
    std::snprintf(buf, sizeof buf, "  worst rank replayed/original: %.3f (%+.1f%%)", w,
                  100 * (w - 1));
    v.push_back(buf);
  }
  if (std::any_of(ranks.begin(), ranks.end(),
                  [](const RankFidelity& r) { return r.original.known && r.replayed.known; })) {
    v.push_back("  where the replay departs (ms, original -> replayed):");
    v.push_back("  rank   compute              exposed communication   gaps");
    auto pair = [](Ns a, Ns b) {
      char t[48];
      std::snprintf(t, sizeof t, "%.3f -> %.3f", static_cast<double>(a) * 1e-6,
                    static_cast<double>(b) * 1e-6);
      return std::string(t);
    };
    for (const RankFidelity& r : ranks) {
      if (!r.original.known || !r.replayed.known) continue;
      std::snprintf(buf, sizeof buf, "  %4d   %-20s %-23s %s", r.rank,
                    pair(r.original.compute_ns, r.replayed.compute_ns).c_str(),
                    pair(r.original.exposed_comm_ns, r.replayed.exposed_comm_ns).c_str(),
                    pair(r.original.gaps_ns, r.replayed.gaps_ns).c_str());
      v.push_back(buf);
    }
  }
  return v;
}

double worst_ratio(const Fidelity& f) {
  double worst = 0, miss = -1;
  for (const RankFidelity& r : f.ranks)
    if (r.original_ns > 0 && std::abs(r.ratio() - 1) > miss)
      miss = std::abs(r.ratio() - 1), worst = r.ratio();
  return worst;
}

void Fidelity::write_json(json::Writer& w) const {
  auto part = [&](const char* key, const TimeBreakdown& b) {
    w.key(key).begin_object();
    w.field("compute_ns", b.compute_ns).field("exposed_comm_ns", b.exposed_comm_ns);
    w.key("exposed_by_comm").begin_object();
    for (const auto& [id, ns] : b.exposed_by_comm) w.field(id, ns);
    w.end_object();
    w.field("gaps_ns", b.gaps_ns).end_object();
  };
  w.begin_object();
  w.field("original_run", original_run).field("original_source", original_source);
  w.field_fixed("median_ratio", median_ratio(*this), 4);
  w.field_fixed("worst_ratio", worst_ratio(*this), 4);
  w.key("ranks").begin_array();
  for (const RankFidelity& r : ranks) {
    w.begin_object();
    w.field("rank", r.rank).field("original_ns", r.original_ns).field("replayed_ns", r.replayed_ns);
    w.field_fixed("ratio", r.ratio(), 4);
    if (r.original.known && r.replayed.known) {
      part("original", r.original);
      part("replayed", r.replayed);
    }
    w.end_object();
  }
  w.end_array().end_object();
}

}  // namespace braid::replay

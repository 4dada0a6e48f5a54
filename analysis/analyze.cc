#include "analysis/analyze.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "analysis/stream.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/json.h"
#include "trace/summary.h"

namespace braid::analysis {

namespace {

template <typename T>
T median_of(std::vector<T> v) {
  if (v.empty()) return T{};
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pct(Ns part, Ns whole) {
  return whole > 0 ? fmt("%.1f%%", 100.0 * static_cast<double>(part) / whole) : "-";
}

// Per step, the collective waited for longest and the rank it waited for.
std::string late_by_step(const Metrics& m) {
  std::map<int64_t, const CollectiveMetrics*> worst;
  for (const CollectiveMetrics& c : m.collectives) {
    if (!c.complete || c.late_rank < 0 || c.step < 0) continue;
    const CollectiveMetrics*& w = worst[c.step];
    if (!w || c.wait_ns > w->wait_ns) w = &c;
  }
  if (worst.empty()) return "";
  std::string o = "\nlate rank per step (the collective waited for longest)\n";
  for (const auto& [step, c] : worst)
    o += "  step " + std::to_string(step) + "  rank " + std::to_string(c->late_rank) + "  " +
         std::string(to_string(c->op)) + " #" + std::to_string(c->seq) + "  others waited up to " +
         format_ns(c->wait_ns) + "\n";
  return o;
}

std::vector<Diagnostic> path_diagnostics(const std::vector<CriticalPath>& paths) {
  int64_t refused = 0;
  std::string steps;
  for (const CriticalPath& p : paths)
    if (!p.refused.empty()) {
      ++refused;
      if (refused <= 5) steps += (steps.empty() ? "" : ", ") + std::to_string(p.step);
    }
  if (refused == 0) return {};
  Diagnostic d;
  diag::set_code(d, diag::Code::analysis_critical_path_refused);
  d.count = refused;
  d.detail =
      "steps whose span on the aligned clocks is more than twice the longest the step lasts "
      "on one rank: their ranks' clocks are not aligned, no critical path reported (steps " +
      steps + (refused > 5 ? ", ..." : "") + ")";
  return {d};
}

// The per-rank parts of the metrics that each process computed for the ranks it holds
// (MetricsOptions::holds), gathered so that every process has them all, in the order one process
// computes them (by rank).
void gather_metrics(Metrics& m, Exchange& ex, const Job& job) {
  WireOut w;
  w.i64(static_cast<int64_t>(m.ranks.size()));
  for (const RankMetrics& r : m.ranks) {
    w.i64(r.rank).i64(r.step).i64(r.start).i64(r.end).i64(r.busy_ns).i64(r.idle_ns);
    w.i64(r.compute_ns).i64(r.comm_ns).i64(r.memory_ns).i64(r.non_compute_ns).i64(r.overlap_ns);
    w.i64(r.exposed_comm_ns).f64(r.overlap_pct).i64(r.kernels).i64(r.collectives);
  }
  w.i64(static_cast<int64_t>(m.kernels.size()));
  for (const KernelStat& k : m.kernels)
    w.i64(k.rank)
        .str(k.name)
        .i64(static_cast<int64_t>(k.category))
        .i64(k.count)
        .i64(k.total_ns)
        .i64(k.min_ns)
        .i64(k.max_ns);
  w.i64(static_cast<int64_t>(m.category_ns.size()));
  for (const auto& [r, cats] : m.category_ns) {
    w.i64(r).i64(static_cast<int64_t>(cats.size()));
    for (const auto& [c, ns] : cats) w.i64(static_cast<int64_t>(c)).i64(ns);
  }
  std::vector<int64_t> exposure;  // collective, member, exposed_ns
  for (size_t i = 0; i < m.collectives.size(); ++i)
    for (size_t j = 0; j < m.collectives[i].members.size(); ++j)
      if (job.holds(m.collectives[i].members[j].rank))
        exposure.insert(exposure.end(), {static_cast<int64_t>(i), static_cast<int64_t>(j),
                                         m.collectives[i].members[j].exposed_ns});
  w.i64(static_cast<int64_t>(exposure.size()));
  for (int64_t v : exposure) w.i64(v);

  Metrics all;
  all.collectives = std::move(m.collectives);
  for (CollectiveMetrics& c : all.collectives) c.exposed_ns = 0;
  for (const std::string& bytes : ex.allgather(w.take())) {
    WireIn in(bytes);
    for (int64_t n = in.i64(); n > 0; --n) {
      RankMetrics r;
      r.rank = static_cast<int32_t>(in.i64());
      r.step = in.i64();
      r.start = in.i64();
      r.end = in.i64();
      r.busy_ns = in.i64();
      r.idle_ns = in.i64();
      r.compute_ns = in.i64();
      r.comm_ns = in.i64();
      r.memory_ns = in.i64();
      r.non_compute_ns = in.i64();
      r.overlap_ns = in.i64();
      r.exposed_comm_ns = in.i64();
      r.overlap_pct = in.f64();
      r.kernels = in.i64();
      r.collectives = in.i64();
      all.ranks.push_back(r);
    }
    for (int64_t n = in.i64(); n > 0; --n) {
      KernelStat k;
      k.rank = static_cast<int32_t>(in.i64());
      k.name = in.str();
      k.category = static_cast<Category>(in.i64());
      k.count = in.i64();
      k.total_ns = in.i64();
      k.min_ns = in.i64();
      k.max_ns = in.i64();
      all.kernels.push_back(std::move(k));
    }
    for (int64_t n = in.i64(); n > 0; --n) {
      auto& cats = all.category_ns[static_cast<int32_t>(in.i64())];
      for (int64_t k = in.i64(); k > 0; --k) {
        const auto c = static_cast<Category>(in.i64());
        cats[c] = in.i64();
      }
    }
    for (int64_t n = in.i64() / 3; n > 0; --n) {
      const auto i = static_cast<size_t>(in.i64());
      const auto j = static_cast<size_t>(in.i64());
      all.collectives.at(i).members.at(j).exposed_ns = in.i64();
    }
  }
  for (CollectiveMetrics& c : all.collectives)
    for (const MemberTiming& mt : c.members) c.exposed_ns += mt.exposed_ns;
  auto by_rank = [](const auto& x, const auto& y) { return x.rank < y.rank; };
  std::stable_sort(all.ranks.begin(), all.ranks.end(), by_rank);
  std::stable_sort(all.kernels.begin(), all.kernels.end(), by_rank);
  m = std::move(all);
}

std::string job_name(const std::vector<JobFile>& files) {
  if (files.size() == 1) return files[0].path;
  return files[0].path + " and " + std::to_string(files.size() - 1) + " more file" +
         (files.size() > 2 ? "s" : "");
}

}  // namespace

Analysis begin_analysis(const Job& job, const AnalyzeOptions& opt) {
  Analysis a;
  a.path = job_name(job.files);
  a.files = job.files;
  a.run_id = job.files[0].run;
  a.step = opt.step;
  a.hta_compat = opt.hta_compat;
  a.profile = load_profile(opt.profile);
  const RunData& run = job.run;
  if (run.ranks.empty())
    throw JobError(ErrorCode::Empty,
                   a.path + ": run " + std::to_string(a.run_id) + " has no ranks");
  a.ranks = run.rank_ids();
  if (opt.step >= 0) {
    bool any = false;
    for (const auto& [r, t] : run.ranks)
      for (const Step& s : t.steps) any = any || s.step == opt.step;
    if (!any) {
      std::set<int64_t> steps;
      for (const auto& [r, t] : run.ranks)
        for (const Step& s : t.steps) steps.insert(s.step);
      std::string have;
      for (int64_t s : steps) have += (have.empty() ? "" : ", ") + std::to_string(s);
      throw JobError(ErrorCode::Usage,
                     a.path + ": run " + std::to_string(a.run_id) + " has no step " +
                         std::to_string(opt.step) +
                         (have.empty() ? " (it has no steps)" : " (steps: " + have + ")"));
    }
  }
  for (const auto& [r, t] : run.ranks)
    a.collectives_per_rank[r] = static_cast<int64_t>(t.collectives.size());
  a.match = match_trace_collectives(run);
  a.clocks = opt.solve_clocks ? align_clocks(run, a.match) : stored_clocks(run);
  a.diagnostics = a.match.diagnostics;
  a.diagnostics.insert(a.diagnostics.end(), a.clocks.diagnostics.begin(), a.clocks.diagnostics.end());
  return a;
}

MetricsOptions metrics_options(const AnalyzeOptions& opt) {
  MetricsOptions mo;
  mo.step = opt.step;
  mo.top_kernels = opt.top_kernels;
  mo.hta_compat = opt.hta_compat;
  return mo;
}

std::set<int64_t> path_steps(const RunData& run, const AnalyzeOptions& opt) {
  std::set<int64_t> steps;
  for (const auto& [r, t] : run.ranks)
    for (const Step& s : t.steps)
      if (opt.step < 0 || s.step == opt.step) steps.insert(s.step);
  if (steps.empty()) steps.insert(-1);
  return steps;
}

namespace {

// Everything `braid analyze` computes, on a job loaded by one process or spread over several.
Analysis analyze_job(const Job& job, const AnalyzeOptions& opt, Exchange& ex) {
  Analysis a = begin_analysis(job, opt);
  const RunData& run = job.run;
  const bool spread = ex.size() > 1;
  MetricsOptions mo = metrics_options(opt);
  if (spread) mo.holds = [&job](int32_t r) { return job.holds(r); };
  a.metrics = compute_metrics(run, a.match, a.clocks, mo);
  if (spread) gather_metrics(a.metrics, ex, job);

  std::map<int32_t, RankTimeline> timelines;
  for (const auto& [r, t] : run.ranks)
    if (job.holds(r)) timelines[r] = build_timeline(t);
  SpreadTimelines where;
  if (spread) where = {&ex, &job.owner};
  for (int64_t s : path_steps(run, opt)) {
    CriticalPathOptions co;
    co.step = s;
    a.paths.push_back(critical_path(run, a.match, a.clocks, timelines, co, where));
  }
  finish_analysis(a, run);
  return a;
}

}  // namespace

void finish_analysis(Analysis& a, const RunData& run) {
  for (const Diagnostic& d : path_diagnostics(a.paths)) a.diagnostics.push_back(d);

  CostModel model(a.profile);
  a.costs = calibrate(run, a.match, a.clocks, model);
  a.labels = infer_parallelism(run, a.match, a.profile.gpus_per_node);

  // Per (communicator, op, size).
  std::map<std::tuple<std::string, CollOp, int64_t>, std::vector<const CollectiveMetrics*>> groups;
  for (const CollectiveMetrics& c : a.metrics.collectives)
    if (c.complete && c.members.size() >= 2) groups[{c.comm, c.op, c.bytes}].push_back(&c);
  for (auto& [key, v] : groups) {
    CollectiveSummary s;
    std::tie(s.comm, s.op, s.bytes) = key;
    s.nranks = v[0]->nranks;
    s.count = static_cast<int64_t>(v.size());
    std::vector<Ns> waits, transfers;
    std::vector<double> bw;
    for (auto* c : v) waits.push_back(c->wait_ns), transfers.push_back(c->transfer_ns), bw.push_back(c->busbw_gbps);
    s.median_wait_ns = median_of(waits);
    s.median_transfer_ns = median_of(transfers);
    s.median_busbw_gbps = median_of(bw);
    if (s.bytes > 0) s.predicted_ns = model.collective_ns(s.op, s.bytes, s.nranks, s.comm, comm_members(run, s.comm));
    a.summary.push_back(s);
  }
}

Analysis analyze(const TraceReader& reader, const AnalyzeOptions& opt) {
  const int64_t run = opt.run >= 0 ? opt.run : default_run(reader);
  if (streams(reader, run, opt)) return analyze_streamed(reader, run, opt);
  const Job job = single_file_job(reader, run);
  Exchange alone;
  return analyze_job(job, opt, alone);
}

Analysis analyze_files(const std::vector<std::string>& paths, const AnalyzeOptions& opt,
                       Exchange& ex) {
  const Job job = load_job(paths, opt.run, ex);
  return analyze_job(job, opt, ex);
}

std::string report_text(const Analysis& a) {
  std::string o;
  o += a.path + ": run " + std::to_string(a.run_id) + ", " + std::to_string(a.ranks.size()) +
       " ranks" + (a.step >= 0 ? ", step " + std::to_string(a.step) : "") + "\n\n";

  if (a.clocks.reference < 0)
    o += "clocks: the ranks cannot be aligned: no two of them share a matched collective (each "
         "keeps its own clock; no offsets stored)\n";
  else
    o += "clocks (reference rank " + std::to_string(a.clocks.reference) + ", " +
         std::to_string(a.clocks.anchors_used) + " anchors, residual " +
         fmt("%.2f", a.clocks.residual_rms_ns / 1000) + " µs RMS over the ends kept, " +
         std::to_string(a.clocks.ends_rejected) + " rejected)\n";
  for (const RankClock& c : a.clocks.ranks) {
    if (a.clocks.reference < 0) break;
    o += "  rank " + std::to_string(c.rank) + "  offset " + fmt("%+.3f", c.offset / 1000.0) +
         " µs" + (c.error >= 0 ? "  ± " + fmt("%.3f", c.error / 1000.0) + " µs" : "") +
         (c.aligned ? "" : "  (not aligned: no shared collective)") +
         (c.flagged ? "  FLAGGED: residual " + fmt("%.1f", c.residual_rms_ns / 1000) + " µs" : "") + "\n";
  }

  o += "\ntime per rank (HTA temporal breakdown; overlap = HTA comm/comp overlap)\n";
  if (a.hta_compat)
    o += "  --hta-compat: the 'all' rows count only GPU work launched before the last step, in "
         "whole µs\n";
  o += "  rank  step        span     compute        comm     exposed        idle  overlap\n";
  for (const RankMetrics& m : a.metrics.ranks) {
    char line[256];
    std::snprintf(line, sizeof line, "  %4d  %4s  %10s  %10s  %10s  %10s  %10s  %6.1f%%\n", m.rank,
                  m.step < 0 ? "all" : std::to_string(m.step).c_str(), format_ns(m.span()).c_str(),
                  format_ns(m.compute_ns).c_str(), format_ns(m.comm_ns).c_str(),
                  format_ns(m.exposed_comm_ns).c_str(), format_ns(m.idle_ns).c_str(), m.overlap_pct);
    o += line;
  }

  o += "\ncollectives (matched " + std::to_string(a.match.groups.size()) + " groups; " +
       std::to_string(a.match.unmatched) + " unmatched, " + std::to_string(a.match.mismatched) +
       " mismatched)\n";
  o += "  comm            op             size    n  count   wait(med)  transfer(med)   busbw  predicted\n";
  for (const CollectiveSummary& s : a.summary) {
    char line[320];
    std::snprintf(line, sizeof line, "  %-14s  %-13s %9s %4d %6lld  %10s  %13s  %6s  %9s\n",
                  (s.comm.empty() ? "(none)" : s.comm).c_str(), std::string(to_string(s.op)).c_str(),
                  s.bytes >= 0 ? format_bytes(s.bytes).c_str() : "?", s.nranks,
                  static_cast<long long>(s.count), format_ns(s.median_wait_ns).c_str(),
                  format_ns(s.median_transfer_ns).c_str(),
                  s.median_busbw_gbps > 0 ? fmt("%.1f", s.median_busbw_gbps).c_str() : "-",
                  s.predicted_ns >= 0 ? format_ns(s.predicted_ns).c_str() : "-");
    o += line;
  }
  // Stragglers: who arrives last, how often.
  std::map<int32_t, LateRank> late = late_ranks(a.metrics);
  if (!late.empty()) {
    o += "  last to arrive:";
    for (auto& [r, v] : late)
      o += "  rank " + std::to_string(r) + " " + std::to_string(v.count) + "x (others waited " +
           format_ns(v.waited_ns) + ")";
    o += "\n";
  }

  o += late_by_step(a.metrics);

  for (const CriticalPath& p : a.paths) {
    const std::string title =
        "\ncritical path" +
        (p.step >= 0 ? " of step " + std::to_string(p.step) : std::string(" of the run"));
    if (!p.refused.empty()) {
      o += title + ": not reported: " + p.refused + "\n";
      continue;
    }
    o += title + ": " + format_ns(p.length()) + " of the step's " + format_ns(p.step_ns) +
         " (first rank's start to last rank's end), " + std::to_string(p.chain.size()) +
         " segments\n";
    std::vector<std::pair<Ns, std::string>> shares;
    for (auto& [c, ns] : p.by_category) shares.push_back({ns, c});
    std::sort(shares.rbegin(), shares.rend());
    o += "  by category:";
    for (auto& [ns, c] : shares) o += "  " + c + " " + pct(ns, p.length());
    o += "\n";
    if (!p.by_comm.empty()) {
      o += "  by communicator:";
      for (auto& [c, ns] : p.by_comm) o += "  " + (c.empty() ? "(none)" : c) + " " + pct(ns, p.length());
      o += "\n";
    }
    size_t shown = 0;
    for (const PathSegment& s : p.chain) {
      if (++shown > 12) {
        o += "  ... " + std::to_string(p.chain.size() - 12) + " more\n";
        break;
      }
      std::string what = s.kind == SegmentKind::Collective
                             ? s.name + " on '" + s.comm + "' (last arrival: rank " + std::to_string(s.late_rank) + ")"
                             : s.name;
      if (what.size() > 70) what = what.substr(0, 67) + "...";
      o += "  rank " + std::to_string(s.rank) + "  " + format_ns(s.duration()) + "  " +
           std::string(to_string(s.kind)) + "  " + what + "\n";
    }
  }

  if (!a.costs.empty()) {
    o += "\ncost model (profile " + a.profile.name + "), calibrated per communicator\n";
    for (auto& [c, cc] : a.costs)
      o += "  " + (c.empty() ? "(none)" : c) + "  alpha " + fmt("%.2f", cc.link.alpha_ns / 1000) +
           " µs  bandwidth " +
           // β fitted as 0: the transfers are all latency, so they do not bound the bandwidth.
           (cc.link.ns_per_byte > 0 ? fmt("%.1f GB/s", 1.0 / cc.link.ns_per_byte)
                                    : std::string("not resolved (latency-bound transfers)")) +
           "  cv error " + (cc.cv_error >= 0 ? fmt("%.1f%%", 100 * cc.cv_error) : "-") + "  (" +
           cc.source + ")\n";
  }
  if (!a.labels.empty()) {
    o += "\nparallelism\n";
    for (const CommLabel& l : a.labels)
      o += "  " + (l.comm.empty() ? "(none)" : l.comm) + "  " + l.dim + "  " + l.evidence + "\n";
  }
  o += "\ntop kernels\n";
  for (const KernelStat& k : a.metrics.kernels) {
    std::string n = k.name.size() > 60 ? k.name.substr(0, 57) + "..." : k.name;
    o += "  rank " + std::to_string(k.rank) + "  " + format_ns(k.total_ns) + "  " +
         std::to_string(k.count) + "x  " + std::string(to_string(k.category)) + "  " + n + "\n";
  }
  if (!a.diagnostics.empty()) {
    o += "\ndiagnostics\n";
    for (const Diagnostic& d : a.diagnostics)
      o += "  " + std::string(to_string(d.severity)) + "  " + d.code + "  " + std::to_string(d.count) +
           "  " + d.detail + "\n";
  }
  return o;
}

std::string report_json(const Analysis& a) {
  json::Writer w;
  w.begin_object()
      .field("file", a.path)
      .field("run", a.run_id)
      .field("step", a.step)
      .field("hta_compat", a.hta_compat)
      .field("profile", a.profile.name);
  if (a.files.size() > 1) {  // a job in several files: each with its run and ranks
    w.key("files").begin_array();
    for (const JobFile& f : a.files)
      w.begin_object()
          .field("path", f.path)
          .field("run", f.run)
          .array_of("ranks", f.ranks)
          .end_object();
    w.end_array();
  }
  w.key("clocks")
      .begin_object()
      .field("reference", a.clocks.reference)
      .field("anchors", a.clocks.anchors_used)
      .field("anchors_dropped", a.clocks.anchors_dropped)
      .field_fixed("residual_rms_ns", a.clocks.residual_rms_ns, 1)
      .key("ranks")
      .begin_array();
  for (const RankClock& c : a.clocks.ranks)
    w.begin_object()
        .field("rank", c.rank)
        .field("offset_ns", c.offset)
        .field("error_ns", c.error)
        .field_fixed("residual_rms_ns", c.residual_rms_ns, 1)
        .field("anchors", c.anchors)
        .field("aligned", c.aligned)
        .field("flagged", c.flagged)
        .end_object();
  w.end_array().end_object().key("ranks").begin_array();
  for (const RankMetrics& m : a.metrics.ranks)
    w.begin_object()
        .field("rank", m.rank)
        .field("step", m.step)
        .field("start_ns", m.start)
        .field("end_ns", m.end)
        .field("busy_ns", m.busy_ns)
        .field("idle_ns", m.idle_ns)
        .field("compute_ns", m.compute_ns)
        .field("comm_ns", m.comm_ns)
        .field("memory_ns", m.memory_ns)
        .field("non_compute_ns", m.non_compute_ns)
        .field("overlap_ns", m.overlap_ns)
        .field("exposed_comm_ns", m.exposed_comm_ns)
        .field_fixed("overlap_pct", m.overlap_pct, 2)
        .end_object();
  w.end_array().key("collectives").begin_array();
  for (const CollectiveMetrics& c : a.metrics.collectives)
    w.begin_object()
        .field("group", c.group)
        .field("comm", c.comm)
        .field("seq", c.seq)
        .field("op", to_string(c.op))
        .field("bytes", c.bytes)
        .field("nranks", c.nranks)
        .field("step", c.step)
        .field("complete", c.complete)
        .field("members", c.members.size())
        .field("wait_ns", c.wait_ns)
        .field("transfer_ns", c.transfer_ns)
        .field("late_rank", c.late_rank)
        .field_fixed("algbw_gbps", c.algbw_gbps, 3)
        .field_fixed("busbw_gbps", c.busbw_gbps, 3)
        .end_object();
  w.end_array().key("summary").begin_array();
  for (const CollectiveSummary& s : a.summary)
    w.begin_object()
        .field("comm", s.comm)
        .field("op", to_string(s.op))
        .field("bytes", s.bytes)
        .field("nranks", s.nranks)
        .field("count", s.count)
        .field("median_wait_ns", s.median_wait_ns)
        .field("median_transfer_ns", s.median_transfer_ns)
        .field_fixed("median_busbw_gbps", s.median_busbw_gbps, 3)
        .field("predicted_ns", s.predicted_ns)
        .end_object();
  w.end_array().key("critical_paths").begin_array();
  for (const CriticalPath& p : a.paths) {
    w.begin_object()
        .field("step", p.step)
        .field("start_ns", p.start)
        .field("end_ns", p.end)
        .field("step_ns", p.step_ns)
        .field("longest_rank_ns", p.longest_rank_ns)
        .field("refused", p.refused)
        .key("by_category")
        .begin_object();
    for (auto& [c, ns] : p.by_category) w.field(c, ns);
    w.end_object().key("by_comm").begin_object();
    for (auto& [c, ns] : p.by_comm) w.field(c, ns);
    w.end_object().key("chain").begin_array();
    for (const PathSegment& s : p.chain)
      w.begin_object()
          .field("kind", to_string(s.kind))
          .field("rank", s.rank)
          .field("stream", s.stream)
          .field("start_ns", s.start)
          .field("end_ns", s.end)
          .field("name", s.name)
          .field("category", s.category)
          .field("comm", s.comm)
          .field("group", s.group)
          .field("late_rank", s.late_rank)
          .end_object();
    w.end_array().end_object();
  }
  w.end_array().key("costs").begin_array();
  for (auto& [c, cc] : a.costs)
    w.begin_object()
        .field("comm", c)
        .field_fixed("alpha_ns", cc.link.alpha_ns, 1)
        .key("ns_per_byte")
        .general(cc.link.ns_per_byte, 6)
        .field("samples", cc.samples)
        .field_fixed("cv_error", cc.cv_error, 4)
        .field("source", cc.source)
        .end_object();
  w.end_array().key("parallelism").begin_array();
  for (const CommLabel& l : a.labels)
    w.begin_object()
        .field("comm", l.comm)
        .field("dim", l.dim)
        .field("nranks", l.nranks)
        .field("evidence", l.evidence)
        .end_object();
  w.end_array().key("kernels").begin_array();
  for (const KernelStat& s : a.metrics.kernels)
    w.begin_object()
        .field("rank", s.rank)
        .field("name", s.name)
        .field("category", to_string(s.category))
        .field("count", s.count)
        .field("total_ns", s.total_ns)
        .field("min_ns", s.min_ns)
        .field("max_ns", s.max_ns)
        .end_object();
  w.end_array().key("diagnostics").begin_array();
  for (const Diagnostic& d : a.diagnostics) put_diagnostic(w, d);
  w.end_array().end_object();
  return w.take() + "\n";
}

}  // namespace braid::analysis

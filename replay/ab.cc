#include "replay/ab.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "fusion/interpreter.h"

namespace braid::replay {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

DataCheck reduce_check(Executor& ex, const DataCheck& local, size_t max_report) {
  DataCheck d;
  d.buffers = ex.sum_all(local.buffers);
  d.elements = ex.sum_all(local.elements);
  d.mismatches = ex.sum_all(local.mismatches);
  // Mismatches travel as tab-separated lines, problems prefixed with '!'.
  std::vector<std::string> lines;
  char buf[64];
  for (const Mismatch& m : local.first) {
    std::string l = std::to_string(m.rank) + '\t' + std::to_string(m.index) + '\t';
    std::snprintf(buf, sizeof buf, "%.17g\t%.17g\t", m.expected, m.actual);
    lines.push_back(l + buf + m.buffer);
  }
  for (const std::string& p : local.problems) lines.push_back("!" + p);
  for (const std::string& l : ex.gather_lines(lines)) {
    if (l.starts_with("!")) {
      d.problems.push_back(l.substr(1));
      continue;
    }
    std::istringstream in(l);
    Mismatch m;
    in >> m.rank >> m.index >> m.expected >> m.actual;
    in.get();
    std::getline(in, m.buffer);
    if (d.first.size() < max_report) d.first.push_back(m);
  }
  std::sort(d.first.begin(), d.first.end(), [](const Mismatch& a, const Mismatch& b) {
    return std::tie(a.rank, a.buffer, a.index) < std::tie(b.rank, b.buffer, b.index);
  });
  return d;
}

namespace {

DataCheck oracle_check(Executor& ex, const fusion::Schedule& s,
                       const std::vector<fusion::RankBuffers>& replayed, size_t max_report) {
  const fusion::Interpretation ref = fusion::interpret(s);
  DataCheck local;
  for (int32_t r : ex.local_ranks(s))
    local.merge(compare_exact(r, ref.buffers[r], replayed[r], preserved_buffers(s, s, r),
                              max_report),
                max_report);
  return reduce_check(ex, local, max_report);
}

}  // namespace

DataCheck check_against_interpreter(Executor& ex, const fusion::Schedule& s,
                                    const ReplayOptions& o, size_t max_report) {
  ReplayOptions check = o;
  check.data = DataMode::Check;
  auto p = ex.prepare(s, check);
  p->run_step(false);
  return oracle_check(ex, s, p->buffers(), max_report);
}

AbReport run_ab(Executor& ex, const fusion::Schedule& baseline, const fusion::Schedule& fused,
                const AbOptions& o) {
  AbReport rep;
  rep.backend = std::string(ex.backend());
  if (o.data_check) {
    ReplayOptions check = o.replay;
    check.data = DataMode::Check;
    auto a = ex.prepare(baseline, check);
    auto b = ex.prepare(fused, check);
    a->run_step(false);
    b->run_step(false);
    const auto ba = a->buffers(), bb = b->buffers();
    DataCheck local;
    for (int32_t r : ex.local_ranks(baseline))
      local.merge(compare_exact(r, ba[r], bb[r], preserved_buffers(baseline, fused, r),
                                o.max_report),
                  o.max_report);
    rep.data = reduce_check(ex, local, o.max_report);
    if (o.oracle) {
      rep.oracle_baseline = oracle_check(ex, baseline, ba, o.max_report);
      rep.oracle_fused = oracle_check(ex, fused, bb, o.max_report);
    }
    rep.data_checked = true;
  }

  ReplayOptions timing = o.replay;
  timing.data = DataMode::Timing;
  auto a = ex.prepare(baseline, timing);
  auto b = ex.prepare(fused, timing);
  for (int i = 0; i < o.warmup; ++i) {
    a->run_step(false);
    b->run_step(false);
  }
  for (int i = 0; i < o.steps; ++i) {
    a->run_step(true);
    b->run_step(true);
  }
  rep.baseline_run = a->collect();
  rep.fused_run = b->collect();
  if (!ex.reporting()) return rep;

  std::vector<double> ra, rb, ratio;
  for (const StepRecord& s : rep.baseline_run.steps) rep.baseline_ns.push_back(s.step_ns());
  for (const StepRecord& s : rep.fused_run.steps) rep.fused_ns.push_back(s.step_ns());
  for (size_t i = 0; i < rep.baseline_ns.size() && i < rep.fused_ns.size(); ++i) {
    ra.push_back(static_cast<double>(rep.baseline_ns[i]));
    rb.push_back(static_cast<double>(rep.fused_ns[i]));
    if (rep.fused_ns[i] > 0) ratio.push_back(ra.back() / rb.back());
  }
  rep.baseline_median = static_cast<Ns>(quantile(ra, 0.5));
  rep.fused_median = static_cast<Ns>(quantile(rb, 0.5));
  rep.speedup = rep.fused_median > 0 ? static_cast<double>(rep.baseline_median) /
                                           static_cast<double>(rep.fused_median)
                                     : 0;
  rep.speedup_p25 = quantile(ratio, 0.25);
  rep.speedup_p75 = quantile(ratio, 0.75);

  SimOptions so = o.sim;
  so.compute_scale = o.replay.compute_scale;
  rep.predicted_baseline_ns = simulate(baseline, o.model, so).step_ns();
  rep.predicted_fused_ns = simulate(fused, o.model, so).step_ns();
  return rep;
}

std::vector<std::string> AbReport::lines() const {
  std::vector<std::string> v;
  char buf[512];
  auto ms = [](double ns) { return ns * 1e-6; };
  std::snprintf(buf, sizeof buf, "backend %s: %zu measured steps each, interleaved A B A B",
                backend.c_str(), baseline_ns.size());
  v.push_back(buf);
  std::snprintf(buf, sizeof buf, "baseline (A) step: median %.3f ms", ms(baseline_median));
  v.push_back(buf);
  std::snprintf(buf, sizeof buf, "fused    (B) step: median %.3f ms", ms(fused_median));
  v.push_back(buf);
  std::snprintf(buf, sizeof buf,
                "speedup %.3fx (paired per-step ratios: 25th %.3fx, 75th percentile %.3fx)",
                speedup, speedup_p25, speedup_p75);
  v.push_back(buf);
  std::snprintf(buf, sizeof buf,
                "saving: measured %.3f ms, predicted %.3f ms (sim: baseline %.3f ms, fused %.3f ms)",
                ms(static_cast<double>(measured_saving_ns())),
                ms(static_cast<double>(predicted_saving_ns())), ms(predicted_baseline_ns),
                ms(predicted_fused_ns));
  v.push_back(buf);
  if (!data_checked) {
    v.push_back("data check: skipped (--no-data-check)");
    return v;
  }
  for (const std::string& l : data.lines("baseline", "fused")) v.push_back(l);
  for (const auto* c : {&oracle_baseline, &oracle_fused})
    if (!c->ok() || c->elements > 0)
      for (const std::string& l : c->lines("interpreter", c == &oracle_baseline
                                                             ? "baseline replay"
                                                             : "fused replay"))
        v.push_back((c == &oracle_baseline ? "baseline vs reference interpreter: "
                                           : "fused vs reference interpreter: ") +
                    l);
  return v;
}

}  // namespace braid::replay

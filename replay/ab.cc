#include "replay/ab.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <sstream>

#include "fusion/interpreter.h"
#include "fusion/pipeline.h"
#include "fusion/scale.h"
#include "trace/error.h"
#include "trace/format.h"

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
  DataCheck local;
  {
    const fusion::Interpretation ref = fusion::interpret(s);
    for (int32_t r : ex.local_ranks(s))
      local.merge(
          compare_exact(r, ref.buffers[r], replayed[r], preserved_buffers(s, s, r), max_report),
          max_report);
  }
  return reduce_check(ex, local, max_report);
}

// The buffers of `rank` a check of `s` (one of the pair baseline -> fused) compares: those the
// rewrite preserves, and `s`'s own outputs (for the comparison with the interpreter).
std::vector<std::string> compared_buffers(const fusion::Schedule& baseline,
                                          const fusion::Schedule& fused, const fusion::Schedule& s,
                                          int32_t rank) {
  std::vector<std::string> v = preserved_buffers(baseline, fused, rank);
  for (std::string& name : preserved_buffers(s, s, rank))
    if (std::find(v.begin(), v.end(), name) == v.end()) v.push_back(std::move(name));
  return v;
}

// Runs `s` once in Check mode; the final contents of the buffers `keep` names on each rank
// (the others are dropped as soon as the run ends).
std::vector<fusion::RankBuffers> check_run(
    Executor& ex, const fusion::Schedule& s, const ReplayOptions& o,
    const std::function<std::vector<std::string>(int32_t)>& keep) {
  ReplayOptions check = o;
  check.data = DataMode::Check;
  std::vector<fusion::RankBuffers> all;
  {
    auto p = ex.prepare(s, check);
    p->run_step(false);
    all = p->take_buffers();
  }
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    fusion::RankBuffers kept;
    for (const std::string& name : keep(static_cast<int32_t>(r)))
      if (auto it = all[r].find(name); it != all[r].end()) kept[name] = std::move(it->second);
    all[r] = std::move(kept);
  }
  return all;
}

// What a data check covers at full size: the preserved buffers' elements on every rank, and
// the largest divisor among them.
void describe_scale(DataCheck& d, const fusion::Schedule& baseline, const fusion::Schedule& fused,
                    const CheckPlan& plan) {
  if (!plan.scaled) return;
  d.full_elements = 0;
  d.scale = 1;
  for (const fusion::RankSchedule& rs : baseline.ranks)
    for (const std::string& name : preserved_buffers(baseline, fused, rs.rank))
      if (const fusion::Buffer* b = rs.find_buffer(name)) {
        d.full_elements += b->size;
        d.scale = std::max(d.scale, plan.scale.of(rs.rank, name));
      }
  for (Mismatch& m : d.first) m.scale = plan.scale.of(m.rank, m.buffer);
}

}  // namespace

CheckPlan plan_check(Executor& ex, const std::vector<const fusion::Schedule*>& schedules,
                     bool oracle, int64_t max_bytes) {
  // The int64 data one process holds at the peak: one schedule's buffers on all ranks (a
  // reference interpretation; the sim's check run is one) beside the compared buffers of every
  // schedule on the ranks this process runs.
  auto need = [&](const std::vector<const fusion::Schedule*>& v) {
    int64_t largest = 0, kept = 0;
    for (const fusion::Schedule* s : v) {
      largest = std::max(largest, oracle ? fusion::buffer_elements(*s)
                                         : fusion::buffer_elements(*s, ex.local_ranks(*s)));
      for (int32_t r : ex.local_ranks(*s))
        for (const std::string& name : compared_buffers(*v.front(), *v.back(), *s, r))
          if (const fusion::Buffer* b = s->ranks[r].find_buffer(name)) kept += b->size;
    }
    return 8 * (largest + kept);
  };
  CheckPlan plan;
  plan.full_bytes = plan.bytes = need(schedules);
  if (plan.full_bytes <= max_bytes) return plan;
  plan.scale = fusion::exact_scale(schedules);
  std::vector<fusion::Schedule> scaled;
  for (const fusion::Schedule* s : schedules) scaled.push_back(fusion::scale_down(*s, plan.scale));
  std::vector<const fusion::Schedule*> ptrs;
  for (const fusion::Schedule& s : scaled) ptrs.push_back(&s);
  plan.bytes = need(ptrs);
  if (plan.bytes > max_bytes)
    throw Error(ErrorCode::Unsupported,
                "the data check needs " + format_bytes(plan.full_bytes) +
                    " of int64 buffers at full size and " + format_bytes(plan.bytes) +
                    " at the smallest exact scale (1/" + std::to_string(plan.scale.largest()) +
                    "), more than the limit of " + format_bytes(max_bytes) +
                    ": raise --max-check-mb or skip the check with --no-data-check");
  plan.scaled = true;
  plan.schedules = std::move(scaled);
  return plan;
}

DataCheck check_against_interpreter(Executor& ex, const fusion::Schedule& s, const ReplayOptions& o,
                                    size_t max_report) {
  const CheckPlan plan = plan_check(ex, {&s}, true, o.max_check_bytes);
  const fusion::Schedule& c = plan.scaled ? plan.schedules[0] : s;
  DataCheck d = oracle_check(
      ex, c, check_run(ex, c, o, [&](int32_t r) { return preserved_buffers(c, c, r); }),
      max_report);
  describe_scale(d, s, s, plan);
  return d;
}

AbReport run_ab(Executor& ex, const fusion::Schedule& baseline, const fusion::Schedule& fused,
                const AbOptions& o) {
  AbReport rep;
  rep.backend = std::string(ex.backend());
  rep.assumptions = fusion::assumed_rewrites(fused);
  if (o.data_check && rep.assumptions.empty()) {
    // Checked before anything is allocated: at full size, or on the exact scaled copies.
    const CheckPlan plan = plan_check(ex, {&baseline, &fused}, o.oracle, o.replay.max_check_bytes);
    const fusion::Schedule& cb = plan.scaled ? plan.schedules[0] : baseline;
    const fusion::Schedule& cf = plan.scaled ? plan.schedules[1] : fused;
    const auto ba = check_run(ex, cb, o.replay,
                              [&](int32_t r) { return compared_buffers(cb, cf, cb, r); });
    const auto bb = check_run(ex, cf, o.replay,
                              [&](int32_t r) { return compared_buffers(cb, cf, cf, r); });
    DataCheck local;
    for (int32_t r : ex.local_ranks(cb))
      local.merge(compare_exact(r, ba[r], bb[r], preserved_buffers(cb, cf, r), o.max_report),
                  o.max_report);
    rep.data = reduce_check(ex, local, o.max_report);
    describe_scale(rep.data, baseline, fused, plan);
    if (o.oracle) {
      rep.oracle_baseline = oracle_check(ex, cb, ba, o.max_report);
      rep.oracle_fused = oracle_check(ex, cf, bb, o.max_report);
      describe_scale(rep.oracle_baseline, baseline, baseline, plan);
      describe_scale(rep.oracle_fused, fused, fused, plan);
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

void AbReport::write_fields(json::Writer& w) const {
  w.field("backend", backend);
  w.array_of("baseline_step_ns", baseline_ns).array_of("fused_step_ns", fused_ns);
  w.field("baseline_median_ns", baseline_median).field("fused_median_ns", fused_median);
  w.field_fixed("speedup", speedup, 4);
  w.field_fixed("speedup_p25", speedup_p25, 4).field_fixed("speedup_p75", speedup_p75, 4);
  w.field("measured_saving_ns", measured_saving_ns());
  w.field("predicted_baseline_ns", predicted_baseline_ns);
  w.field("predicted_fused_ns", predicted_fused_ns);
  w.field("predicted_saving_ns", predicted_saving_ns());
  w.array_of("assumptions", assumptions);
  w.key("data_check").begin_object();
  w.field("status", data_checked          ? (data_ok() ? "passed" : "failed")
                    : assumptions.empty() ? "skipped"
                                          : "cannot prove");
  if (data_checked) {
    w.key("fused_vs_baseline");
    data.write_json(w);
    w.key("baseline_vs_interpreter");
    oracle_baseline.write_json(w);
    w.key("fused_vs_interpreter");
    oracle_fused.write_json(w);
  }
  w.end_object();
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
  if (!data_checked && !assumptions.empty()) {
    v.push_back("data check: cannot prove equivalence: the fused schedule applies " +
                std::to_string(assumptions.size()) +
                " rewrite(s) under assumptions about opaque compute (braid fuse --assume), "
                "which replaying it cannot check; the timing above holds if they hold:");
    for (const std::string& a : assumptions) v.push_back("  assumed " + a);
    return v;
  }
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

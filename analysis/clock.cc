#include "analysis/clock.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "analysis/fit.h"
#include "trace/diagnostics.h"

namespace braid::analysis {

const RankClock* ClockFit::rank(int32_t r) const {
  for (const RankClock& c : ranks)
    if (c.rank == r) return &c;
  return nullptr;
}

Ns ClockFit::offset(int32_t r) const {
  const RankClock* c = rank(r);
  return c ? c->offset : 0;
}

namespace {

struct Anchor {
  std::vector<std::pair<int, double>> ends;  // (rank position, end relative to the first end)
  bool kept = true;
};

// Solves A x = b in place of b; false when singular.
bool solve(const fit::Matrix& a, fit::Matrix& rhs) { return fit::solve_linear(a, rhs, 1e-12) == 0; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

ClockFit stored_clocks(const RunData& run) {
  ClockFit fit;
  for (const auto& [r, t] : run.ranks) {
    RankClock c;
    c.rank = r;
    c.offset = t.info.clock_offset;
    c.error = t.info.offset_error;
    c.aligned = true;
    fit.ranks.push_back(c);
  }
  if (!fit.ranks.empty()) fit.reference = fit.ranks.front().rank;
  return fit;
}

ClockFit align_clocks(const RunData& run, const MatchResult& match, const ClockOptions& opt) {
  ClockFit fit;
  std::vector<int32_t> ids = run.rank_ids();
  std::map<int32_t, int> pos;
  for (size_t i = 0; i < ids.size(); ++i) pos[ids[i]] = static_cast<int>(i);
  for (int32_t r : ids) fit.ranks.push_back({.rank = r});
  if (ids.empty()) return fit;

  std::vector<Anchor> anchors;
  for (const CollGroup& g : match.groups) {
    if (g.method == MatchMethod::PointToPoint || g.mismatched || g.members.size() < 2) continue;
    Anchor a;
    Ns base = run.ranks.at(g.members[0].rank).collectives[g.members[0].index].end;
    for (const CollRef& m : g.members)
      a.ends.emplace_back(pos[m.rank],
                          static_cast<double>(run.ranks.at(m.rank).collectives[m.index].end - base));
    anchors.push_back(std::move(a));
  }

  // Connected sets of ranks through anchors; the largest (lowest rank on ties) is aligned.
  const int n = static_cast<int>(ids.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const Anchor& a : anchors)
    for (size_t k = 1; k < a.ends.size(); ++k) parent[find(a.ends[k].first)] = find(a.ends[0].first);
  std::map<int, int> size_of;
  for (int i = 0; i < n; ++i) ++size_of[find(i)];
  int best = find(0);
  for (int i = 0; i < n; ++i)
    if (size_of[find(i)] > size_of[best]) best = find(i);
  std::vector<int> var(n, -1);  // rank position -> unknown index (reference and others: -1)
  int ref = -1, nvar = 0;
  for (int i = 0; i < n; ++i) {
    if (find(i) != best) continue;
    if (ref < 0) {
      ref = i;
      continue;
    }
    var[i] = nvar++;
  }
  fit.reference = ids[ref];
  fit.ranks[ref].aligned = true;
  fit.ranks[ref].error = 0;

  std::vector<double> offset(n, 0.0);
  std::vector<std::vector<double>> inverse_diag_src;
  double sigma2 = 0;
  std::vector<std::vector<double>> lap;
  for (int iter = 0; iter < 4; ++iter) {
    // Normal equations L o = c over the kept anchors of the aligned set.
    lap.assign(nvar, std::vector<double>(nvar, 0.0));
    std::vector<std::vector<double>> rhs(nvar, std::vector<double>(1, 0.0));
    for (const Anchor& a : anchors) {
      if (!a.kept || find(a.ends[0].first) != best) continue;
      const double m = static_cast<double>(a.ends.size());
      double mean = 0;
      for (auto& [p, e] : a.ends) mean += e / m;
      for (auto& [p, e] : a.ends) {
        if (var[p] < 0) continue;
        rhs[var[p]][0] -= e - mean;
        lap[var[p]][var[p]] += 1.0;
        for (auto& [q, _] : a.ends)
          if (var[q] >= 0) lap[var[p]][var[q]] -= 1.0 / m;
      }
    }
    if (nvar > 0 && !solve(lap, rhs)) break;
    for (int i = 0; i < n; ++i) offset[i] = var[i] >= 0 ? rhs[var[i]][0] : 0.0;

    // Residuals; drop anchors far outside the robust spread and refit.
    std::vector<double> all;
    std::vector<double> worst(anchors.size(), 0.0);
    for (size_t ai = 0; ai < anchors.size(); ++ai) {
      const Anchor& a = anchors[ai];
      if (!a.kept || find(a.ends[0].first) != best) continue;
      double mean = 0;
      for (auto& [p, e] : a.ends) mean += (e + offset[p]) / a.ends.size();
      for (auto& [p, e] : a.ends) {
        double r = e + offset[p] - mean;
        all.push_back(r);
        worst[ai] = std::max(worst[ai], std::abs(r));
      }
    }
    std::vector<double> absdev;
    for (double r : all) absdev.push_back(std::abs(r));
    double scale = 1.4826 * median(absdev);
    double limit = std::max(5 * scale, 2000.0);
    bool dropped = false;
    for (size_t ai = 0; ai < anchors.size(); ++ai)
      if (anchors[ai].kept && find(anchors[ai].ends[0].first) == best && worst[ai] > limit) {
        anchors[ai].kept = false;
        dropped = true;
      }
    if (!dropped) break;
  }

  // Residual statistics and standard errors from the final fit.
  std::vector<double> sum_sq(n, 0.0);
  double rss = 0;
  int obs = 0, groups = 0;
  for (const Anchor& a : anchors) {
    if (find(a.ends[0].first) != best) continue;
    if (!a.kept) {
      ++fit.anchors_dropped;
      continue;
    }
    ++fit.anchors_used;
    ++groups;
    double mean = 0;
    for (auto& [p, e] : a.ends) mean += (e + offset[p]) / a.ends.size();
    for (auto& [p, e] : a.ends) {
      double r = e + offset[p] - mean;
      sum_sq[p] += r * r;
      rss += r * r;
      ++obs;
      ++fit.ranks[p].anchors;
    }
  }
  const int dof = obs - groups - nvar;
  sigma2 = dof > 0 ? rss / dof : 0;
  fit.residual_rms_ns = obs > 0 ? std::sqrt(rss / obs) : 0;
  std::vector<double> var_diag(nvar, 0.0);
  if (nvar > 0) {
    std::vector<std::vector<double>> eye(nvar, std::vector<double>(nvar, 0.0));
    for (int i = 0; i < nvar; ++i) eye[i][i] = 1.0;
    if (solve(lap, eye))
      for (int i = 0; i < nvar; ++i) var_diag[i] = eye[i][i];
  }
  std::vector<double> rms_list;
  for (int i = 0; i < n; ++i) {
    RankClock& c = fit.ranks[i];
    c.residual_rms_ns = c.anchors > 0 ? std::sqrt(sum_sq[i] / c.anchors) : 0;
    if (find(i) != best) continue;
    c.aligned = true;
    c.offset = static_cast<Ns>(std::llround(offset[i]));
    c.error = var[i] >= 0 ? static_cast<Ns>(std::llround(std::sqrt(sigma2 * var_diag[var[i]])))
                          : 0;
    rms_list.push_back(c.residual_rms_ns);
  }
  const double med = median(rms_list);
  for (RankClock& c : fit.ranks)
    if (c.aligned && c.residual_rms_ns > opt.flag_residual_ns && c.residual_rms_ns > 3 * med &&
        n > 2) {
      c.flagged = true;
      Diagnostic d;
      d.rank = c.rank;
      diag::set_code(d, diag::Code::analysis_clock_residual);
      d.detail = "rank " + std::to_string(c.rank) + ": collective ends disagree with the fitted "
                 "clock offset by " + std::to_string(std::llround(c.residual_rms_ns / 1000)) +
                 " µs RMS (median rank " + std::to_string(std::llround(med / 1000)) +
                 " µs): its clock drifts or its collectives were mismatched";
      fit.diagnostics.push_back(d);
    }
  int unaligned = 0;
  for (const RankClock& c : fit.ranks) unaligned += c.aligned ? 0 : 1;
  if (unaligned > 0) {
    Diagnostic d;
    diag::set_code(d, diag::Code::analysis_clock_unanchored);
    d.count = unaligned;
    d.detail = "ranks that share no matched collective with rank " +
               std::to_string(fit.reference) + "; their own clocks are kept";
    fit.diagnostics.push_back(d);
  }
  if (fit.anchors_dropped > 0) {
    Diagnostic d;
    diag::set_code(d, diag::Code::analysis_clock_outlier_anchor);
    d.count = fit.anchors_dropped;
    d.detail = "matched collectives left out of the clock fit: their ends disagree far beyond "
               "the other anchors' spread";
    fit.diagnostics.push_back(d);
  }
  return fit;
}

}  // namespace braid::analysis

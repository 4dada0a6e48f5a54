#include "analysis/clock.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <span>

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

struct End {
  double t = 0;      // its end, relative to the group's first member's end (own clock)
  int pos = 0;       // the rank's position in the fit
  bool kept = true;  // inside the outlier limit
};
static_assert(sizeof(End) == 16, "an end of every matched collective: 16 bytes");

// A matched group's ends, a span of one array that holds every group's (a vector per group
// took 40 bytes and an allocation more a group).
struct Anchor {
  std::span<End> ends;
  bool kept = true;  // at least two ends kept
};

// Which ranks the fit solves: the largest set linked by anchors (lowest rank on ties).
struct System {
  int n = 0;
  std::vector<int> set;  // position -> its linked set's root
  int best = -1;         // the solved set's root
  int ref = -1;          // reference position (offset 0)
  std::vector<int> var;  // position -> unknown index; -1: the reference or not solved
  int nvar = 0;
  bool in(const Anchor& a) const { return set[a.ends[0].pos] == best; }
};

// Solves A x = b in place of b; false when singular.
bool solve(const fit::Matrix& a, fit::Matrix& rhs) { return fit::solve_linear(a, rhs, 1e-12) == 0; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

double median_center(const Anchor& a, const std::vector<double>& offset) {
  std::vector<double> v;
  for (const End& e : a.ends) v.push_back(e.t + offset[e.pos]);
  return median(v);
}

bool is_anchor(const CollGroup& g) {
  return g.method != MatchMethod::PointToPoint && !g.mismatched && g.members.size() >= 2;
}

// The anchors, their ends in `ends`.
std::vector<Anchor> collect_anchors(const RunData& run, const MatchResult& match,
                                    const std::map<int32_t, int>& pos, std::vector<End>& ends) {
  size_t n = 0, groups = 0;
  for (const CollGroup& g : match.groups)
    if (is_anchor(g)) n += g.members.size(), ++groups;
  ends.clear();
  ends.reserve(n);
  std::vector<Anchor> anchors;
  anchors.reserve(groups);
  for (const CollGroup& g : match.groups) {
    if (!is_anchor(g)) continue;
    Ns base = run.ranks.at(g.members[0].rank).collectives[g.members[0].index].end;
    const size_t first = ends.size();
    for (const CollRef& m : g.members)
      ends.push_back({static_cast<double>(run.ranks.at(m.rank).collectives[m.index].end - base),
                      pos.at(m.rank)});
    anchors.push_back({std::span<End>(ends.data() + first, g.members.size())});
  }
  return anchors;
}

// Which ends and anchors are kept, to go back to.
std::vector<bool> kept_flags(const std::vector<Anchor>& anchors, const std::vector<End>& ends) {
  std::vector<bool> v;
  v.reserve(anchors.size() + ends.size());
  for (const Anchor& a : anchors) v.push_back(a.kept);
  for (const End& e : ends) v.push_back(e.kept);
  return v;
}

void restore_kept(const std::vector<bool>& v, std::vector<Anchor>& anchors,
                  std::vector<End>& ends) {
  for (size_t i = 0; i < anchors.size(); ++i) anchors[i].kept = v[i];
  for (size_t i = 0; i < ends.size(); ++i) ends[i].kept = v[anchors.size() + i];
}

System linked_sets(int n, const std::vector<Anchor>& anchors) {
  System s;
  s.n = n;
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const Anchor& a : anchors)
    for (size_t k = 1; k < a.ends.size(); ++k) parent[find(a.ends[k].pos)] = find(a.ends[0].pos);
  s.set.resize(n);
  std::map<int, int> size_of;
  for (int i = 0; i < n; ++i) ++size_of[s.set[i] = find(i)];
  s.best = s.set[0];
  for (int i = 0; i < n; ++i)
    if (size_of[s.set[i]] > size_of[s.best]) s.best = s.set[i];
  s.var.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    if (s.set[i] != s.best) continue;
    if (s.ref < 0)
      s.ref = i;
    else
      s.var[i] = s.nvar++;
  }
  return s;
}

// Where the fit starts. Profilers of a host-only job start at different times, so the ranks'
// clocks may differ by far more than a collective lasts: first the steps' boundaries (the same
// step starts at nearly the same moment on every rank), then alternating medians over the
// anchors (each group's median end, each rank's median difference to it), which outliers do not
// pull the way a least-squares first guess would follow them.
std::vector<double> seed_offsets(const RunData& run, const std::vector<int32_t>& ids,
                                 const System& s, const std::vector<Anchor>& anchors) {
  std::vector<double> offset(s.n, 0.0);
  std::map<int64_t, Ns> ref_start;
  for (const Step& a : run.ranks.at(ids[s.ref]).steps) ref_start.emplace(a.step, a.start);
  for (int i = 0; i < s.n; ++i) {
    if (s.var[i] < 0) continue;
    std::vector<double> d;
    for (const Step& b : run.ranks.at(ids[i]).steps)
      if (auto it = ref_start.find(b.step); it != ref_start.end())
        d.push_back(static_cast<double>(it->second - b.start));
    offset[i] = median(d);
  }
  for (int iter = 0; iter < 50; ++iter) {
    std::vector<std::vector<double>> diffs(s.n);
    for (const Anchor& a : anchors) {
      if (!s.in(a)) continue;
      const double c = median_center(a, offset);
      for (const End& e : a.ends) diffs[e.pos].push_back(c - e.t);
    }
    std::vector<double> next(s.n, 0.0);
    for (int i = 0; i < s.n; ++i)
      if (s.set[i] == s.best) next[i] = median(diffs[i]);
    const double shift = next[s.ref];
    double moved = 0;
    for (int i = 0; i < s.n; ++i) {
      if (s.set[i] == s.best) next[i] -= shift;
      moved = std::max(moved, std::abs(next[i] - offset[i]));
    }
    offset = std::move(next);
    if (moved < 0.5) break;
  }
  return offset;
}

// Least squares over the kept ends (the group times eliminated: a graph Laplacian `lap`).
bool solve_offsets(const std::vector<Anchor>& anchors, const System& s, std::vector<double>& offset,
                   fit::Matrix& lap) {
  lap.assign(s.nvar, std::vector<double>(s.nvar, 0.0));
  fit::Matrix rhs(s.nvar, std::vector<double>(1, 0.0));
  for (const Anchor& a : anchors) {
    if (!a.kept || !s.in(a)) continue;
    double m = 0, mean = 0;
    for (const End& e : a.ends) m += e.kept ? 1 : 0;
    for (const End& e : a.ends) mean += e.kept ? e.t / m : 0;
    for (const End& e : a.ends) {
      if (!e.kept || s.var[e.pos] < 0) continue;
      const int p = s.var[e.pos];
      rhs[p][0] -= e.t - mean;
      lap[p][p] += 1.0;
      for (const End& f : a.ends)
        if (f.kept && s.var[f.pos] >= 0) lap[p][s.var[f.pos]] -= 1.0 / m;
    }
  }
  if (s.nvar > 0 && !solve(lap, rhs)) return false;
  for (int i = 0; i < s.n; ++i) offset[i] = s.var[i] >= 0 ? rhs[s.var[i]][0] : 0.0;
  return true;
}

// Keeps the ends within max(3 robust standard deviations, 2 µs) of their group's median end
// (1.4826 × the median absolute residual of all ends); a group keeps at least two ends or none.
// True when the kept set changed.
bool reject_outliers(std::vector<Anchor>& anchors, const System& s,
                     const std::vector<double>& offset) {
  std::vector<double> absdev;
  std::vector<double> centers(anchors.size(), 0.0);
  for (size_t i = 0; i < anchors.size(); ++i) {
    if (!s.in(anchors[i])) continue;
    centers[i] = median_center(anchors[i], offset);
    for (const End& e : anchors[i].ends)
      absdev.push_back(std::abs(e.t + offset[e.pos] - centers[i]));
  }
  const double limit = std::max(3 * 1.4826 * median(absdev), 2000.0);
  bool changed = false;
  for (size_t i = 0; i < anchors.size(); ++i) {
    Anchor& a = anchors[i];
    if (!s.in(a)) continue;
    int kept = 0;
    for (End& e : a.ends) {
      const bool keep = std::abs(e.t + offset[e.pos] - centers[i]) <= limit;
      changed = changed || keep != e.kept;
      e.kept = keep;
      kept += keep ? 1 : 0;
    }
    a.kept = kept >= 2;
  }
  return changed;
}

// Offsets, residuals and standard errors of the final fit into `fit`.
void fill_result(ClockFit& fit, const std::vector<Anchor>& anchors, const System& s,
                 const std::vector<double>& offset, const fit::Matrix& lap) {
  std::vector<double> sum_sq(s.n, 0.0);
  std::vector<int> seen(s.n, 0);
  double rss = 0;
  int obs = 0, groups = 0;
  for (const Anchor& a : anchors) {
    if (!s.in(a)) continue;
    double center = 0, m = 0;
    for (const End& e : a.ends)
      if (e.kept && a.kept) center += e.t + offset[e.pos], ++m;
    center = m > 0 ? center / m : median_center(a, offset);
    (a.kept ? fit.anchors_used : fit.anchors_dropped) += 1;
    groups += a.kept ? 1 : 0;
    for (const End& e : a.ends) {
      const double r = e.t + offset[e.pos] - center;
      sum_sq[e.pos] += r * r;  // every end of the rank: how well its clock fits
      ++seen[e.pos];
      if (!(a.kept && e.kept)) {
        ++fit.ends_rejected;
        continue;
      }
      rss += r * r;
      ++obs;
      ++fit.ranks[e.pos].anchors;
    }
  }
  const int dof = obs - groups - s.nvar;
  const double sigma2 = dof > 0 ? rss / dof : 0;
  fit.residual_rms_ns = obs > 0 ? std::sqrt(rss / obs) : 0;
  std::vector<double> var_diag(s.nvar, 0.0);
  if (s.nvar > 0) {
    fit::Matrix eye(s.nvar, std::vector<double>(s.nvar, 0.0));
    for (int i = 0; i < s.nvar; ++i) eye[i][i] = 1.0;
    if (solve(lap, eye))
      for (int i = 0; i < s.nvar; ++i) var_diag[i] = eye[i][i];
  }
  for (int i = 0; i < s.n; ++i) {
    RankClock& c = fit.ranks[i];
    c.residual_rms_ns = seen[i] > 0 ? std::sqrt(sum_sq[i] / seen[i]) : 0;
    if (s.set[i] != s.best) continue;
    c.aligned = true;
    c.offset = static_cast<Ns>(std::llround(offset[i]));
    c.error =
        s.var[i] >= 0 ? static_cast<Ns>(std::llround(std::sqrt(sigma2 * var_diag[s.var[i]]))) : 0;
  }
}

void add_diagnostics(ClockFit& fit, const ClockOptions& opt) {
  std::vector<double> rms_list;
  for (const RankClock& c : fit.ranks)
    if (c.aligned) rms_list.push_back(c.residual_rms_ns);
  const double med = median(rms_list);
  for (RankClock& c : fit.ranks)
    if (c.aligned && c.residual_rms_ns > opt.flag_residual_ns && c.residual_rms_ns > 3 * med &&
        fit.ranks.size() > 2) {
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
    d.detail = fit.reference < 0
                   ? "no two ranks share a matched collective: the ranks cannot be aligned; "
                     "each keeps its own clock and no offsets are stored"
                   : "ranks that share no matched collective with rank " +
                         std::to_string(fit.reference) + "; their own clocks are kept";
    fit.diagnostics.push_back(d);
  }
  if (fit.ends_rejected > 0) {
    Diagnostic d;
    diag::set_code(d, diag::Code::analysis_clock_outlier_anchor);
    d.count = fit.ends_rejected;
    d.detail =
        "collective ends left out of the clock fit: farther from their group's median "
        "end than 3 robust standard deviations of all ends (" +
        std::to_string(fit.anchors_dropped) + " groups left with fewer than two ends)";
    fit.diagnostics.push_back(d);
  }
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

  std::vector<End> ends;
  std::vector<Anchor> anchors = collect_anchors(run, match, pos, ends);
  const System s = linked_sets(static_cast<int>(ids.size()), anchors);
  if (s.nvar == 0 && ids.size() > 1) {  // no two ranks linked: nothing to align
    add_diagnostics(fit, opt);
    return fit;
  }
  fit.reference = ids[s.ref];
  std::vector<double> offset = seed_offsets(run, ids, s, anchors);
  fit::Matrix lap;
  for (int iter = 0; iter < 10; ++iter) {
    const std::vector<bool> before = kept_flags(anchors, ends);
    if (!reject_outliers(anchors, s, offset) && iter > 0) break;
    std::vector<double> next = offset;
    if (!solve_offsets(anchors, s, next, lap)) {  // the kept ends no longer link every rank
      restore_kept(before, anchors, ends);
      break;
    }
    offset = std::move(next);
  }
  solve_offsets(anchors, s, offset, lap);
  fill_result(fit, anchors, s, offset, lap);
  add_diagnostics(fit, opt);
  return fit;
}

}  // namespace braid::analysis

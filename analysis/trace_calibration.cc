#include "analysis/trace_calibration.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "analysis/fit.h"
#include "analysis/metrics.h"

namespace braid::analysis {

namespace {

bool direct(CollOp op) {
  return op == CollOp::Send || op == CollOp::Recv || op == CollOp::SendRecv ||
         op == CollOp::AllToAll || op == CollOp::ManyToMany;
}

struct Fit {
  double alpha = 0, beta = 0;
  bool ok = false;
};

// Weighted least squares on x1 = steps, x2 = wire bytes, y = time, weight 1/y².
Fit solve(const std::vector<CalibrationSample>& v, const std::vector<size_t>& use, double alpha0,
          bool fix_alpha) {
  fit::Matrix x;
  std::vector<double> y, w;
  for (size_t i : use) {
    const auto& s = v[i];
    x.push_back({latency_steps(s.op, s.nranks, s.algo),
                 wire_factor(s.op, s.nranks, s.algo) * static_cast<double>(s.bytes)});
    y.push_back(static_cast<double>(s.transfer_ns));
    w.push_back(1.0 / (y.back() * y.back()));
  }
  if (x.empty()) {  // no samples: every sum is 0
    x.push_back({0.0, 0.0});
    y.push_back(0);
    w.push_back(0);
  }
  auto [a, b] = fit::normal_equations(x, y, w);
  const double s11 = a[0][0], s12 = a[0][1], s22 = a[1][1], b1 = b[0][0], b2 = b[1][0];
  Fit f;
  auto beta_only = [&](double al) {
    f.alpha = al;
    f.beta = s22 > 0 ? std::max(0.0, (b2 - al * s12) / s22) : 0;
    f.ok = s22 > 0;
  };
  auto alpha_only = [&]() {
    f.beta = 0;
    f.alpha = s11 > 0 ? std::max(0.0, b1 / s11) : 0;
    f.ok = s11 > 0;
  };
  if (fix_alpha) {
    beta_only(alpha0);
    return f;
  }
  double det = s11 * s22 - s12 * s12;
  if (std::abs(det) <= 1e-9 * std::max(1.0, s11 * s22)) {
    beta_only(alpha0);
    return f;
  }
  fit::solve_linear(a, b, 0);
  f.alpha = b[0][0];
  f.beta = b[1][0];
  f.ok = true;
  if (f.alpha < 0)
    beta_only(0);
  else if (f.beta < 0)
    alpha_only();
  return f;
}

double predict(const Fit& f, const CalibrationSample& s) {
  return f.alpha * latency_steps(s.op, s.nranks, s.algo) +
         f.beta * wire_factor(s.op, s.nranks, s.algo) * static_cast<double>(s.bytes);
}

}  // namespace

CommCost fit_comm(const std::vector<CalibrationSample>& samples, const LinkCost& base,
                  const CalibrationOptions& opt) {
  CommCost cc;
  cc.link = base;
  std::vector<CalibrationSample> v;
  for (const auto& s : samples)
    if (s.transfer_ns > 0 && s.bytes > 0 && s.nranks > 0) v.push_back(s);
  if (static_cast<int>(v.size()) < std::max(1, opt.min_samples)) return cc;
  std::set<int64_t> sizes;
  for (const auto& s : v) sizes.insert(s.bytes);
  const bool fix_alpha = sizes.size() < 2;
  std::vector<size_t> all(v.size());
  for (size_t i = 0; i < v.size(); ++i) all[i] = i;
  Fit f = solve(v, all, base.alpha_ns, fix_alpha);
  if (!f.ok) return cc;
  cc.link = {f.alpha, f.beta};
  cc.samples = static_cast<int>(v.size());
  std::set<std::string> ops;
  for (const auto& s : v) ops.insert(std::string(to_string(s.op)));
  std::string op_list;
  for (const auto& o : ops) op_list += (op_list.empty() ? "" : ",") + o;
  cc.source = "calibrated on " + std::to_string(v.size()) + " " + op_list + " transfers" +
              (fix_alpha ? " of one size (alpha kept from the profile, beta fitted)" : "");

  // k-fold cross-validation: sample i belongs to fold i mod k.
  const int k = std::min<int>(opt.folds, static_cast<int>(v.size()));
  if (k >= 2) {
    double err = 0;
    int n = 0;
    for (int fold = 0; fold < k; ++fold) {
      std::vector<size_t> train;
      std::vector<size_t> test;
      for (size_t i = 0; i < v.size(); ++i)
        (static_cast<int>(i % k) == fold ? test : train).push_back(i);
      std::set<int64_t> train_sizes;
      for (size_t i : train) train_sizes.insert(v[i].bytes);
      Fit ff = solve(v, train, base.alpha_ns, train_sizes.size() < 2);
      if (!ff.ok) continue;
      for (size_t i : test) {
        double y = static_cast<double>(v[i].transfer_ns);
        err += std::abs(predict(ff, v[i]) - y) / y;
        ++n;
      }
    }
    if (n > 0) cc.cv_error = err / n;
  }
  return cc;
}

std::map<std::string, std::vector<CalibrationSample>> calibration_samples(const RunData& run,
                                                                          const MatchResult& match,
                                                                          const ClockFit& clocks) {
  std::map<std::string, std::vector<CalibrationSample>> out;
  for (const CollGroup& g : match.groups) {
    if (!g.complete() || g.mismatched || g.bytes <= 0) continue;
    Ns last = INT64_MIN, end = INT64_MIN;
    for (const CollRef& m : g.members) {
      const Collective& c = run.ranks.at(m.rank).collectives[m.index];
      last = std::max(last, c.start + clocks.offset(m.rank));
      end = std::max(end, c.end + clocks.offset(m.rank));
    }
    CalibrationSample s;
    s.op = g.op;
    s.bytes = g.bytes;
    s.nranks = group_nranks(run, g);
    const Collective& c0 = run.ranks.at(g.members[0].rank).collectives[g.members[0].index];
    std::string algo = run.str(c0.algo) + " " + run.str(c0.name);
    if (direct(g.op))
      s.algo = Algorithm::Direct;
    else if (algo.find("TREE") != std::string::npos || algo.find("tree") != std::string::npos)
      s.algo = Algorithm::Tree;
    else
      s.algo = Algorithm::Ring;
    s.transfer_ns = end - last;
    out[g.comm].push_back(s);
  }
  return out;
}

std::map<std::string, CommCost> calibrate(const RunData& run, const MatchResult& match,
                                          const ClockFit& clocks, CostModel& model,
                                          const CalibrationOptions& opt) {
  std::map<std::string, CommCost> out;
  for (auto& [comm, samples] : calibration_samples(run, match, clocks)) {
    std::vector<int32_t> members = comm_members(run, comm);
    CommCost cc = fit_comm(samples, model.link_for(comm, members), opt);
    if (cc.samples == 0) continue;
    model.set_comm(comm, cc);
    out[comm] = cc;
  }
  return out;
}

}  // namespace braid::analysis

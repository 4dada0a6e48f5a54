// Calibration of the sim on this host (replay/host_calibration.h): the probes and the workload
// (calibration_probes.cc) are replayed, and the sim's parameters fitted to their times.
#include "replay/host_calibration.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <tuple>
#include <unordered_map>

#include "analysis/cost_model.h"
#include "analysis/fit.h"
#include "replay/ab.h"
#include "replay/common.h"
#include "trace/error.h"
#include "trace/input.h"
#include "trace/json.h"

namespace braid::replay {

std::map<CollOp, std::map<int, SizedLink>> fit_workload_links(
    const fusion::Schedule& w, const std::vector<StepRecord>& steps,
    const analysis::CostModel& model, std::vector<CalibrationSample>* samples,
    double* sibling_stagger) {
  const fusion::Matching m = checked_matching(w);
  // Per kind, communicator size and message size: the sum and count of transfer times.
  std::map<std::tuple<CollOp, int, int64_t>, std::pair<double, int>> acc;
  std::vector<double> spreads;  // per step and sibling family: (max - min) / (2 · mean)
  for (const StepRecord& step : steps) {
    std::map<std::string, std::vector<double>> families;
    if (step.ranks.size() != w.ranks.size()) continue;
    std::vector<std::unordered_map<int64_t, const OpTime*>> at(step.ranks.size());
    // Per rank, its collectives' {stream, start, end}: a transfer that overlaps a collective
    // of another stream on a member times the two together and is left out.
    std::vector<std::vector<std::array<Ns, 3>>> colls(step.ranks.size());
    for (size_t r = 0; r < step.ranks.size(); ++r)
      for (const OpTime& t : step.ranks[r]) {
        at[r][t.op_id] = &t;
        if (auto ref = w.find_op(t.op_id); ref && w.op(*ref).collective())
          colls[r].push_back({t.stream, t.start, t.end});
      }
    for (const fusion::MatchGroup& g : m.groups) {
      const fusion::Collective& c0 = *w.op(g.members[0]).collective();
      const CollOp op = cost_op(g.op);
      const int t = op == CollOp::Send ? 2 : static_cast<int>(w.find_comm(g.comm)->ranks.size());
      Ns last_start = 0, last_end = 0;
      bool complete = true;
      for (const fusion::OpRef& mem : g.members) {
        auto it = at[static_cast<size_t>(mem.rank)].find(w.op(mem).id);
        if (it == at[static_cast<size_t>(mem.rank)].end()) {
          complete = false;
          break;
        }
        last_start = std::max(last_start, it->second->start);
        last_end = std::max(last_end, it->second->end);
      }
      if (!complete) continue;
      bool alone = true;
      for (const fusion::OpRef& mem : g.members)
        for (const auto& [stream, start, end] : colls[static_cast<size_t>(mem.rank)])
          if (stream != mem.stream && start < last_end && end > last_start) alone = false;
      if (!alone) continue;
      auto& [sum, count] = acc[{op, t, fusion::collective_bytes(w, c0)}];
      sum += static_cast<double>(last_end - last_start);
      ++count;
      if (std::string k = sibling_key(g); !k.empty())
        families[k].push_back(static_cast<double>(last_end - last_start));
    }
    for (const auto& [k, v] : families) {
      if (v.size() < 2) continue;
      const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      double mean = 0;
      for (double x : v) mean += x / static_cast<double>(v.size());
      if (mean > 0) spreads.push_back((*hi - *lo) / (2 * mean));
    }
  }
  if (sibling_stagger) *sibling_stagger = spreads.empty() ? 0 : quantile(spreads, 0.5);
  // T = α · steps + β · wire bytes per kind and size, weighted for relative error.
  std::map<CollOp, std::map<int, SizedLink>> links;
  std::map<std::pair<CollOp, int>, std::vector<std::pair<int64_t, double>>> points;
  for (const auto& [key, v] : acc)
    points[{std::get<0>(key), std::get<1>(key)}].push_back({std::get<2>(key), v.first / v.second});
  for (const auto& [key, pts] : points) {
    const auto [op, t] = key;
    std::vector<std::vector<double>> x;
    std::vector<double> y, wt;
    for (const auto& [bytes, mean] : pts) {
      const analysis::Algorithm algo = model.choose(op, bytes, t);
      x.push_back({analysis::latency_steps(op, t, algo),
                   analysis::wire_factor(op, t, algo) * static_cast<double>(bytes)});
      y.push_back(mean);
      wt.push_back(mean > 0 ? 1.0 / (mean * mean) : 0);
    }
    if (pts.size() < 2) continue;  // one size cannot separate α from β
    const std::vector<double> f =
        analysis::fit::nonneg_least_squares(x, y, wt, /*intercept=*/false);
    SizedLink sl{{f[0], f[1]}, 0, {}};
    // The line, then what each measured size differs from it by (points are by bytes).
    for (size_t i = 0; i < pts.size(); ++i)
      sl.corrections.push_back({pts[i].first, y[i] - sl.link.time_ns(x[i][0], x[i][1])});
    links[op][t] = sl;
    if (samples)
      for (size_t i = 0; i < pts.size(); ++i)
        samples->push_back(
            {"workload " + std::string(to_string(op)) + " " + std::to_string(pts[i].first) +
                 " B on " + std::to_string(t) + " ranks (mean transfer)",
             static_cast<Ns>(std::llround(y[i])),
             static_cast<Ns>(std::llround(std::max(
                 0.0, sl.link.time_ns(x[i][0], x[i][1]) + sl.correction_ns(pts[i].first))))});
  }
  return links;
}

namespace {

// The probes' median step times, and the workload probe with its steps.
struct Measured {
  std::vector<double> median;  // per probe
  const Probe* workload = nullptr;
  std::vector<StepRecord> workload_steps;
};

Measured measure_probes(Executor& ex, const std::vector<Probe>& probes,
                        const CalibrationOptions& o) {
  ReplayOptions ro = o.replay;
  ro.data = DataMode::Timing;
  ro.compute_scale = 1.0;
  Measured m;
  for (const Probe& p : probes) {
    auto prep = ex.prepare(p.schedule, ro);
    for (int i = 0; i < o.warmup; ++i) prep->run_step(false);
    for (int i = 0; i < o.steps; ++i) prep->run_step(true);
    ReplayResult r = prep->collect();
    if (p.workload) {
      m.workload = &p;
      m.workload_steps = r.steps;
    }
    std::vector<double> t;
    for (const StepRecord& s : r.steps) t.push_back(static_cast<double>(s.step_ns()));
    m.median.push_back(quantile(t, 0.5));
  }
  return m;
}

// What the fits share: the probes, their times, the world size and the host's cores.
struct ProbeFit {
  const std::vector<Probe>& probes;
  const std::vector<double>& measured;
  int nranks;
  int host_cores;  // 0: not sharing cores
  double c0 = 0;   // the empty step's time, the constant part of every probe

  int ranks_of(const Probe& p) const { return p.op == CollOp::Send ? 2 : p.group; }
  // A probe's collectives run on `active` ranks at once, this many of them per core.
  int share_of(const Probe& p) const {
    const int active = p.op == CollOp::Send ? nranks : p.group;
    return host_cores > 0 ? std::max(1, (active + host_cores - 1) / host_cores) : 1;
  }
  bool collective(size_t i) const {
    return probes[i].op != CollOp::Unknown && probes[i].op != CollOp::Barrier && measured[i] > 0;
  }
  // The cost model of `profile` with its intra-node link replaced by `link`.
  analysis::CostModel model_with(analysis::HardwareProfile cur,
                                 const analysis::LinkCost& link) const {
    cur.gpus_per_node = std::max(nranks, 1);
    cur.intra_node.latency_ns = link.alpha_ns;
    cur.intra_node.bandwidth_gbps = link.ns_per_byte > 0 ? 1.0 / link.ns_per_byte : 1e6;
    return analysis::CostModel(cur);
  }
};

// Collectives: T - c0 = count * (α * steps + β * wire bytes), with the algorithm the cost
// model picks for the current fit (refitted while the choice may change). A constant per probe
// step, the skew, is fitted with them: the first collective of a step waits for the ranks that
// left the step's barrier late. Returns the world's link; sets *skew.
analysis::LinkCost fit_world_link(const ProbeFit& pf, const analysis::HardwareProfile& profile,
                                  double* skew) {
  analysis::LinkCost link = analysis::LinkCost::of(profile.intra_node);
  *skew = 0;
  for (int round = 0; round < 3; ++round) {
    const analysis::CostModel model = pf.model_with(profile, link);
    std::vector<std::vector<double>> x;
    std::vector<double> y, w;
    for (size_t i = 0; i < pf.probes.size(); ++i) {
      const Probe& p = pf.probes[i];
      if (!pf.collective(i)) continue;
      if (p.esize != 4 || p.group != pf.nranks) continue;  // per byte of float32 on the world
      const int t = p.op == CollOp::Send ? 2 : pf.nranks;
      const analysis::Algorithm algo = model.choose(p.op, p.bytes, t);
      x.push_back({1.0, p.count * analysis::latency_steps(p.op, t, algo),
                   p.count * analysis::wire_factor(p.op, t, algo) * static_cast<double>(p.bytes)});
      y.push_back(pf.measured[i] - pf.c0);
      w.push_back(1.0 / (pf.measured[i] * pf.measured[i]));
    }
    if (x.empty()) break;
    std::vector<double> fit = analysis::fit::nonneg_least_squares(x, y, w, /*intercept=*/false);
    *skew = fit[0];
    link.alpha_ns = fit[1];
    link.ns_per_byte = fit[2];
  }
  return link;
}

// Per collective kind and communicator size, with the algorithms the globally fitted link
// picks; the world's fit of each kind becomes cal's op_links (and γ where two dtypes were
// probed).
std::map<CollOp, std::map<int, SizedLink>> fit_kind_links(const ProbeFit& pf,
                                                          const analysis::LinkCost& link,
                                                          double skew, Calibration& cal) {
  std::map<CollOp, std::map<int, SizedLink>> fits;  // per kind and size
  const analysis::CostModel model = pf.model_with(cal.profile, link);
  std::map<std::pair<CollOp, int>, std::vector<size_t>> by_op;
  for (size_t i = 0; i < pf.probes.size(); ++i)
    if (pf.collective(i)) by_op[{pf.probes[i].op, pf.probes[i].group}].push_back(i);
  for (const auto& [key, idx] : by_op) {
    const CollOp op = key.first;
    std::vector<std::vector<double>> x;
    std::vector<double> y, w;
    std::set<int> esizes;
    for (size_t i : idx) esizes.insert(pf.probes[i].esize);
    const bool per_element = esizes.size() > 1;  // probed in two dtypes: fit γ as well
    const int t = pf.ranks_of(pf.probes[idx[0]]);
    const double share = pf.share_of(pf.probes[idx[0]]);
    for (size_t i : idx) {
      const Probe& p = pf.probes[i];
      const analysis::Algorithm algo = model.choose(op, p.bytes, t);
      const double wire =
          p.count * analysis::wire_factor(op, t, algo) * static_cast<double>(p.bytes);
      x.push_back({p.count * analysis::latency_steps(op, t, algo), wire});
      if (per_element) x.back().push_back(wire / p.esize);
      y.push_back(pf.measured[i] - pf.c0 - skew);
      w.push_back(1.0 / (pf.measured[i] * pf.measured[i]));
    }
    const std::vector<double> f = analysis::fit::nonneg_least_squares(x, y, w, /*intercept=*/false);
    const SizedLink sl{{f[0] / share, f[1] / share}, per_element ? f[2] / share : 0, {}};
    fits[op][t] = sl;
    if (key.second == pf.nranks) {  // the world's fit is the kind's link for other sizes too
      cal.op_links[op] = sl.link;
      if (per_element) cal.reduce_ns_per_element[op] = sl.ns_per_element;
    }
  }
  return fits;
}

// Compute, per regime: T - c0 = count * (slowdown * duration + overhead).
void fit_compute(const ProbeFit& pf, Calibration& cal) {
  for (bool short_ops : {true, false}) {
    std::vector<std::vector<double>> x;
    std::vector<double> y, w;
    for (size_t i = 0; i < pf.probes.size(); ++i) {
      const Probe& p = pf.probes[i];
      if (p.op != CollOp::Unknown || p.workload || pf.measured[i] <= 0) continue;
      if ((p.compute_ns < kShortestSleepNs) != short_ops) continue;
      x.push_back({static_cast<double>(p.count) * static_cast<double>(p.compute_ns),
                   static_cast<double>(p.count)});
      y.push_back(pf.measured[i] - pf.c0);
      w.push_back(1.0 / (pf.measured[i] * pf.measured[i]));
    }
    if (x.empty()) continue;
    const std::vector<double> f = analysis::fit::nonneg_least_squares(x, y, w, /*intercept=*/false);
    const double slowdown = f[0] > 0 ? f[0] : 1.0;
    const Ns overhead = static_cast<Ns>(std::llround(f[1]));
    if (short_ops) {
      cal.short_compute_slowdown = slowdown;
      cal.short_compute_overhead_ns = overhead;
    } else {
      cal.compute_slowdown = slowdown;
      cal.compute_overhead_ns = overhead;
    }
  }
}

// How well the fitted model reproduces the probes: a sample per probe (the workload's
// collectives are samples of their own); returns the summed relative error and its count.
std::pair<double, int> score_probes(const ProbeFit& pf, double skew,
                                    const std::map<CollOp, std::map<int, SizedLink>>& fits,
                                    const analysis::CostModel& model, Calibration& cal) {
  const SimOptions so = cal.sim_options();
  double err = 0;
  int nerr = 0;
  for (size_t i = 0; i < pf.probes.size(); ++i) {
    const Probe& p = pf.probes[i];
    if (p.workload) continue;
    double pred;
    if (p.op == CollOp::Barrier) {
      pred = pf.c0;
    } else if (p.op == CollOp::Unknown) {
      pred = pf.c0 + p.count * static_cast<double>(so.compute_cost(p.compute_ns));
    } else {
      const int t = pf.ranks_of(p);
      const analysis::Algorithm algo = model.choose(p.op, p.bytes, t);
      auto k = fits.find(p.op);
      if (k == fits.end() || !k->second.count(t)) continue;  // not measured
      const SizedLink& l = k->second.at(t);
      const double wire = analysis::wire_factor(p.op, t, algo) * static_cast<double>(p.bytes);
      pred = pf.c0 + skew +
             p.count * pf.share_of(p) *
                 (l.link.time_ns(analysis::latency_steps(p.op, t, algo), wire) +
                  l.ns_per_element * wire / p.esize);
    }
    cal.samples.push_back({p.name, static_cast<Ns>(pf.measured[i]), static_cast<Ns>(pred)});
    if (pf.measured[i] > 0) {
      err += std::fabs(pred - pf.measured[i]) / pf.measured[i];
      ++nerr;
    }
  }
  return {err, nerr};
}

}  // namespace

Calibration calibrate(Executor& ex, int nranks, const CalibrationOptions& o) {
  Calibration cal;
  cal.ranks = nranks;
  cal.backend = std::string(ex.backend());
  cal.host_cores = o.share_cores ? ex.host_cores() : 0;
  if (cal.host_cores > 0 && ex.backend() == "mpi") cal.wait_spin_ns = kYieldWindowNs;
  // With more ranks than cores, a probe's collectives share each core among the ranks pinned
  // to it: the fitted times are divided by that to give the dedicated-core times that the
  // sim's processor sharing (SimOptions::host_cores) takes.
  const double world_share =
      cal.host_cores > 0 ? std::max(1, (nranks + cal.host_cores - 1) / cal.host_cores) : 1;
  cal.profile = analysis::load_profile(o.base_profile);
  const std::vector<Probe> probes = calibration_probes(nranks, o);
  const Measured m = measure_probes(ex, probes, o);
  if (!ex.reporting()) return cal;

  ProbeFit pf{probes, m.median, nranks, cal.host_cores};
  for (size_t i = 0; i < probes.size(); ++i)
    if (probes[i].op == CollOp::Barrier) pf.c0 = m.median[i];
  cal.step_overhead_ns = static_cast<Ns>(std::llround(pf.c0));

  double skew = 0;
  const analysis::LinkCost link = fit_world_link(pf, cal.profile, &skew);
  cal.start_skew_ns = static_cast<Ns>(std::llround(skew));
  const auto fits = fit_kind_links(pf, link, skew, cal);
  // Per size only when sizes other than the world's were probed (the world's fit is op_links).
  if (o.share_cores) cal.sized_links = fits;
  cal.profile.name = cal.profile.name + "-calibrated";
  cal.profile.description = "calibrated on this host: " + std::to_string(nranks) + " " +
                            cal.backend + " ranks (braid replay --calibrate)";
  cal.profile.gpus_per_node = std::max(nranks, cal.profile.gpus_per_node);
  cal.profile.intra_node.name = cal.backend + " transport (calibrated)";
  cal.profile.intra_node.latency_ns = std::round(link.alpha_ns / world_share);
  cal.profile.intra_node.bandwidth_gbps =
      link.ns_per_byte > 1e-9 ? world_share / link.ns_per_byte : 1000.0;
  fit_compute(pf, cal);

  const analysis::CostModel model(cal.profile);
  auto [err, nerr] = score_probes(pf, skew, fits, model, cal);
  // The workload's transfer times give each kind its per-size links (the sim prefers them to
  // op_links): on this host a collective costs what the load around it makes it cost (docs/
  // replay.md: a 2-rank all-gather in a replayed step took twice what the world probes'
  // α-β gave it), which the probes, one collective on every rank at a time, do not see.
  if (m.workload) {
    const size_t first = cal.samples.size();
    cal.sized_links = fit_workload_links(m.workload->schedule, m.workload_steps, model,
                                         &cal.samples, &cal.sibling_stagger);
    for (size_t i = first; i < cal.samples.size(); ++i)
      if (cal.samples[i].measured_ns > 0) {
        err += std::fabs(
                   static_cast<double>(cal.samples[i].predicted_ns - cal.samples[i].measured_ns)) /
               static_cast<double>(cal.samples[i].measured_ns);
        ++nerr;
      }
  }
  cal.mean_rel_error = nerr ? err / nerr : 0;
  return cal;
}

SimOptions Calibration::sim_options() const {
  SimOptions so;
  static_cast<HostCosts&>(so) = *this;
  so.short_compute_below_ns = kShortestSleepNs;
  so.step_start_ns = step_overhead_ns;
  return so;
}

std::string Calibration::to_json() const {
  json::Writer w(json::Writer::Style::Spaced);
  w.begin_object(/*lines=*/true);
  analysis::write_profile_members(w, profile);
  w.key("replay")
      .begin_object()
      .field("backend", backend)
      .field("ranks", ranks)
      .field("compute_overhead_ns", compute_overhead_ns)
      .field_fixed("compute_slowdown", compute_slowdown, 4)
      .field("short_compute_overhead_ns", short_compute_overhead_ns)
      .field_fixed("short_compute_slowdown", short_compute_slowdown, 4)
      .field("short_compute_below_ns", kShortestSleepNs)
      .field("step_overhead_ns", step_overhead_ns)
      .field("start_skew_ns", start_skew_ns)
      .field("host_cores", host_cores)
      .field("wait_spin_ns", wait_spin_ns)
      .field_fixed("sibling_stagger", sibling_stagger, 4)
      .field_fixed("mean_rel_error", mean_rel_error, 4)
      .key("op_links")
      .begin_object();
  for (const auto& [op, l] : op_links) {
    w.key(to_string(op))
        .begin_object()
        .field_fixed("alpha_ns", l.alpha_ns, 1)
        .key("ns_per_byte")
        .general(l.ns_per_byte, 6);
    if (auto e = reduce_ns_per_element.find(op); e != reduce_ns_per_element.end())
      w.key("ns_per_element").general(e->second, 6);
    if (auto k = sized_links.find(op); k != sized_links.end()) {
      w.key("by_ranks").begin_object();
      for (const auto& [ranks, sl] : k->second) {
        w.key(std::to_string(ranks))
            .begin_object()
            .field_fixed("alpha_ns", sl.link.alpha_ns, 1)
            .key("ns_per_byte")
            .general(sl.link.ns_per_byte, 6)
            .key("ns_per_element")
            .general(sl.ns_per_element, 6);
        if (!sl.corrections.empty()) {
          w.key("corrections").begin_array();
          for (const auto& [n, f] : sl.corrections)
            w.begin_array().value(n).fixed(f, 1).end_array();
          w.end_array();
        }
        w.end_object();
      }
      w.end_object();
    }
    w.end_object();
  }
  w.end_object().end_object().end_object();
  return w.take() + "\n";
}

SimProfile load_sim_profile(const std::string& name_or_path) {
  SimProfile sp;
  sp.profile = analysis::load_profile(name_or_path);
  if (analysis::find_profile(name_or_path)) return sp;
  const std::string text = read_whole_file(name_or_path);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  if (parser.parse(padded).get(root)) return sp;  // parse_profile accepted it; keep its answer
  simdjson::dom::element replay;
  if (root["replay"].get(replay)) return sp;
  int64_t ov = 0;
  if (replay["compute_overhead_ns"].get_int64().get(ov) == simdjson::SUCCESS) {
    sp.sim.compute_overhead_ns = std::max<int64_t>(ov, 0);
    sp.calibrated = true;
  }
  // Files written before the per-regime fit have only compute_overhead_ns: one pair for all.
  auto number = [&](const char* key, double& out) {
    double d;
    if (replay[key].get_double().get(d) == simdjson::SUCCESS && d >= 0) out = d;
  };
  auto integer = [&](const char* key, Ns& out) {
    int64_t v;
    if (replay[key].get_int64().get(v) == simdjson::SUCCESS && v >= 0) out = v;
  };
  number("compute_slowdown", sp.sim.compute_slowdown);
  number("short_compute_slowdown", sp.sim.short_compute_slowdown);
  integer("short_compute_overhead_ns", sp.sim.short_compute_overhead_ns);
  integer("short_compute_below_ns", sp.sim.short_compute_below_ns);
  integer("step_overhead_ns", sp.sim.step_start_ns);
  integer("start_skew_ns", sp.sim.start_skew_ns);
  integer("wait_spin_ns", sp.sim.wait_spin_ns);
  number("sibling_stagger", sp.sim.sibling_stagger);
  {
    Ns cores = 0;
    integer("host_cores", cores);
    sp.sim.host_cores = static_cast<int>(std::min<Ns>(cores, 1 << 20));
  }
  simdjson::dom::object links;
  if (replay["op_links"].get_object().get(links) == simdjson::SUCCESS)
    for (auto [key, v] : links) {
      const std::optional<CollOp> op = coll_op_from_string(key);
      double a = 0, b = 0;
      if (!op || v["alpha_ns"].get_double().get(a) || v["ns_per_byte"].get_double().get(b))
        throw Error(ErrorCode::BadFormat, name_or_path + ": replay.op_links." + std::string(key) +
                                              ": expected a collective with alpha_ns and "
                                              "ns_per_byte");
      sp.sim.op_links[*op] = {std::max(a, 0.0), std::max(b, 0.0)};
      double g = 0;
      if (v["ns_per_element"].get_double().get(g) == simdjson::SUCCESS)
        sp.sim.reduce_ns_per_element[*op] = std::max(g, 0.0);
      simdjson::dom::object by_ranks;
      if (v["by_ranks"].get_object().get(by_ranks) == simdjson::SUCCESS)
        for (auto [size, l] : by_ranks) {
          int ranks = 0;
          const std::string_view sz = size;
          const auto [end, ec] = std::from_chars(sz.data(), sz.data() + sz.size(), ranks);
          double la = 0, lb = 0, lg = 0;
          if (ec != std::errc() || end != sz.data() + sz.size() || ranks < 1 ||
              l["alpha_ns"].get_double().get(la) || l["ns_per_byte"].get_double().get(lb))
            throw Error(ErrorCode::BadFormat,
                        name_or_path + ": replay.op_links." + std::string(key) + ".by_ranks." +
                            std::string(sz) +
                            ": expected a rank count with alpha_ns and ns_per_byte");
          if (l["ns_per_element"].get_double().get(lg)) lg = 0;  // optional
          SizedLink sl{{std::max(la, 0.0), std::max(lb, 0.0)}, std::max(lg, 0.0), {}};
          simdjson::dom::array pts;
          if (l["corrections"].get_array().get(pts) == simdjson::SUCCESS)
            for (simdjson::dom::element pt : pts) {
              simdjson::dom::array pair;
              int64_t b = 0;
              double c = 0;
              if (pt.get_array().get(pair) || pair.size() != 2 || pair.at(0).get_int64().get(b) ||
                  pair.at(1).get_double().get(c) || b < 1 ||
                  (!sl.corrections.empty() && b <= sl.corrections.back().first))
                throw Error(ErrorCode::BadFormat,
                            name_or_path + ": replay.op_links." + std::string(key) + ".by_ranks." +
                                std::string(sz) +
                                ".corrections: expected [bytes, ns] pairs by increasing bytes");
              sl.corrections.push_back({b, c});
            }
          sp.sim.sized_links[*op][ranks] = sl;
        }
    }
  return sp;
}

}  // namespace braid::replay

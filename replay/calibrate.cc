#include "replay/calibrate.h"

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
#include "trace/import/input.h"
#include "trace/json.h"

namespace braid::replay {

namespace {

fusion::Slice slice(const char* b, int64_t off, int64_t n) { return {b, off, n}; }

fusion::Schedule world_schedule(int n, const std::string& name, int64_t elems,
                                const char* dtype = "float32") {
  fusion::Schedule s;
  s.name = name;
  s.provenance = {"calibration probe"};
  fusion::Comm world{"world", {}};
  for (int r = 0; r < n; ++r) world.ranks.push_back(r);
  s.comms.push_back(world);
  for (int r = 0; r < n; ++r) {
    s.add_buffer(r, "a", dtype, std::max<int64_t>(elems, 1));
    s.add_buffer(r, "b", dtype, std::max<int64_t>(elems, 1));
    s.add_stream(r, "main");
  }
  return s;
}

fusion::Collective calibration_coll(CollOp op, int64_t count, fusion::Slice in, fusion::Slice out,
                                    const char* dtype = "float32") {
  fusion::Collective c;
  c.op = op;
  c.comm = "world";
  c.dtype = dtype;
  c.count = count;
  c.in = std::move(in);
  c.out = std::move(out);
  c.label = std::string(to_string(op));
  return c;
}

// Kinds whose MPI implementation reduces element by element on the CPU.
bool reduces(CollOp op) { return op == CollOp::AllReduce || op == CollOp::ReduceScatter; }

// One collective probe: `repeats` collectives of `op` of `bytes` (per rank's full tensor) on
// ranks 0..g-1 (the world when g == n; the others idle), or ping-pongs between ranks 2k and
// 2k+1 for Send.
Probe collective_probe(int n, int g, CollOp op, int esize, const char* dtype, int64_t bytes,
                       int repeats) {
  const int64_t e = std::max<int64_t>(bytes / esize, 1);
  const int64_t per = std::max<int64_t>(e / g, 1);  // per-rank count of the "n*count" ops
  Probe p;
  p.op = op;
  p.esize = esize;
  p.group = g;
  p.count = op == CollOp::Send ? 2 * repeats : repeats;
  int64_t elems = e;
  if (op == CollOp::AllGather || op == CollOp::ReduceScatter || op == CollOp::AllToAll)
    elems = per * g;
  p.bytes = elems * esize;
  p.name = std::string(to_string(op)) + " " + std::to_string(p.bytes) + " B " +
           (esize == 4 ? "" : "bfloat16 ") + "x" + std::to_string(p.count) +
           (g == n ? "" : " on " + std::to_string(g) + " ranks");
  // Each repeat works on its own part of the buffers, as a step's collectives work on
  // different tensors: reusing one times cache-hot copies (8 bfloat16 all-reduces of 1 MiB on
  // 4 of 16 ranks: 6.8 ms reusing one buffer, 9.2 ms on eight).
  const int64_t span = op == CollOp::AllGather ? per * g : elems;
  fusion::Schedule s = world_schedule(n, "calibrate " + p.name, span * repeats, dtype);
  const char* comm = "world";
  if (g != n) {
    fusion::Comm c{"group", {}};
    for (int r = 0; r < g; ++r) c.ranks.push_back(r);
    s.comms.push_back(c);
    comm = "group";
  }
  auto coll = [&](CollOp op, int64_t count, fusion::Slice in, fusion::Slice out) {
    fusion::Collective c = calibration_coll(op, count, std::move(in), std::move(out), dtype);
    c.comm = comm;
    return c;
  };
  for (int r = 0; r < n; ++r) {
    if (r >= g) {
      s.append(r, 0, fusion::Record{"idle"});
      continue;
    }
    for (int rep = 0; rep < repeats; ++rep) {
      const int64_t at = rep * span;
      switch (op) {
        case CollOp::AllReduce:
          s.append(r, 0, coll(op, e, slice("a", at, e), slice("a", at, e)));
          break;
        case CollOp::AllGather:
          s.append(r, 0, coll(op, per, slice("a", at, per), slice("b", at, per * g)));
          break;
        case CollOp::ReduceScatter:
          s.append(r, 0, coll(op, per, slice("a", at, per * g), slice("b", at, per)));
          break;
        case CollOp::AllToAll:
          s.append(r, 0, coll(op, per, slice("a", at, per * g), slice("b", at, per * g)));
          break;
        default: {  // ping-pong between ranks 2k and 2k+1
          if ((r ^ 1) >= n) break;
          fusion::Collective out = coll(CollOp::Send, e, slice("a", at, e), {});
          fusion::Collective in = coll(CollOp::Recv, e, {}, slice("b", at, e));
          out.peer = in.peer = r ^ 1;
          if (r % 2 == 0) {
            s.append(r, 0, out);
            s.append(r, 0, in);
          } else {
            s.append(r, 0, in);
            s.append(r, 0, out);
          }
        }
      }
    }
  }
  p.schedule = std::move(s);
  return p;
}

}  // namespace

std::vector<Probe> calibration_probes(int n, const CalibrationOptions& o) {
  std::vector<Probe> v;
  // Broadcast is left out: MPI sends small broadcasts eagerly, so a chain of them pipelines
  // instead of synchronizing as the model (and NCCL) does.
  const std::array<CollOp, 5> ops{CollOp::AllReduce, CollOp::AllGather, CollOp::ReduceScatter,
                                  CollOp::AllToAll, CollOp::Send};
  {
    // An empty step: what a step costs beyond its ops (barrier exit, waking the stream threads).
    Probe p;
    p.name = "empty step";
    p.op = CollOp::Barrier;
    p.schedule = world_schedule(n, "calibrate empty step", 1);
    for (int r = 0; r < n; ++r) p.schedule.append(r, 0, fusion::Record{"start"});
    v.push_back(std::move(p));
  }
  // Collectives on the world and, with share_cores, on the first g ranks for every power of
  // two g below the world (the others idle): MPI picks its algorithm by communicator size and
  // the fit is per kind and size. Reducing kinds are probed in float32 and in a 16-bit type of
  // the same bytes, which separates their per-element reduction cost from the per-byte one.
  std::vector<int> groups{n};
  if (o.share_cores)
    for (int g = 2; g < n; g *= 2) groups.push_back(g);
  for (int g : groups)
    for (CollOp op : ops)
      for (int esize : {4, 2}) {
        if (n < 2) break;
        if ((esize != 4 && !reduces(op)) || (op == CollOp::Send && g != n)) continue;
        const char* dtype = esize == 4 ? "float32" : "bfloat16";
        for (int64_t bytes : o.sizes)
          v.push_back(collective_probe(n, g, op, esize, dtype, bytes, o.repeats));
      }
  // Two durations on each side of kShortestSleepNs (the mpi backend spins the short ones and,
  // on an oversubscribed host, sleeps the long ones), each as chains of two lengths, so
  // slowdown and overhead are fitted per regime. Long ops run on every rank at once, as the
  // ranks of a tensor- or expert-parallel group sleep and wake together. Short ops run on rank
  // 0 alone while the others wait in MPI, as a short op between two collectives runs: chains
  // of spinning ops on more ranks than cores would share the cores, which the sim does not
  // model (docs/replay.md).
  if (n >= 2) {
    // One 64 B all-reduce per step: with the chains of 8 it separates what a step's first
    // collective costs beyond the others (the ranks' skew leaving the step's barrier).
    Probe p;
    p.op = CollOp::AllReduce;
    p.count = 1;
    p.bytes = 64;
    p.name = "allreduce 64 B x1";
    p.group = n;
    fusion::Schedule s = world_schedule(n, "calibrate " + p.name, 16);
    for (int r = 0; r < n; ++r)
      s.append(r, 0, calibration_coll(CollOp::AllReduce, 16, slice("a", 0, 16), slice("a", 0, 16)));
    p.schedule = std::move(s);
    v.push_back(std::move(p));
  }
  if (n >= 2 && o.workload && !o.share_cores) {
    Probe p;
    p.name = "calibration workload";
    p.workload = true;
    p.schedule = calibration_workload(n);
    v.push_back(std::move(p));
  }
  for (Ns d : {Ns{10'000}, Ns{40'000}, Ns{100'000}, Ns{500'000}})
    for (int k : {10, 40}) {
      Probe p;
      p.count = k;
      p.compute_ns = d;
      const bool alone = d < kShortestSleepNs;
      p.name = "compute " + std::to_string(d / 1000) + " us x" + std::to_string(k) +
               (alone ? " (rank 0)" : "");
      fusion::Schedule s = world_schedule(n, "calibrate " + p.name, 1);
      for (int r = 0; r < n; ++r) {
        if (alone && r > 0) {
          s.append(r, 0, fusion::Record{"idle"});
          continue;
        }
        for (int i = 0; i < k; ++i) {
          fusion::Compute c;
          c.label = "probe";
          c.duration_ns = d;
          c.opaque = true;
          s.append(r, 0, c);
        }
      }
      p.schedule = std::move(s);
      v.push_back(std::move(p));
    }
  return v;
}

fusion::Schedule calibration_workload(int n) {
  constexpr int64_t kLargest = 4 << 20;      // bytes
  constexpr int64_t kRegion = kLargest / 2;  // bfloat16 elements of the largest op
  constexpr int kRegions = 4;                // rotated, so copies are not cache-hot
  const std::array<int64_t, 5> sizes{4 << 10, 64 << 10, 256 << 10, 1 << 20, kLargest};
  const std::array<CollOp, 4> kinds{CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce,
                                    CollOp::AllToAll};
  const std::array<Ns, 4> durations{60'000, 150'000, 400'000, 1'000'000};
  fusion::Schedule s;
  s.name = "calibration workload " + std::to_string(n) + " ranks";
  s.provenance = {"calibration workload (braid replay --calibrate)"};
  // Layouts: {group size, strided}. Contiguous groups of g ranks are [k*g, (k+1)*g); strided
  // ones are {k, k + n/g, k + 2n/g, ...}.
  std::vector<std::pair<int, bool>> layouts;
  for (int g = 2; g < n; g *= 2)
    if (n % g == 0) {
      layouts.push_back({g, false});
      layouts.push_back({g, true});
    }
  layouts.push_back({n, false});
  auto comm_id = [](int g, bool strided, int k) {
    return (strided ? "s" : "c") + std::to_string(g) + "." + std::to_string(k);
  };
  for (auto [g, strided] : layouts)
    for (int k = 0; k < n / g; ++k) {
      fusion::Comm c{comm_id(g, strided, k), {}};
      for (int j = 0; j < g; ++j) c.ranks.push_back(strided ? k + j * (n / g) : k * g + j);
      s.comms.push_back(c);
    }
  // The overlapping all-reduce's communicator: the strided halves (the world for 2 ranks),
  // its own copy so its order against the main stream's collectives needs no events.
  const int side_g = n % 2 == 0 && n >= 4 ? n / 2 : n;
  for (int k = 0; k < n / side_g; ++k) {
    fusion::Comm c{"side." + std::to_string(k), {}};
    for (int j = 0; j < side_g; ++j) c.ranks.push_back(k + j * (n / side_g));
    s.comms.push_back(c);
  }
  s.comms.push_back({"p2p", {}});
  for (int r = 0; r < n; ++r) s.comms.back().ranks.push_back(r);
  for (int r = 0; r < n; ++r) {
    s.add_rank(r);
    s.add_buffer(r, "a", "bfloat16", kRegion * kRegions);
    s.add_buffer(r, "b", "bfloat16", kRegion * kRegions);
    s.add_buffer(r, "c", "bfloat16", 2 * kRegion);
    const int main = s.add_stream(r, "main");
    const int side = s.add_stream(r, "side");
    size_t i = 0;
    auto compute = [&] {
      fusion::Compute c;
      c.label = "workload " + std::to_string(durations[i % durations.size()] / 1000) + " us";
      c.duration_ns = durations[i % durations.size()];
      c.opaque = true;
      s.append(r, main, c);
    };
    for (int64_t bytes : sizes) {
      const int64_t e = bytes / 2;
      for (CollOp op : kinds)
        for (auto [g, strided] : layouts) {
          const int64_t at = static_cast<int64_t>(i % kRegions) * kRegion;
          compute();
          ++i;
          const int64_t per = e / g, all = per * g;  // a whole block per rank
          fusion::Collective c;
          switch (op) {
            case CollOp::AllGather:
              c = calibration_coll(op, per, slice("a", at, per), slice("b", at, all), "bfloat16");
              break;
            case CollOp::ReduceScatter:
              c = calibration_coll(op, per, slice("a", at, all), slice("b", at, per), "bfloat16");
              break;
            case CollOp::AllReduce:
              c = calibration_coll(op, e, slice("a", at, e), slice("a", at, e), "bfloat16");
              break;
            default:
              c = calibration_coll(op, per, slice("a", at, all), slice("b", at, all), "bfloat16");
          }
          c.comm = comm_id(g, strided, strided ? r % (n / g) : r / g);
          s.append(r, main, c);
          if (i == 2 * layouts.size()) s.append(r, main, fusion::Record{"side"});
        }
      // Pipeline-like transfers between rank r and r + n/2, each way once (an odd world's last
      // rank has no partner).
      const int half = n / 2;
      const int peer = r < half ? r + half : r - half;
      if (peer >= n || (n % 2 == 1 && r == n - 1)) continue;
      for (int dir = 0; dir < 2; ++dir) {
        compute();
        ++i;
        const bool send = (r < half) == (dir == 0);
        fusion::Collective c = calibration_coll(
            send ? CollOp::Send : CollOp::Recv, e, send ? slice("a", 0, e) : fusion::Slice{},
            send ? fusion::Slice{} : slice("b", 0, e), "bfloat16");
        c.comm = "p2p";
        c.peer = peer;
        s.append(r, main, c);
      }
    }
    s.append(r, side, fusion::Wait{"side"});
    fusion::Collective ar =
        calibration_coll(CollOp::AllReduce, 2 * kRegion, slice("c", 0, 2 * kRegion),
                         slice("c", 0, 2 * kRegion), "bfloat16");
    ar.comm = "side." + std::to_string(r % (n / side_g));
    ar.label = "allreduce (overlapping)";
    s.append(r, side, ar);
    s.append(r, side, fusion::Record{"side done"});
    s.append(r, main, fusion::Wait{"side done"});
  }
  return s;
}

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
      auto& [sum, count] = acc[{op, t, collective_bytes(c0, t, element_size(c0.dtype))}];
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
  std::vector<Probe> probes = calibration_probes(nranks, o);
  ReplayOptions ro = o.replay;
  ro.data = DataMode::Timing;
  ro.compute_scale = 1.0;
  std::vector<double> measured;
  const Probe* workload = nullptr;
  std::vector<StepRecord> workload_steps;
  for (const Probe& p : probes) {
    auto prep = ex.prepare(p.schedule, ro);
    for (int i = 0; i < o.warmup; ++i) prep->run_step(false);
    for (int i = 0; i < o.steps; ++i) prep->run_step(true);
    ReplayResult r = prep->collect();
    if (p.workload) {
      workload = &p;
      workload_steps = r.steps;
    }
    std::vector<double> t;
    for (const StepRecord& s : r.steps) t.push_back(static_cast<double>(s.step_ns()));
    measured.push_back(quantile(t, 0.5));
  }
  if (!ex.reporting()) return cal;

  // The empty step's time is the constant part of every probe.
  double c0 = 0;
  for (size_t i = 0; i < probes.size(); ++i)
    if (probes[i].op == CollOp::Barrier) c0 = measured[i];
  cal.step_overhead_ns = static_cast<Ns>(std::llround(c0));

  // Collectives: T - c0 = count * (α * steps + β * wire bytes), with the algorithm the cost
  // model picks for the current fit (refitted while the choice may change).
  // A constant per probe step, the skew, is fitted with them: the first collective of a step
  // waits for the ranks that left the step's barrier late.
  analysis::LinkCost link = analysis::LinkCost::of(cal.profile.intra_node);
  double skew = 0;
  for (int round = 0; round < 3; ++round) {
    analysis::HardwareProfile cur = cal.profile;
    cur.gpus_per_node = std::max(nranks, 1);
    cur.intra_node.latency_ns = link.alpha_ns;
    cur.intra_node.bandwidth_gbps = link.ns_per_byte > 0 ? 1.0 / link.ns_per_byte : 1e6;
    analysis::CostModel model(cur);
    std::vector<std::vector<double>> x;
    std::vector<double> y, w;
    for (size_t i = 0; i < probes.size(); ++i) {
      const Probe& p = probes[i];
      if (p.op == CollOp::Unknown || p.op == CollOp::Barrier || measured[i] <= 0) continue;
      if (p.esize != 4 || p.group != nranks) continue;  // per byte of float32 on the world
      const int t = p.op == CollOp::Send ? 2 : nranks;
      const analysis::Algorithm algo = model.choose(p.op, p.bytes, t);
      x.push_back({1.0, p.count * analysis::latency_steps(p.op, t, algo),
                   p.count * analysis::wire_factor(p.op, t, algo) * static_cast<double>(p.bytes)});
      y.push_back(measured[i] - c0);
      w.push_back(1.0 / (measured[i] * measured[i]));
    }
    if (x.empty()) break;
    std::vector<double> fit = analysis::fit::nonneg_least_squares(x, y, w, /*intercept=*/false);
    skew = fit[0];
    link.alpha_ns = fit[1];
    link.ns_per_byte = fit[2];
  }
  cal.start_skew_ns = static_cast<Ns>(std::llround(skew));
  // Per collective kind and communicator size, with the algorithms the globally fitted link
  // picks. A probe's collectives run on `active` ranks at once, `share` of them per core.
  auto ranks_of = [&](const Probe& p) { return p.op == CollOp::Send ? 2 : p.group; };
  std::map<CollOp, std::map<int, SizedLink>> fits;  // per kind and size
  auto share_of = [&](const Probe& p) {
    const int active = p.op == CollOp::Send ? nranks : p.group;
    return cal.host_cores > 0 ? std::max(1, (active + cal.host_cores - 1) / cal.host_cores) : 1;
  };
  {
    analysis::HardwareProfile cur = cal.profile;
    cur.gpus_per_node = std::max(nranks, 1);
    cur.intra_node.latency_ns = link.alpha_ns;
    cur.intra_node.bandwidth_gbps = link.ns_per_byte > 0 ? 1.0 / link.ns_per_byte : 1e6;
    analysis::CostModel model(cur);
    std::map<std::pair<CollOp, int>, std::vector<size_t>> by_op;
    for (size_t i = 0; i < probes.size(); ++i)
      if (probes[i].op != CollOp::Unknown && probes[i].op != CollOp::Barrier && measured[i] > 0)
        by_op[{probes[i].op, probes[i].group}].push_back(i);
    for (const auto& [key, idx] : by_op) {
      const CollOp op = key.first;
      std::vector<std::vector<double>> x;
      std::vector<double> y, w;
      std::set<int> esizes;
      for (size_t i : idx) esizes.insert(probes[i].esize);
      const bool per_element = esizes.size() > 1;  // probed in two dtypes: fit γ as well
      const int t = ranks_of(probes[idx[0]]);
      const double share = share_of(probes[idx[0]]);
      for (size_t i : idx) {
        const Probe& p = probes[i];
        const analysis::Algorithm algo = model.choose(op, p.bytes, t);
        const double wire =
            p.count * analysis::wire_factor(op, t, algo) * static_cast<double>(p.bytes);
        x.push_back({p.count * analysis::latency_steps(op, t, algo), wire});
        if (per_element) x.back().push_back(wire / p.esize);
        y.push_back(measured[i] - c0 - skew);
        w.push_back(1.0 / (measured[i] * measured[i]));
      }
      const std::vector<double> f =
          analysis::fit::nonneg_least_squares(x, y, w, /*intercept=*/false);
      const SizedLink sl{{f[0] / share, f[1] / share}, per_element ? f[2] / share : 0, {}};
      fits[op][t] = sl;
      if (key.second == nranks) {  // the world's fit is the kind's link for other sizes too
        cal.op_links[op] = sl.link;
        if (per_element) cal.reduce_ns_per_element[op] = sl.ns_per_element;
      }
    }
  }
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

  // Compute, per regime: T - c0 = count * (slowdown * duration + overhead).
  for (bool short_ops : {true, false}) {
    std::vector<std::vector<double>> x;
    std::vector<double> y, w;
    for (size_t i = 0; i < probes.size(); ++i) {
      const Probe& p = probes[i];
      if (p.op != CollOp::Unknown || p.workload || measured[i] <= 0) continue;
      if ((p.compute_ns < kShortestSleepNs) != short_ops) continue;
      x.push_back({static_cast<double>(p.count) * static_cast<double>(p.compute_ns),
                   static_cast<double>(p.count)});
      y.push_back(measured[i] - c0);
      w.push_back(1.0 / (measured[i] * measured[i]));
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
  const SimOptions so = cal.sim_options();
  const double cc0 = c0;

  // How well the fitted model reproduces the probes.
  analysis::CostModel model(cal.profile);
  double err = 0;
  int nerr = 0;
  for (size_t i = 0; i < probes.size(); ++i) {
    const Probe& p = probes[i];
    if (p.workload) continue;  // its collectives are samples of their own, below
    double pred;
    if (p.op == CollOp::Barrier) {
      pred = c0;
    } else if (p.op == CollOp::Unknown) {
      pred = cc0 + p.count * static_cast<double>(so.compute_cost(p.compute_ns));
    } else {
      const int t = ranks_of(p);
      const analysis::Algorithm algo = model.choose(p.op, p.bytes, t);
      auto k = fits.find(p.op);
      if (k == fits.end() || !k->second.count(t)) continue;  // not measured
      const SizedLink& l = k->second.at(t);
      const double wire = analysis::wire_factor(p.op, t, algo) * static_cast<double>(p.bytes);
      pred = c0 + skew +
             p.count * share_of(p) *
                 (l.link.time_ns(analysis::latency_steps(p.op, t, algo), wire) +
                  l.ns_per_element * wire / p.esize);
    }
    cal.samples.push_back({p.name, static_cast<Ns>(measured[i]), static_cast<Ns>(pred)});
    if (measured[i] > 0) {
      err += std::fabs(pred - measured[i]) / measured[i];
      ++nerr;
    }
  }
  // The workload's transfer times give each kind its per-size links (the sim prefers them to
  // op_links): on this host a collective costs what the load around it makes it cost (docs/
  // replay.md: a 2-rank all-gather in a replayed step took twice what the world probes'
  // α-β gave it), which the probes, one collective on every rank at a time, do not see.
  if (workload) {
    const size_t first = cal.samples.size();
    cal.sized_links = fit_workload_links(workload->schedule, workload_steps, model, &cal.samples,
                                         &cal.sibling_stagger);
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
  so.compute_overhead_ns = compute_overhead_ns;
  so.compute_slowdown = compute_slowdown;
  so.short_compute_overhead_ns = short_compute_overhead_ns;
  so.short_compute_slowdown = short_compute_slowdown;
  so.short_compute_below_ns = kShortestSleepNs;
  so.op_links = op_links;
  so.reduce_ns_per_element = reduce_ns_per_element;
  so.sized_links = sized_links;
  so.step_start_ns = step_overhead_ns;
  so.start_skew_ns = start_skew_ns;
  so.host_cores = host_cores;
  so.wait_spin_ns = wait_spin_ns;
  so.sibling_stagger = sibling_stagger;
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

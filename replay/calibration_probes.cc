// The host calibration's probe schedules and its workload (replay/host_calibration.h): what is
// replayed on the backend; host_calibration.cc fits the sim to the measured times.
#include <algorithm>
#include <string>
#include <vector>

#include "replay/common.h"
#include "replay/host_calibration.h"

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

}  // namespace braid::replay

// Calibration of the sim against a real backend: probe schedules (one collective of one size
// repeated, and chains of compute ops) are replayed on the backend, and the sim's parameters are
// fitted to the measured step times by least squares on relative error:
//   - the link's α (per step) and β (per byte), with the cost model's steps and wire factors for
//     each probe's op, size and algorithm, over all probes (the profile's link) and per
//     collective kind (what the sim uses for that kind), plus for reducing kinds a cost per
//     element (probed in float32 and bfloat16); with share_cores also per communicator size,
//     per dedicated core, for the sim's processor sharing;
//   - per-compute-op overheads (what a compute op costs the backend beyond its duration), one
//     for ops shorter than kShortestSleepNs (which the mpi backend always spins) and one for
//     longer ops (which it sleeps on an oversubscribed host, paying the scheduler's wake-up);
//   - α and β per collective kind and communicator size (what the sim prefers), from the
//     calibration workload (calibration_workload): the mean transfer time of its collectives,
//     timed while the rest of a step runs around them, as in a replay (default model only).
// The result is a hardware profile (a JSON file usable anywhere as --profile) whose intra-node
// link is the fitted one, with every rank on one node, plus a "replay" object holding the
// compute overhead and how the calibration was made.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "analysis/hardware.h"
#include "replay/executor.h"

namespace braid::replay {

struct CalibrationOptions {
  std::string base_profile = "cpu-shm";
  std::vector<int64_t> sizes = {64, 4096, 65536, 262144, 1048576};  // bytes per probe collective
  // Collectives per probe step.
  int repeats = 8;
  // Measured steps per probe (median): the probes are short, and fewer left the fit at the
  // mercy of a few descheduled steps.
  int steps = 15;
  int warmup = 2;
  // Model the host's cores (an oversubscribed mpi job): probe each communicator size of 2, 4,
  // 8, ... ranks alone as well as the world, fit per dedicated core, and let the sim share the
  // pinned cores between the collectives that run at once (SimOptions::host_cores). Off: the
  // world probes' times, with every rank busy, stand for every collective (docs/replay.md
  // compares the two on this host).
  bool share_cores = false;
  // Also replay the calibration workload (calibration_workload) and take each collective
  // kind's per-size link from its collectives' transfer times (default model only).
  bool workload = true;
  ReplayOptions replay;
};

struct CalibrationSample {
  std::string probe;  // "allreduce 4096 B x8", "compute 200 us x10"
  Ns measured_ns = 0;
  Ns predicted_ns = 0;  // by the fitted model
};

// A fit of the sim's host costs (HostCosts, SimOptions' own) to a backend on this host: the
// short_ compute pair is for ops shorter than kShortestSleepNs; op_links, reduce_ns_per_element
// and sized_links per probed collective kind (and communicator size), the profile's link being
// the fit over all of them; start_skew_ns fitted on the collective probes; host_cores is the
// executor's host_cores() (with more ranks than cores, the links are per dedicated core: the
// probes' times divided by the ranks per core); sibling_stagger from the workload.
struct Calibration : HostCosts {
  analysis::HardwareProfile profile;
  Ns step_overhead_ns = 0;    // the empty step: SimOptions::step_start_ns
  double mean_rel_error = 0;  // of the fitted model on the probes and the workload
  int ranks = 0;
  std::string backend;
  std::vector<CalibrationSample> samples;
  // The profile JSON plus "replay": {"compute_overhead_ns", "compute_slowdown",
  // "short_compute_overhead_ns", "short_compute_slowdown", "short_compute_below_ns",
  // "op_links": {"allreduce": {"alpha_ns", "ns_per_byte"[, "ns_per_element"]}, ...}, "ranks",
  // "backend", "host_cores", ...}.
  std::string to_json() const;
  // The sim's options this calibration gives.
  SimOptions sim_options() const;
};

// The probe schedules for `nranks` ranks (exposed for tests).
struct Probe {
  std::string name;
  fusion::Schedule schedule;
  CollOp op = CollOp::Unknown;  // Unknown: a compute probe; Barrier: the empty step
  int64_t bytes = 0;
  int esize = 4;          // element size of the collective's dtype (float32, or bfloat16)
  int group = 0;          // the collective runs on ranks 0..group-1 (the world: every rank)
  int count = 0;          // collectives or compute ops per step
  Ns compute_ns = 0;      // duration of each compute op
  bool workload = false;  // the calibration workload (op Unknown, count 0)
};
std::vector<Probe> calibration_probes(int nranks, const CalibrationOptions& o);

// The calibration workload for `nranks` ranks: a training step in miniature, so that each
// collective is timed under the load a replayed step puts on the host, not alone and back to
// back as in the probes. Each of allgather, reducescatter, allreduce and alltoall of 4 KiB to
// 4 MiB (five sizes, bfloat16) runs on every communicator layout a step has: contiguous groups of
// 2, 4, ... ranks (tensor parallel), strided ones (data / expert parallel) and the world, each
// after a compute op of 60 us to 1 ms; point-to-point transfers between the two halves of the
// ranks (pipeline stages); and an 8 MiB all-reduce on a second stream that overlaps the rest
// (a gradient bucket).
fusion::Schedule calibration_workload(int nranks);

// Per collective kind and communicator size, the α-β line through the mean transfer times (end
// minus the last member's arrival) of the workload's collectives of each message size in the
// measured `steps` (all ranks), with the algorithms `model` picks, and each size's difference
// from the line (SizedLink::corrections). A transfer that overlaps a collective of another
// stream on a member is left out. Appends one sample per kind, size and message size to
// `samples` when given; sets `sibling_stagger` to the median over the steps' sibling families
// (sibling_key) of their transfers' (max - min) / (2 · mean) (SimOptions::sibling_stagger).
std::map<CollOp, std::map<int, SizedLink>> fit_workload_links(
    const fusion::Schedule& workload, const std::vector<StepRecord>& steps,
    const analysis::CostModel& model, std::vector<CalibrationSample>* samples = nullptr,
    double* sibling_stagger = nullptr);

// Runs the probes on `ex` (collective on every process) and fits; complete on the reporting
// process.
Calibration calibrate(Executor& ex, int nranks, const CalibrationOptions& o = {});

// A profile for the sim: a built-in name or JSON file; a calibration file also gives the
// compute overheads.
struct SimProfile {
  analysis::HardwareProfile profile;
  SimOptions sim;  // the calibrated compute costs (defaults when not calibrated)
  bool calibrated = false;
  // The sim's options for a replay at `compute_scale`.
  SimOptions sim_options(double compute_scale = 1.0) const {
    SimOptions o = sim;
    o.compute_scale = compute_scale;
    return o;
  }
};
SimProfile load_sim_profile(const std::string& name_or_path);

}  // namespace braid::replay

// Calibration of the sim against a real backend: probe schedules (one collective of one size
// repeated, and chains of compute ops) are replayed on the backend, and the sim's parameters are
// fitted to the measured step times by least squares on relative error:
//   - the link's α (per step) and β (per byte), with the cost model's steps and wire factors for
//     each probe's op, size and algorithm;
//   - a per-compute-op overhead (what a compute op costs the backend beyond its duration).
// The result is a hardware profile (a JSON file usable anywhere as --profile) whose intra-node
// link is the fitted one, with every rank on one node, plus a "replay" object holding the
// compute overhead and how the calibration was made.
#pragma once

#include <string>
#include <vector>

#include "analysis/hardware.h"
#include "replay/executor.h"

namespace braid::replay {

struct CalibrationOptions {
  std::string base_profile = "cpu-shm";
  std::vector<int64_t> sizes = {64, 4096, 65536, 262144};  // bytes per probe collective
  int repeats = 8;     // collectives per probe step
  int steps = 5;       // measured steps per probe (median)
  int warmup = 1;
  ReplayOptions replay;
};

struct CalibrationSample {
  std::string probe;  // "allreduce 4096 B x8", "compute 200 us x10"
  Ns measured_ns = 0;
  Ns predicted_ns = 0;  // by the fitted model
};

struct Calibration {
  analysis::HardwareProfile profile;
  Ns compute_overhead_ns = 0;
  Ns step_overhead_ns = 0;     // fitted constant per step (not used by the sim)
  double mean_rel_error = 0;   // of the fitted model on the probes
  int ranks = 0;
  std::string backend;
  std::vector<CalibrationSample> samples;
  // The profile JSON plus "replay": {"compute_overhead_ns", "ranks", "backend", ...}.
  std::string to_json() const;
};

// The probe schedules for `nranks` ranks (exposed for tests).
struct Probe {
  std::string name;
  fusion::Schedule schedule;
  CollOp op = CollOp::Unknown;  // Unknown: a compute probe; Barrier: the empty step
  int64_t bytes = 0;
  int count = 0;       // collectives or compute ops per step
  Ns compute_ns = 0;   // duration of each compute op
};
std::vector<Probe> calibration_probes(int nranks, const CalibrationOptions& o);

// Runs the probes on `ex` (collective on every process) and fits; complete on the reporting
// process.
Calibration calibrate(Executor& ex, int nranks, const CalibrationOptions& o = {});

// A profile for the sim: a built-in name or JSON file; a calibration file also gives the
// compute overhead.
struct SimProfile {
  analysis::HardwareProfile profile;
  Ns compute_overhead_ns = 0;
  bool calibrated = false;
};
SimProfile load_sim_profile(const std::string& name_or_path);

}  // namespace braid::replay

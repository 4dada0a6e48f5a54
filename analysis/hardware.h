// Hardware profiles: what a GPU computes and what its links carry, for the cost model
// (collectives) and the synthesizer (compute durations from a FLOP/byte roofline).
//
// Built-in profiles describe common machines with vendor peak numbers derated to what NCCL and
// cuBLAS reach in practice (docs/cost-model.md gives the sources); `braid analyze` replaces a
// profile's link numbers with ones calibrated on the trace itself.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trace/json.h"
#include "trace/model.h"

namespace braid::analysis {

// One class of link. Bandwidth in GB/s (= bytes per ns), the unidirectional rate one rank
// reaches when every rank of a ring sends at once; latency per algorithm step.
struct Link {
  std::string name;
  double latency_ns = 0;
  double bandwidth_gbps = 0;
  bool operator==(const Link&) const = default;
};

struct GpuSpec {
  std::string name;
  double tflops_16bit = 0;    // dense bf16/fp16 tensor-core throughput reached by large GEMMs
  double tflops_32bit = 0;    // fp32 (tf32 off)
  double mem_bandwidth_gbps = 0;
  double kernel_overhead_ns = 0;  // fixed cost per kernel (launch + tail)
  bool operator==(const GpuSpec&) const = default;
};

struct HardwareProfile {
  std::string name;
  std::string description;
  GpuSpec gpu;
  int gpus_per_node = 8;
  Link intra_node;  // NVLink / PCIe / shared memory
  Link inter_node;  // InfiniBand / RoCE / TCP
  bool operator==(const HardwareProfile&) const = default;

  // The node a global rank lives on, assuming ranks are packed node by node.
  int node_of(int32_t rank) const { return gpus_per_node > 0 ? rank / gpus_per_node : 0; }
};

// h100-nvlink (default), a100-nvlink, h100-pcie, h100-ib (multi-node H100, 8 per node over
// 400 Gb/s InfiniBand per GPU), cpu-shm (MPI ranks on one host, for the mpi replay backend).
const std::vector<HardwareProfile>& builtin_profiles();
const HardwareProfile& default_profile();
// nullptr when there is no built-in profile of that name.
const HardwareProfile* find_profile(std::string_view name);

// A profile as JSON: {"name":..,"description":..,"gpus_per_node":..,"gpu":{..},
// "intra_node":{..},"inter_node":{..}}. Parsing starts from `base` (default_profile() unless
// the JSON names a built-in profile in "base"), so a file only lists what it overrides.
std::string profile_to_json(const HardwareProfile& p);
// The same members, written into an open object of `w` (a calibration adds its own after them).
void write_profile_members(json::Writer& w, const HardwareProfile& p);
HardwareProfile parse_profile(std::string_view json, std::string_view source = "<profile>");
// A built-in name or a path to a JSON file. Throws braid::Error (NotFound, BadFormat).
HardwareProfile load_profile(const std::string& name_or_path);

}  // namespace braid::analysis

// The α-β cost model of collectives (seeds: the ring table) and a roofline for compute.
//
// A collective of nccl-tests size n bytes on t ranks takes
//     T = α · steps(op, t, algo) + β · wire_factor(op, t, algo) · n
// where α is the per-step latency and β = 1 / bandwidth of the communicator's link. Ring
// factors follow the seeds: All-Reduce 2(t-1)/t, All-Gather and Reduce-Scatter (t-1)/t,
// All-to-All (t-1)/t, P2P 1, many-to-many scatter 1 (n = the bytes one rank sends). Tree
// All-Reduce (NCCL's double binary tree) has 2·ceil(log2 t) steps and moves 2n per rank, so it
// wins on small messages and ring wins on large ones, as in NCCL.
//
// α and β come from a hardware profile (intra-node link when all members share a node,
// otherwise the inter-node link, which bottlenecks the ring) unless a communicator has its own
// calibrated values (analysis/trace_calibration.h fits them on a trace's transfer times).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/hardware.h"
#include "trace/model.h"

namespace braid::analysis {

enum class Algorithm : uint8_t { Auto, Ring, Tree, Direct };
std::string_view to_string(Algorithm a);

// Bytes one rank puts on the wire per byte of nccl-tests size.
double wire_factor(CollOp op, int nranks, Algorithm algo);
// Sequential latency steps.
double latency_steps(CollOp op, int nranks, Algorithm algo);
// nccl-tests bus-bandwidth factor: busbw = algbw · factor (All-Reduce 2(t-1)/t, All-Gather,
// Reduce-Scatter and All-to-All (t-1)/t, others 1).
double busbw_factor(CollOp op, int nranks);
// Algorithm bandwidth in GB/s (bytes / ns), 0 when ns <= 0.
double algbw_gbps(int64_t bytes, Ns ns);
double busbw_gbps(CollOp op, int nranks, int64_t bytes, Ns ns);

// α-β parameters of one link or communicator.
struct LinkCost {
  double alpha_ns = 0;      // per step
  double ns_per_byte = 0;   // β = 1 / bandwidth (GB/s)
  double time_ns(double steps, double wire_bytes) const {
    return alpha_ns * steps + ns_per_byte * wire_bytes;
  }
  static LinkCost of(const Link& l) {
    return {l.latency_ns, l.bandwidth_gbps > 0 ? 1.0 / l.bandwidth_gbps : 0};
  }
  bool operator==(const LinkCost&) const = default;
};

// A communicator's own parameters and where they came from.
struct CommCost {
  LinkCost link;
  std::string source;     // "profile h100-nvlink (intra-node)", "calibrated on 48 all_reduce ..."
  double cv_error = -1;   // cross-validated relative error of the fit, -1 if not calibrated
  int samples = 0;
};

class CostModel {
 public:
  explicit CostModel(HardwareProfile profile = default_profile());

  const HardwareProfile& profile() const { return profile_; }

  // Time of one collective. `members` are the communicator's global ranks (decides intra- or
  // inter-node when the communicator has no calibration); `comm` selects calibrated values.
  // Auto picks the faster of ring and tree for All-Reduce, ring for the other collectives and
  // direct for point-to-point, All-to-All and many-to-many.
  Ns collective_ns(CollOp op, int64_t bytes, int nranks, std::string_view comm = {},
                   const std::vector<int32_t>& members = {},
                   Algorithm algo = Algorithm::Auto) const;
  // The algorithm Auto resolves to for these arguments.
  Algorithm choose(CollOp op, int64_t bytes, int nranks, std::string_view comm = {},
                   const std::vector<int32_t>& members = {}) const;
  // The α-β parameters a collective on `comm` / `members` uses.
  LinkCost link_for(std::string_view comm, const std::vector<int32_t>& members) const;

  // Roofline compute time: max(flops / peak, bytes / memory bandwidth) + kernel overhead.
  // `dtype_bytes` 2 selects the 16-bit tensor-core peak, 4 the fp32 peak.
  Ns compute_ns(double flops, double bytes_moved, int dtype_bytes = 2) const;

  void set_comm(std::string comm, CommCost cost) { comms_[std::move(comm)] = std::move(cost); }
  const CommCost* comm(std::string_view comm) const;
  const std::map<std::string, CommCost, std::less<>>& comms() const { return comms_; }

 private:
  HardwareProfile profile_;
  std::map<std::string, CommCost, std::less<>> comms_;
};

}  // namespace braid::analysis

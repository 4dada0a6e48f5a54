#include "analysis/cost_model.h"

#include <algorithm>
#include <cmath>

namespace braid::analysis {

std::string_view to_string(Algorithm a) {
  switch (a) {
    case Algorithm::Auto: return "auto";
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::Direct: return "direct";
  }
  return "auto";
}

namespace {
bool is_direct(CollOp op) {
  return op == CollOp::Send || op == CollOp::Recv || op == CollOp::SendRecv ||
         op == CollOp::AllToAll || op == CollOp::ManyToMany;
}
double log2_ceil(int t) { return t <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(t))); }
}  // namespace

double wire_factor(CollOp op, int t, Algorithm algo) {
  if (t <= 1 && !is_direct(op)) return 0;
  const double frac = t > 0 ? double(t - 1) / t : 0;
  switch (op) {
    case CollOp::AllReduce:
      return algo == Algorithm::Tree ? 2.0 : 2.0 * frac;
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::AllToAll:
    case CollOp::Gather:
    case CollOp::Scatter:
      return frac;
    case CollOp::Broadcast:
    case CollOp::Reduce:
    case CollOp::Send:
    case CollOp::Recv:
    case CollOp::SendRecv:
    case CollOp::ManyToMany:
      return 1.0;
    case CollOp::Barrier:
    case CollOp::Unknown:
      return 0;
  }
  return 0;
}

double latency_steps(CollOp op, int t, Algorithm algo) {
  if (t <= 1 && !is_direct(op)) return 0;
  switch (op) {
    case CollOp::AllReduce:
      return algo == Algorithm::Tree ? 2.0 * log2_ceil(t) : 2.0 * (t - 1);
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::Broadcast:
    case CollOp::Reduce:
    case CollOp::Gather:
    case CollOp::Scatter:
      return algo == Algorithm::Tree ? log2_ceil(t) : double(t - 1);
    case CollOp::AllToAll:
      return t > 1 ? double(t - 1) : 1.0;  // one message per peer, issued back to back
    case CollOp::Send:
    case CollOp::Recv:
    case CollOp::SendRecv:
    case CollOp::ManyToMany:
      return 1.0;  // grouped sends/receives go out concurrently
    case CollOp::Barrier:
      return 2.0 * log2_ceil(t);
    case CollOp::Unknown:
      return 0;
  }
  return 0;
}

double busbw_factor(CollOp op, int t) {
  if (t <= 0) return 1.0;
  const double frac = double(t - 1) / t;
  switch (op) {
    case CollOp::AllReduce: return 2.0 * frac;
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::AllToAll: return frac;
    default: return 1.0;
  }
}

double algbw_gbps(int64_t bytes, Ns ns) { return ns > 0 ? double(bytes) / double(ns) : 0; }

double busbw_gbps(CollOp op, int nranks, int64_t bytes, Ns ns) {
  return algbw_gbps(bytes, ns) * busbw_factor(op, nranks);
}

CostModel::CostModel(HardwareProfile profile) : profile_(std::move(profile)) {}

const CommCost* CostModel::comm(std::string_view c) const {
  auto it = comms_.find(c);
  return it == comms_.end() ? nullptr : &it->second;
}

LinkCost CostModel::link_for(std::string_view c, const std::vector<int32_t>& members) const {
  if (!c.empty())
    if (const CommCost* cc = comm(c)) return cc->link;
  bool cross_node = false;
  for (size_t i = 1; i < members.size() && !cross_node; ++i)
    cross_node = profile_.node_of(members[i]) != profile_.node_of(members[0]);
  return LinkCost::of(cross_node ? profile_.inter_node : profile_.intra_node);
}

Algorithm CostModel::choose(CollOp op, int64_t bytes, int nranks, std::string_view c,
                            const std::vector<int32_t>& members) const {
  if (is_direct(op)) return Algorithm::Direct;
  if (op != CollOp::AllReduce) return Algorithm::Ring;
  LinkCost l = link_for(c, members);
  double ring = l.time_ns(latency_steps(op, nranks, Algorithm::Ring),
                          wire_factor(op, nranks, Algorithm::Ring) * double(bytes));
  double tree = l.time_ns(latency_steps(op, nranks, Algorithm::Tree),
                          wire_factor(op, nranks, Algorithm::Tree) * double(bytes));
  return tree < ring ? Algorithm::Tree : Algorithm::Ring;
}

Ns CostModel::collective_ns(CollOp op, int64_t bytes, int nranks, std::string_view c,
                            const std::vector<int32_t>& members, Algorithm algo) const {
  if (algo == Algorithm::Auto) algo = choose(op, bytes, nranks, c, members);
  LinkCost l = link_for(c, members);
  double t = l.time_ns(latency_steps(op, nranks, algo),
                       wire_factor(op, nranks, algo) * double(std::max<int64_t>(bytes, 0)));
  return static_cast<Ns>(std::llround(t));
}

Ns CostModel::compute_ns(double flops, double bytes_moved, int dtype_bytes) const {
  const double tflops = dtype_bytes <= 2 ? profile_.gpu.tflops_16bit : profile_.gpu.tflops_32bit;
  // TFLOP/s = 1e12 flop/s = 1e3 flop/ns; GB/s = bytes/ns.
  double t_flops = tflops > 0 ? flops / (tflops * 1e3) : 0;
  double t_mem = profile_.gpu.mem_bandwidth_gbps > 0 ? bytes_moved / profile_.gpu.mem_bandwidth_gbps : 0;
  return static_cast<Ns>(std::llround(std::max(t_flops, t_mem) + profile_.gpu.kernel_overhead_ns));
}

}  // namespace braid::analysis

// The Nsight Systems importer's collectives (nsys_export.h): each NCCL kernel's operation,
// communicator and size from the NCCL NVTX ranges around its launch.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "trace/diagnostics.h"
#include "trace/import/nsys_export.h"

namespace braid::nsys {

struct NcclCollectives::Resolution {
  CollOp op = CollOp::Unknown;
  std::string comm;
  int64_t msg_bytes = -1;  // as the payload says (per op semantics, see bytes_for)
  int64_t count = -1;
  int32_t peer_or_root = -1;
  int32_t group_size = -1;
  std::string dtype;
  bool from_nvtx = false;
};

NcclCollectives::Resolution NcclCollectives::resolve(const PendingNccl& p) {
  Resolution res;
  res.op = p.parsed.op;
  res.dtype = p.parsed.dtype;
  if (p.launch_start < 0) return res;
  auto ranges = nvtx_.describing_ranges(p.launch_tid, p.launch_start);
  if (ranges.empty()) return res;
  res.from_nvtx = true;
  auto take = [&](const NcclRange& r) {
    res.comm = r.payload.comm;
    res.msg_bytes = r.payload.bytes;
    res.count = r.payload.count;
    if (!r.payload.dtype.empty() && res.dtype.empty()) res.dtype = r.payload.dtype;
    res.peer_or_root = r.payload.peer >= 0 ? r.payload.peer : r.payload.root;
  };
  if (ranges.size() == 1) {
    const NcclRange& r = *ranges[0];
    take(r);
    if (p.parsed.op == CollOp::SendRecv || p.parsed.op == CollOp::Unknown) {
      res.op = r.op;
    } else if (r.op != p.parsed.op) {
      ++op_conflicts_;  // the kernel name is the better witness of what ran
      res.msg_bytes = -1;
    }
    return res;
  }
  res.group_size = static_cast<int32_t>(ranges.size());
  if (p.parsed.op != CollOp::SendRecv && p.parsed.op != CollOp::Unknown) {
    // A group of collectives: the ranges of this kernel's operation, sizes added.
    std::vector<const NcclRange*> same;
    for (const auto* r : ranges)
      if (r->op == p.parsed.op) same.push_back(r);
    if (same.empty()) return res;
    take(*same[0]);
    int64_t sum = 0;
    for (const auto* r : same)
      sum = (sum < 0 || r->payload.bytes < 0) ? -1 : sum + r->payload.bytes;
    res.msg_bytes = sum;
    res.peer_or_root = same.size() == 1 ? res.peer_or_root : -1;
    return res;
  }
  // A group of point-to-point calls carried by one SendRecv kernel.
  std::set<int32_t> send_peers, recv_peers;
  int64_t send_bytes = 0, recv_bytes = 0;
  int sends = 0, recvs = 0, others = 0;
  for (const auto* r : ranges) {
    auto add = [](int64_t& acc, int64_t b) { acc = (acc < 0 || b < 0) ? -1 : acc + b; };
    if (r->op == CollOp::Send) {
      ++sends;
      send_peers.insert(r->payload.peer);
      add(send_bytes, r->payload.bytes);
    } else if (r->op == CollOp::Recv) {
      ++recvs;
      recv_peers.insert(r->payload.peer);
      add(recv_bytes, r->payload.bytes);
    } else {
      ++others;
    }
  }
  take(*ranges[0]);
  res.count = -1;
  if (others > 0) {
    res.op = CollOp::ManyToMany;
    res.msg_bytes = -1;
    res.peer_or_root = -1;
    return res;
  }
  int32_t nranks = -1;
  if (auto it = nvtx_.comm_nranks().find(res.comm); it != nvtx_.comm_nranks().end())
    nranks = it->second;
  if (sends == 1 && recvs == 1 && send_peers == recv_peers) {
    res.op = CollOp::SendRecv;
    res.peer_or_root = *send_peers.begin();
    res.msg_bytes = (send_bytes < 0 || recv_bytes < 0) ? -1 : std::max(send_bytes, recv_bytes);
  } else if (nranks > 1 && send_peers.size() >= static_cast<size_t>(nranks - 1) &&
             recv_peers.size() >= static_cast<size_t>(nranks - 1)) {
    res.op = CollOp::AllToAll;  // every peer of the communicator, both ways
    res.peer_or_root = -1;
    res.msg_bytes = send_bytes;
  } else {
    res.op = CollOp::ManyToMany;
    res.peer_or_root = -1;
    res.msg_bytes = (send_bytes < 0 || recv_bytes < 0) ? -1 : std::max(send_bytes, recv_bytes);
  }
  return res;
}

void NcclCollectives::build(std::vector<PendingNccl>& pending) {
  int64_t unlinked = 0, unresolved = 0, unsized = 0;
  std::vector<Collective> colls;
  colls.reserve(pending.size());
  for (auto& p : pending) {
    Resolution res = resolve(p);
    if (p.launch_start < 0) ++unlinked;
    if (res.op == CollOp::SendRecv && !res.from_nvtx) ++unresolved;
    Collective c;
    c.rank = p.kernel.rank;
    c.op = res.op;
    c.comm = res.comm.empty() ? 0 : x_.w.intern(res.comm);
    c.dtype = res.dtype.empty() ? 0 : x_.w.intern(res.dtype);
    c.stream = p.kernel.stream;
    c.start = p.kernel.start;
    c.end = p.kernel.end;
    c.enqueue = p.launch_start;
    c.algo = p.parsed.algo.empty() ? 0 : x_.w.intern(p.parsed.algo);
    c.proto = p.parsed.proto.empty() ? 0 : x_.w.intern(p.parsed.proto);
    c.group_size = res.group_size;
    c.peer_or_root = res.peer_or_root;
    c.name = p.kernel.name;
    c.kernel_ref = p.kernel.correlation;
    set_sizes(c, res);
    if (c.bytes < 0 && (c.op != CollOp::SendRecv || res.from_nvtx)) ++unsized;
    colls.push_back(c);
    // The kernel's category follows the operation now known.
    if (res.from_nvtx && res.op != CollOp::Unknown) p.kernel.category = comm_category(res.op);
    x_.w.add(x_.run, p.kernel);
    if (!res.comm.empty()) {
      auto it = nvtx_.comm_nranks().find(res.comm);
      comms_[res.comm] = it != nvtx_.comm_nranks().end() ? it->second : -1;
    }
  }
  // Order within each communicator (by launch time) is how ranks' collectives are matched.
  std::vector<size_t> order(colls.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    Ns ta = colls[a].enqueue >= 0 ? colls[a].enqueue : colls[a].start;
    Ns tb = colls[b].enqueue >= 0 ? colls[b].enqueue : colls[b].start;
    return ta < tb;
  });
  std::map<std::pair<int32_t, StrId>, int64_t> next_seq;
  for (size_t i : order) {
    auto& c = colls[i];
    if (c.comm != 0) c.seq = next_seq[{c.rank, c.comm}]++;
    x_.w.add(x_.run, c);
  }
  x_.ctx.diagnose(
      diag::Code::nsys_nccl_kernel_unlinked, unlinked,
      x_.file + ": NCCL kernels whose launching runtime call was not found (enqueue unknown)");
  x_.ctx.diagnose(
      diag::Code::nsys_nccl_op_unresolved, unresolved,
      x_.file + ": SendRecv kernels without an enclosing NCCL NVTX range; op left as SendRecv");
  x_.ctx.diagnose(diag::Code::nsys_nccl_size_unknown, unsized,
                  x_.file +
                      ": collectives without a size (no NCCL NVTX payload, or communicator size "
                      "unknown for all-gather/reduce-scatter)");
  x_.ctx.diagnose(
      diag::Code::nsys_nccl_op_conflict, op_conflicts_,
      x_.file + ": NCCL NVTX range names another operation than its kernel; kernel name kept");
}

// NCCL's "Message size [bytes]" is the per-rank message: count * type size for all-reduce,
// broadcast, reduce and point-to-point; the send size for all-gather; the receive size for
// reduce-scatter. Collective::bytes is the larger buffer (nccl-tests "size").
void NcclCollectives::set_sizes(Collective& c, const Resolution& res) {
  int32_t n = -1;
  if (auto it = nvtx_.comm_nranks().find(res.comm); it != nvtx_.comm_nranks().end()) n = it->second;
  int ds = res.dtype.empty() ? 0 : dtype_size(res.dtype);
  int64_t m = res.msg_bytes;
  int64_t elems = res.count >= 0 ? res.count : (m >= 0 && ds > 0 ? m / ds : -1);
  switch (c.op) {
    case CollOp::AllGather:
      c.in_count = elems;
      c.out_count = (elems >= 0 && n > 0) ? elems * n : -1;
      c.bytes = (m >= 0 && n > 0) ? m * n : -1;
      break;
    case CollOp::ReduceScatter:
      c.out_count = elems;
      c.in_count = (elems >= 0 && n > 0) ? elems * n : -1;
      c.bytes = (m >= 0 && n > 0) ? m * n : -1;
      break;
    case CollOp::AllToAll:
    case CollOp::ManyToMany:
      c.bytes = m;
      c.in_count = c.out_count = (m >= 0 && ds > 0) ? m / ds : -1;
      break;
    default:
      c.bytes = m;
      c.in_count = c.out_count = elems;
      break;
  }
}

}  // namespace braid::nsys

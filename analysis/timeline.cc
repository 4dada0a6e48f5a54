#include "analysis/timeline.h"

#include <algorithm>

namespace braid::analysis {

const DepEdge* RankTimeline::dep_of(OpPos p) const {
  for (const DepEdge& d : deps)
    if (d.to == p) return &d;
  return nullptr;
}

RankTimeline build_timeline(const RankTrace& rank, const TimelineOptions& opt) {
  RankTimeline tl;
  tl.rank = rank.info.rank;
  std::map<int64_t, std::vector<GpuOp>> by_stream;

  // Collectives carried by kernels, found by (stream, start) and the kernel's correlation.
  std::map<std::pair<int64_t, Ns>, std::vector<int32_t>> coll_at;
  auto by_start = [](const Collective& c, Ns t) { return c.start < t; };
  const auto first = static_cast<int32_t>(
      std::lower_bound(rank.collectives.begin(), rank.collectives.end(), opt.colls_from, by_start) -
      rank.collectives.begin());
  const auto last = static_cast<int32_t>(
      std::lower_bound(rank.collectives.begin(), rank.collectives.end(), opt.colls_to, by_start) -
      rank.collectives.begin());
  for (int32_t i = first; i < last; ++i) {
    const Collective& c = rank.collectives[i];
    if (c.stream >= 0) coll_at[{c.stream, c.start}].push_back(i);
  }
  std::vector<bool> coll_used(rank.collectives.size(), false);
  for (int32_t i = 0; i < static_cast<int32_t>(rank.kernels.size()); ++i) {
    const Kernel& k = rank.kernels[i];
    GpuOp op{OpType::Kernel, i, -1, k.start, k.end, rank.launch_of(k.correlation), k.category};
    auto it = coll_at.find({k.stream, k.start});
    if (it != coll_at.end())
      for (int32_t ci : it->second) {
        const Collective& c = rank.collectives[ci];
        if (coll_used[ci] || (opt.host_side && (*opt.host_side)[ci]) ||
            (c.kernel_ref != 0 && k.correlation != 0 && c.kernel_ref != k.correlation))
          continue;
        op.coll = ci;
        coll_used[ci] = true;
        if (c.enqueue >= 0 && op.launch < 0) op.launch = c.enqueue;
        break;
      }
    by_stream[k.stream].push_back(op);
  }
  for (int32_t i = 0; i < static_cast<int32_t>(rank.memcpys.size()); ++i) {
    const Memcpy& m = rank.memcpys[i];
    by_stream[m.stream].push_back(
        {OpType::Memcpy, i, -1, m.start, m.end, rank.launch_of(m.correlation), Category::Memory});
  }
  // Collectives with no kernel of their own: on the host pseudo-stream.
  for (int32_t i = first; i < last; ++i) {
    if (opt.host_side ? !(*opt.host_side)[i] : coll_used[i]) continue;
    const Collective& c = rank.collectives[i];
    by_stream[-1].push_back(
        {OpType::HostCollective, i, i, c.start, c.end, c.enqueue, comm_category(c.op)});
  }
  for (int32_t i = 0; i < static_cast<int32_t>(rank.host_compute.size()); ++i) {
    const HostCompute& h = rank.host_compute[i];
    by_stream[h.stream].push_back(
        {OpType::HostCompute, i, -1, h.start, h.end, h.start, Category::Other});
  }
  for (auto& [id, ops] : by_stream) {
    std::stable_sort(ops.begin(), ops.end(),
                     [](const GpuOp& a, const GpuOp& b) { return a.start < b.start; });
    tl.streams.push_back({id, std::move(ops)});
  }
  for (int32_t s = 0; s < static_cast<int32_t>(tl.streams.size()); ++s)
    for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[s].ops.size()); ++i)
      if (tl.streams[s].ops[i].coll >= 0) tl.coll_pos[tl.streams[s].ops[i].coll] = {s, i};

  // Ends of GPU ops of all streams, sorted, to find what ended just before a start.
  struct End {
    Ns end;
    OpPos pos;
  };
  std::vector<End> ends;
  for (int32_t s = 0; s < static_cast<int32_t>(tl.streams.size()); ++s) {
    if (tl.streams[s].stream < 0) continue;  // host-side collectives order nothing on the GPU
    for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[s].ops.size()); ++i)
      ends.push_back({tl.streams[s].ops[i].end, {s, i}});
  }
  // Equal ends in stream then start order, so that a window of the rank picks as the whole does.
  std::sort(ends.begin(), ends.end(), [](const End& a, const End& b) {
    return a.end != b.end ? a.end < b.end : a.pos < b.pos;
  });
  bool waits_seen = std::any_of(rank.syncs.begin(), rank.syncs.end(), [](const SyncCall& c) {
    return c.kind == SyncKind::StreamWaitEvent;
  });

  for (int32_t s = 0; s < static_cast<int32_t>(tl.streams.size()); ++s) {
    if (tl.streams[s].stream < 0) continue;
    const auto& ops = tl.streams[s].ops;
    for (int32_t i = 0; i < static_cast<int32_t>(ops.size()); ++i) {
      const GpuOp& op = ops[i];
      Ns free_at = i > 0 ? ops[i - 1].end : INT64_MIN;
      Ns ready = std::max(free_at, op.launch);
      if (ready != INT64_MIN && op.start - ready <= opt.dep_slack_ns) continue;
      // The latest end on another stream in [max(ready, start - slack), start].
      Ns lo = std::max(ready, op.start - opt.dep_slack_ns);
      auto hi = std::upper_bound(ends.begin(), ends.end(), op.start,
                                 [](Ns t, const End& e) { return t < e.end; });
      for (auto it = hi; it != ends.begin();) {
        --it;
        if (it->end < lo) break;
        if (it->pos.stream == s) continue;
        tl.deps.push_back({it->pos, {s, i}, waits_seen, op.launch >= 0});
        break;
      }
    }
  }
  if (!rank.steps.empty())
    for (int32_t s = 0; s < static_cast<int32_t>(tl.streams.size()); ++s)
      for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[s].ops.size()); ++i)
        if (const int64_t step = op_step(rank, tl.streams[s].ops[i]); step >= 0)
          tl.by_step[step].push_back({s, i});
  return tl;
}

std::vector<bool> host_side(const RankTimeline& tl, size_t collectives) {
  std::vector<bool> out(collectives, false);
  for (const StreamOps& s : tl.streams)
    for (const GpuOp& op : s.ops)
      if (op.type == OpType::HostCollective) out[static_cast<size_t>(op.index)] = true;
  return out;
}

int64_t op_step(const RankTrace& rank, const GpuOp& op) {
  switch (op.type) {
    case OpType::Kernel:
      return rank.kernel_step(rank.kernels[op.index]);
    case OpType::Memcpy:
      return rank.memcpy_step(rank.memcpys[op.index]);
    case OpType::HostCollective:
      return rank.collective_step(rank.collectives[op.index]);
    case OpType::HostCompute:
      return rank.host_compute[op.index].step;
  }
  return -1;
}

}  // namespace braid::analysis

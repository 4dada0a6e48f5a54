#include "analysis/critical_path.h"

#include <algorithm>
#include <set>

namespace braid::analysis {

std::string_view to_string(SegmentKind k) {
  switch (k) {
    case SegmentKind::Kernel: return "kernel";
    case SegmentKind::Memcpy: return "memcpy";
    case SegmentKind::Collective: return "collective";
    case SegmentKind::Gap: return "gap";
  }
  return "kernel";
}

CriticalPath critical_path(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                           const std::map<int32_t, RankTimeline>& timelines,
                           const CriticalPathOptions& opt) {
  CriticalPath cp;
  cp.step = opt.step;
  // The ops of the step (those it launched: RankTrace::kernel_step), and where each rank's
  // share of them starts on its own clock.
  auto inside = [&](int32_t r, const GpuOp& op) {
    return opt.step < 0 || op_step(run.ranks.at(r), op) == opt.step;
  };
  std::map<int32_t, std::pair<Ns, Ns>> win;
  for (const auto& [r, tl] : timelines) {
    if (!run.ranks.count(r)) continue;
    for (const StreamOps& so : tl.streams)
      for (const GpuOp& op : so.ops) {
        if (!inside(r, op)) continue;
        auto [it, fresh] = win.try_emplace(r, op.start, op.end);
        if (!fresh)
          it->second = {std::min(it->second.first, op.start), std::max(it->second.second, op.end)};
      }
  }

  // The op that ends last (lowest rank, then stream, on ties).
  int32_t cur_rank = -1;
  OpPos cur;
  Ns best_end = INT64_MIN;
  for (const auto& [r, tl] : timelines) {
    const Ns off = clocks.offset(r);
    for (int32_t s = 0; s < static_cast<int32_t>(tl.streams.size()); ++s)
      for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[s].ops.size()); ++i) {
        const GpuOp& op = tl.streams[s].ops[i];
        if (!inside(r, op)) continue;
        if (op.end + off > best_end) best_end = op.end + off, cur_rank = r, cur = {s, i};
      }
  }
  if (cur_rank < 0) return cp;
  cp.end = best_end;
  cp.start = best_end;
  for (const auto& [r, w] : win)
    if (opt.step >= 0) cp.start = std::min(cp.start, w.first + clocks.offset(r));

  std::vector<PathSegment> rev;
  std::set<std::pair<int32_t, OpPos>> visited;
  Ns explain_until = INT64_MIN;  // the job time the current op's segment starts at
  while (cur_rank >= 0 && visited.insert({cur_rank, cur}).second) {
    const RankTimeline& tl = timelines.at(cur_rank);
    const RankTrace& t = run.ranks.at(cur_rank);
    const GpuOp& op = tl.op(cur);
    const Ns off = clocks.offset(cur_rank);
    Ns seg_end = explain_until == INT64_MIN ? op.end + off : std::min(op.end + off, explain_until);
    Ns seg_start = op.start + off;

    // A matched collective: its transfer from the last arrival, then the late rank.
    int g = op.coll >= 0 ? match.group({cur_rank, op.coll}) : -1;
    PathSegment seg;
    seg.rank = cur_rank;
    seg.stream = tl.streams[cur.stream].stream;
    if (op.coll >= 0) {
      const Collective& c = t.collectives[op.coll];
      seg.kind = SegmentKind::Collective;
      seg.name = std::string(to_string(c.op));
      seg.category = std::string(to_string(comm_category(c.op)));
      seg.comm = run.str(c.comm);
      seg.group = g;
    } else if (op.type == OpType::Memcpy) {
      seg.kind = SegmentKind::Memcpy;
      seg.name = std::string(to_string(t.memcpys[op.index].kind));
      seg.category = std::string(to_string(Category::Memory));
    } else {
      seg.kind = SegmentKind::Kernel;
      seg.name = run.str(t.kernels[op.index].name);
      seg.category = std::string(to_string(op.category));
    }
    int32_t next_rank = cur_rank;
    OpPos from = cur;
    if (g >= 0 && match.groups[g].members.size() >= 2 && !match.groups[g].mismatched) {
      const CollGroup& grp = match.groups[g];
      Ns last = INT64_MIN;
      int32_t late = cur_rank;
      for (const CollRef& m : grp.members) {
        const Collective& c = run.ranks.at(m.rank).collectives[m.index];
        Ns a = c.start + clocks.offset(m.rank);
        if (a > last) last = a, late = m.rank;
      }
      seg.late_rank = late;
      seg_start = std::max(seg_start, last);
      if (late != cur_rank) {
        const CollRef* lm = nullptr;
        for (const CollRef& m : grp.members)
          if (m.rank == late) lm = &m;
        auto tit = timelines.find(late);
        if (lm && tit != timelines.end()) {
          auto pit = tit->second.coll_pos.find(lm->index);
          if (pit != tit->second.coll_pos.end() && inside(late, tit->second.op(pit->second))) {
            next_rank = late;
            from = pit->second;
            visited.insert({late, from});
          }
        }
      }
    }
    seg.start = std::min(seg_start, seg_end);
    seg.end = seg_end;
    rev.push_back(seg);

    // What the op at (next_rank, from) waited for.
    const RankTimeline& ftl = timelines.at(next_rank);
    const GpuOp& fop = ftl.op(from);
    const Ns foff = clocks.offset(next_rank);
    Ns want = next_rank == cur_rank ? seg.start : fop.start + foff;
    int32_t pred_rank = -1;
    OpPos pred;
    Ns pred_end = INT64_MIN;
    if (from.index > 0) {
      const GpuOp& p = ftl.streams[from.stream].ops[from.index - 1];
      if (inside(next_rank, p)) pred_rank = next_rank, pred = {from.stream, from.index - 1}, pred_end = p.end + foff;
    }
    if (const DepEdge* d = ftl.dep_of(from)) {
      const GpuOp& p = ftl.op(d->from);
      if (inside(next_rank, p) && p.end + foff > pred_end)
        pred_rank = next_rank, pred = d->from, pred_end = p.end + foff;
    }
    // Before a host collective the rank was running host code (a CPU job, or gloo next to the
    // GPU): that time is "host" work on the path; before GPU work it is a gap the GPU waited.
    const bool host = fop.type == OpType::HostCollective;
    const char* gap_name = host ? "host work" : "host gap";
    const char* gap_cat = host ? "host" : "gap";
    if (pred_rank < 0) {
      Ns first = win[next_rank].first + foff;
      if (host)  // from the start of the step on that rank's host
        for (const Step& s : run.ranks.at(next_rank).steps)
          if (s.step == opt.step) first = std::min(first, s.start + foff);
      if (opt.step >= 0 && want - first > opt.gap_ns)
        rev.push_back({SegmentKind::Gap, next_rank, ftl.streams[from.stream].stream, first, want,
                       gap_name, gap_cat, "", -1, -1});
      break;
    }
    if (want - pred_end > opt.gap_ns)
      rev.push_back({SegmentKind::Gap, next_rank, ftl.streams[from.stream].stream, pred_end, want,
                     gap_name, gap_cat, "", -1, -1});
    explain_until = std::min(pred_end, want);
    cur_rank = pred_rank;
    cur = pred;
  }
  std::reverse(rev.begin(), rev.end());
  cp.chain = std::move(rev);
  if (!cp.chain.empty())
    cp.start = opt.step < 0 ? cp.chain.front().start : std::min(cp.start, cp.chain.front().start);
  for (const PathSegment& s : cp.chain) {
    cp.by_category[s.category] += s.duration();
    if (s.kind == SegmentKind::Collective) cp.by_comm[s.comm] += s.duration();
  }
  return cp;
}

}  // namespace braid::analysis

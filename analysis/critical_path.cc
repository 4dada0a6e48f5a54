#include "analysis/critical_path.h"

#include <algorithm>
#include <set>

#include "trace/format.h"

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

namespace {

// A rank's share of the step on its own clock: the ops the step launched (`ops_*`), widened to the
// host's step range where its share is host work (host collectives, or nothing launched).
struct Share {
  Ns ops_lo = INT64_MAX, ops_hi = INT64_MIN;
  Ns lo = INT64_MAX, hi = INT64_MIN;
};

template <typename Inside>
std::map<int32_t, Share> step_shares(const RunData& run,
                                     const std::map<int32_t, RankTimeline>& timelines, int64_t step,
                                     const Inside& inside) {
  std::map<int32_t, Share> out;
  for (const auto& [r, tl] : timelines) {
    if (!run.ranks.count(r)) continue;
    Share sh;
    bool host = false;
    for (const StreamOps& so : tl.streams)
      for (const GpuOp& op : so.ops) {
        if (!inside(r, op)) continue;
        sh.ops_lo = std::min(sh.ops_lo, op.start);
        sh.ops_hi = std::max(sh.ops_hi, op.end);
        host = host || op.type == OpType::HostCollective;
      }
    sh.lo = sh.ops_lo, sh.hi = sh.ops_hi;
    if (step >= 0 && (host || sh.ops_lo > sh.ops_hi))
      for (const Step& s : run.ranks.at(r).steps)
        if (s.step == step) sh.lo = std::min(sh.lo, s.start), sh.hi = std::max(sh.hi, s.end);
    if (sh.lo <= sh.hi) out[r] = sh;
  }
  return out;
}

// The step's span on the job axis against its longest share on one rank; a span beyond twice
// that is refused (critical_path.h).
void check_against_step(CriticalPath& cp, const std::map<int32_t, Share>& shares,
                        const ClockFit& clocks) {
  Ns lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& [r, sh] : shares) {
    lo = std::min(lo, sh.lo + clocks.offset(r));
    hi = std::max(hi, sh.hi + clocks.offset(r));
    cp.longest_rank_ns = std::max(cp.longest_rank_ns, sh.hi - sh.lo);
  }
  if (lo > hi) return;
  cp.step_ns = hi - lo;
  if (cp.step_ns <= 2 * cp.longest_rank_ns) return;
  cp.refused = "the ranks' clocks are not aligned for it: on them the step spans " +
               format_ns(cp.step_ns) + ", more than twice the longest it lasts on one rank (" +
               format_ns(cp.longest_rank_ns) + ")";
  cp.chain.clear();
  cp.by_category.clear();
  cp.by_comm.clear();
  cp.start = cp.end = 0;
}

// The op that ends last on the job axis (lowest rank, then stream, on ties) among those `take`s.
struct LastOp {
  int32_t rank = -1;
  OpPos pos;
  Ns end = INT64_MIN;
};

template <typename Take>
LastOp last_op(const std::map<int32_t, RankTimeline>& timelines, const ClockFit& clocks,
               const Take& take) {
  LastOp out;
  for (const auto& [r, tl] : timelines) {
    const Ns off = clocks.offset(r);
    for (int32_t s = 0; s < static_cast<int32_t>(tl.streams.size()); ++s)
      for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[s].ops.size()); ++i) {
        const GpuOp& op = tl.streams[s].ops[i];
        if (take(r, op) && op.end + off > out.end) out = {r, {s, i}, op.end + off};
      }
  }
  return out;
}

// What an op on the path is: kind, name, category (and for a collective its communicator and
// matched group); times are set by the walk.
PathSegment describe(const RunData& run, const RankTimeline& tl, int32_t rank, OpPos pos,
                     int group) {
  const RankTrace& t = run.ranks.at(rank);
  const GpuOp& op = tl.op(pos);
  PathSegment seg;
  seg.rank = rank;
  seg.stream = tl.streams[pos.stream].stream;
  if (op.coll >= 0) {
    const Collective& c = t.collectives[op.coll];
    seg.kind = SegmentKind::Collective;
    seg.name = std::string(to_string(c.op));
    seg.category = std::string(to_string(comm_category(c.op)));
    seg.comm = run.str(c.comm);
    seg.group = group;
  } else if (op.type == OpType::Memcpy) {
    seg.kind = SegmentKind::Memcpy;
    seg.name = std::string(to_string(t.memcpys[op.index].kind));
    seg.category = std::string(to_string(Category::Memory));
  } else {
    seg.kind = SegmentKind::Kernel;
    seg.name = run.str(t.kernels[op.index].name);
    seg.category = std::string(to_string(op.category));
  }
  return seg;
}

}  // namespace

CriticalPath critical_path(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                           const std::map<int32_t, RankTimeline>& timelines,
                           const CriticalPathOptions& opt) {
  CriticalPath cp;
  cp.step = opt.step;
  // The ops of the step (those it launched: RankTrace::kernel_step), and where each rank's
  // share of them lies on its own clock.
  auto inside = [&](int32_t r, const GpuOp& op) {
    return opt.step < 0 || op_step(run.ranks.at(r), op) == opt.step;
  };
  auto aligned = [&](int32_t r) {
    const RankClock* c = clocks.rank(r);
    return c && c->aligned;
  };
  bool any_aligned = false;
  for (const auto& [r, _] : timelines) any_aligned = any_aligned || aligned(r);

  // The op that ends last, among the ranks whose clocks are aligned when there are any.
  auto [cur_rank, cur, best_end] = last_op(timelines, clocks, [&](int32_t r, const GpuOp& op) {
    return inside(r, op) && (!any_aligned || aligned(r));
  });
  if (cur_rank < 0) return cp;
  // The ranks on the same axis as that op: its own, and the aligned ones if it is aligned.
  const bool end_aligned = aligned(cur_rank);
  std::map<int32_t, Share> shares = step_shares(run, timelines, opt.step, inside);
  std::erase_if(shares, [&](const auto& kv) {
    return kv.first != cur_rank && !(end_aligned && aligned(kv.first));
  });
  std::map<int32_t, std::pair<Ns, Ns>> win;
  for (const auto& [r, sh] : shares)
    if (sh.ops_lo <= sh.ops_hi) win[r] = {sh.ops_lo, sh.ops_hi};
  cp.end = best_end;
  cp.start = best_end;
  for (const auto& [r, w] : win)
    if (opt.step >= 0) cp.start = std::min(cp.start, w.first + clocks.offset(r));

  std::vector<PathSegment> rev;
  std::set<std::pair<int32_t, OpPos>> visited;
  Ns explain_until = INT64_MIN;  // the job time the current op's segment starts at
  while (cur_rank >= 0 && visited.insert({cur_rank, cur}).second) {
    const RankTimeline& tl = timelines.at(cur_rank);
    const GpuOp& op = tl.op(cur);
    const Ns off = clocks.offset(cur_rank);
    Ns seg_end = explain_until == INT64_MIN ? op.end + off : std::min(op.end + off, explain_until);
    Ns seg_start = op.start + off;

    // A matched collective: its transfer from the last arrival, then the late rank.
    int g = op.coll >= 0 ? match.group({cur_rank, op.coll}) : -1;
    PathSegment seg = describe(run, tl, cur_rank, cur, g);
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
  check_against_step(cp, shares, clocks);
  return cp;
}

}  // namespace braid::analysis

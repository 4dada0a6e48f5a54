#include "analysis/critical_path.h"

#include <algorithm>
#include <functional>
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

// Calls f(op) for each op of `tl` that can be in `step`: the ops the step launched (the
// timeline's index), or every op for the whole run (or a timeline built without the index).
template <typename F>
void for_step_ops(const RankTimeline& tl, int64_t step, const F& f) {
  if (step < 0 || tl.by_step.empty()) {
    for (int32_t s = 0; s < static_cast<int32_t>(tl.streams.size()); ++s)
      for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[s].ops.size()); ++i) f(OpPos{s, i});
    return;
  }
  if (auto it = tl.by_step.find(step); it != tl.by_step.end())
    for (OpPos p : it->second) f(p);
}

template <typename Inside>
std::map<int32_t, Share> step_shares(const RunData& run,
                                     const std::map<int32_t, RankTimeline>& timelines, int64_t step,
                                     const Inside& inside) {
  std::map<int32_t, Share> out;
  for (const auto& [r, tl] : timelines) {
    if (!run.ranks.count(r)) continue;
    Share sh;
    bool host = false;
    for_step_ops(tl, step, [&](OpPos p) {
      const GpuOp& op = tl.op(p);
      if (!inside(r, op)) return;
      sh.ops_lo = std::min(sh.ops_lo, op.start);
      sh.ops_hi = std::max(sh.ops_hi, op.end);
      host = host || op.type == OpType::HostCollective;
    });
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
               int64_t step, const Take& take) {
  LastOp out;
  for (const auto& [r, tl] : timelines) {
    const Ns off = clocks.offset(r);
    for_step_ops(tl, step, [&](OpPos p) {
      const GpuOp& op = tl.op(p);
      if (take(r, op) && op.end + off > out.end) out = {r, p, op.end + off};
    });
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

// The walk's questions about one rank's ops, answered from its timeline: here, or (spread over
// processes) by the process that holds the rank, which broadcasts the answer to all.
class Ops {
 public:
  struct Op {
    GpuOp op;
    int64_t stream = 0;  // the CUDA stream id
    PathSegment seg;     // kind, name, category, communicator (describe)
  };
  struct Pred {
    bool found = false;
    OpPos pos;
    Ns end = INT64_MIN;  // the rank's own clock
  };
  using Inside = std::function<bool(int32_t, const GpuOp&)>;

  Ops(const RunData& run, const std::map<int32_t, RankTimeline>& timelines,
      const SpreadTimelines& spread, Inside inside)
      : run_(run), tls_(timelines), spread_(spread), inside_(std::move(inside)) {
    if (spread_.exchange && spread_.exchange->size() <= 1) spread_.exchange = nullptr;
  }

  Op op(int32_t rank, OpPos p) const {
    return ask<Op>(
        rank,
        [&] {
          const RankTimeline& tl = tls_.at(rank);
          return Op{tl.op(p), tl.streams[p.stream].stream, describe(run_, tl, rank, p, -1)};
        },
        [](WireOut& w, const Op& o) {
          put_op(w, o.op);
          w.i64(o.stream).i64(static_cast<int64_t>(o.seg.kind)).str(o.seg.name);
          w.str(o.seg.category).str(o.seg.comm);
        },
        [](WireIn& in) {
          Op o;
          o.op = get_op(in);
          o.stream = in.i64();
          o.seg.kind = static_cast<SegmentKind>(in.i64());
          o.seg.name = in.str();
          o.seg.category = in.str();
          o.seg.comm = in.str();
          return o;
        });
  }

  // The op that carries collective `coll` of `rank`, when the rank is known and the op is in the
  // step; invalid otherwise.
  OpPos coll_op(int32_t rank, int32_t coll) const {
    if (spread_.exchange ? !spread_.owner->count(rank) : !tls_.count(rank)) return {};
    return ask<OpPos>(
        rank,
        [&] {
          const RankTimeline& tl = tls_.at(rank);
          auto it = tl.coll_pos.find(coll);
          return it != tl.coll_pos.end() && inside_(rank, tl.op(it->second)) ? it->second : OpPos{};
        },
        [](WireOut& w, OpPos p) { w.i64(p.stream).i64(p.index); },
        [](WireIn& in) {
          OpPos p;
          p.stream = static_cast<int32_t>(in.i64());
          p.index = static_cast<int32_t>(in.i64());
          return p;
        });
  }

  // What `from` waited for in the step: the later-ending of its stream predecessor and its
  // inferred cross-stream dependency.
  Pred pred(int32_t rank, OpPos from) const {
    return ask<Pred>(
        rank,
        [&] {
          const RankTimeline& tl = tls_.at(rank);
          Pred out;
          if (from.index > 0) {
            const GpuOp& p = tl.streams[from.stream].ops[from.index - 1];
            if (inside_(rank, p)) out = {true, {from.stream, from.index - 1}, p.end};
          }
          if (const DepEdge* d = tl.dep_of(from)) {
            const GpuOp& p = tl.op(d->from);
            if (inside_(rank, p) && (!out.found || p.end > out.end)) out = {true, d->from, p.end};
          }
          return out;
        },
        [](WireOut& w, const Pred& p) {
          w.i64(p.found).i64(p.pos.stream).i64(p.pos.index).i64(p.end);
        },
        [](WireIn& in) {
          Pred p;
          p.found = in.i64() != 0;
          p.pos.stream = static_cast<int32_t>(in.i64());
          p.pos.index = static_cast<int32_t>(in.i64());
          p.end = in.i64();
          return p;
        });
  }

  // The op that ends last among those `take`s, over every process's ranks.
  template <typename Take>
  LastOp last(const ClockFit& clocks, int64_t step, const Take& take) const {
    LastOp mine = last_op(tls_, clocks, step, take);
    if (!spread_.exchange) return mine;
    WireOut w;
    w.i64(mine.rank).i64(mine.pos.stream).i64(mine.pos.index).i64(mine.end);
    LastOp out;
    for (const std::string& b : spread_.exchange->allgather(w.take())) {
      WireIn in(b);
      LastOp o;
      o.rank = static_cast<int32_t>(in.i64());
      o.pos.stream = static_cast<int32_t>(in.i64());
      o.pos.index = static_cast<int32_t>(in.i64());
      o.end = in.i64();
      // As last_op over all ranks: the latest end, the lowest rank on ties.
      if (o.rank >= 0 && (o.end > out.end || (o.end == out.end && o.rank < out.rank))) out = o;
    }
    return out;
  }

  // Every rank's share of the step (step_shares), over every process's ranks.
  std::map<int32_t, Share> shares(int64_t step) const {
    std::map<int32_t, Share> mine = step_shares(run_, tls_, step, inside_);
    if (!spread_.exchange) return mine;
    WireOut w;
    for (const auto& [r, sh] : mine) w.i64(r).i64(sh.ops_lo).i64(sh.ops_hi).i64(sh.lo).i64(sh.hi);
    std::map<int32_t, Share> out;
    for (const std::string& b : spread_.exchange->allgather(w.take())) {
      WireIn in(b);
      while (!in.done()) {
        const auto r = static_cast<int32_t>(in.i64());
        Share& sh = out[r];
        sh.ops_lo = in.i64();
        sh.ops_hi = in.i64();
        sh.lo = in.i64();
        sh.hi = in.i64();
      }
    }
    return out;
  }

 private:
  static void put_op(WireOut& w, const GpuOp& o) {
    w.i64(static_cast<int64_t>(o.type)).i64(o.index).i64(o.coll).i64(o.start).i64(o.end);
    w.i64(o.launch).i64(static_cast<int64_t>(o.category));
  }
  static GpuOp get_op(WireIn& in) {
    GpuOp o;
    o.type = static_cast<OpType>(in.i64());
    o.index = static_cast<int32_t>(in.i64());
    o.coll = static_cast<int32_t>(in.i64());
    o.start = in.i64();
    o.end = in.i64();
    o.launch = in.i64();
    o.category = static_cast<Category>(in.i64());
    return o;
  }

  // `local()` where the rank is here; else the holder's answer, which every process receives.
  template <typename T, typename Local, typename Put, typename Get>
  T ask(int32_t rank, const Local& local, const Put& put, const Get& get) const {
    if (!spread_.exchange) return local();
    const int root = spread_.owner->at(rank);
    std::string bytes;
    if (root == spread_.exchange->index()) {
      WireOut w;
      put(w, local());
      bytes = w.take();
    }
    bytes = spread_.exchange->broadcast(std::move(bytes), root);
    WireIn in(bytes);
    return get(in);
  }

  const RunData& run_;
  const std::map<int32_t, RankTimeline>& tls_;
  SpreadTimelines spread_;
  Inside inside_;
};

}  // namespace

CriticalPath critical_path(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                           const std::map<int32_t, RankTimeline>& timelines,
                           const CriticalPathOptions& opt, const SpreadTimelines& spread) {
  CriticalPath cp;
  cp.step = opt.step;
  // The ops of the step (those it launched: RankTrace::kernel_step), and where each rank's
  // share of them lies on its own clock.
  auto inside = [&](int32_t r, const GpuOp& op) {
    return opt.step < 0 || op_step(run.ranks.at(r), op) == opt.step;
  };
  const Ops ops(run, timelines, spread, inside);
  auto aligned = [&](int32_t r) {
    const RankClock* c = clocks.rank(r);
    return c && c->aligned;
  };
  bool any_aligned = false;
  if (spread.exchange)
    for (const auto& [r, _] : *spread.owner) any_aligned = any_aligned || aligned(r);
  else
    for (const auto& [r, _] : timelines) any_aligned = any_aligned || aligned(r);

  // The op that ends last, among the ranks whose clocks are aligned when there are any.
  auto [cur_rank, cur, best_end] = ops.last(clocks, opt.step, [&](int32_t r, const GpuOp& op) {
    return inside(r, op) && (!any_aligned || aligned(r));
  });
  if (cur_rank < 0) return cp;
  // The ranks on the same axis as that op: its own, and the aligned ones if it is aligned.
  const bool end_aligned = aligned(cur_rank);
  std::map<int32_t, Share> shares = ops.shares(opt.step);
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
    const Ops::Op here = ops.op(cur_rank, cur);
    const GpuOp& op = here.op;
    const Ns off = clocks.offset(cur_rank);
    Ns seg_end = explain_until == INT64_MIN ? op.end + off : std::min(op.end + off, explain_until);
    Ns seg_start = op.start + off;

    // A matched collective: its transfer from the last arrival, then the late rank.
    int g = op.coll >= 0 ? match.group({cur_rank, op.coll}) : -1;
    PathSegment seg = here.seg;
    seg.rank = cur_rank;
    seg.stream = here.stream;
    if (op.coll >= 0) seg.group = g;
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
        if (const OpPos p = lm ? ops.coll_op(late, lm->index) : OpPos{}; p.valid()) {
          next_rank = late;
          from = p;
          visited.insert({late, from});
        }
      }
    }
    seg.start = std::min(seg_start, seg_end);
    seg.end = seg_end;
    rev.push_back(seg);

    // What the op at (next_rank, from) waited for.
    const Ops::Op waiting = next_rank == cur_rank && from == cur ? here : ops.op(next_rank, from);
    const GpuOp& fop = waiting.op;
    const Ns foff = clocks.offset(next_rank);
    Ns want = next_rank == cur_rank ? seg.start : fop.start + foff;
    const Ops::Pred pr = ops.pred(next_rank, from);
    const int32_t pred_rank = pr.found ? next_rank : -1;
    const OpPos pred = pr.pos;
    const Ns pred_end = pr.found ? pr.end + foff : INT64_MIN;
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
        rev.push_back({SegmentKind::Gap, next_rank, waiting.stream, first, want, gap_name, gap_cat,
                       "", -1, -1});
      break;
    }
    if (want - pred_end > opt.gap_ns)
      rev.push_back({SegmentKind::Gap, next_rank, waiting.stream, pred_end, want, gap_name, gap_cat,
                     "", -1, -1});
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

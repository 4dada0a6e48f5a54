// The Chimera "replace" step for chains of pure data movement (docs/fusion.md): every element
// the chain's last stage writes is traced back to where its value was before the first stage,
// and one manytomany sends it from there straight to its destination.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "fusion/passes/passes.h"
#include "fusion/symmetry.h"

namespace braid::fusion::passes {
namespace {

// Where a run of elements came from.
struct Src {
  int32_t rank = -1;
  std::string buffer;
  int64_t offset = 0;
};
struct Run {
  int64_t begin = 0, end = 0;  // destination elements [begin, end)
  Src src;                     // of element `begin`
};

// Per (rank, buffer): runs written by the chain so far; elements not covered hold their own
// original value.
class Provenance {
 public:
  std::vector<Run> read(int32_t rank, const Slice& sl) const {
    std::vector<Run> out;
    auto it = map_.find({rank, sl.buffer});
    int64_t pos = sl.offset;
    const int64_t end = sl.end();
    auto identity = [&](int64_t b, int64_t e) {
      if (b < e) out.push_back({b, e, {rank, sl.buffer, b}});
    };
    if (it != map_.end()) {
      for (const Run& r : it->second) {
        if (r.end <= pos || r.begin >= end) continue;
        identity(pos, std::max(pos, r.begin));
        int64_t b = std::max(pos, r.begin), e = std::min(end, r.end);
        out.push_back({b, e, {r.src.rank, r.src.buffer, r.src.offset + (b - r.begin)}});
        pos = e;
      }
    }
    identity(pos, end);
    // Re-base to offsets relative to the slice start.
    for (Run& r : out) {
      r.begin -= sl.offset;
      r.end -= sl.offset;
    }
    return out;
  }
  // Writes `runs` (relative to their source slice) to `dst` starting at dst.offset + shift.
  void write(int32_t rank, const Slice& dst, const std::vector<Run>& runs, int64_t from,
             int64_t count) {
    auto& v = map_[{rank, dst.buffer}];
    const int64_t b = dst.offset, e = dst.offset + count;
    std::vector<Run> keep;
    for (const Run& r : v) {
      if (r.end <= b || r.begin >= e) {
        keep.push_back(r);
        continue;
      }
      if (r.begin < b) keep.push_back({r.begin, b, r.src});
      if (r.end > e) keep.push_back({e, r.end, {r.src.rank, r.src.buffer, r.src.offset + (e - r.begin)}});
    }
    for (const Run& r : runs) {
      int64_t lo = std::max(r.begin, from), hi = std::min(r.end, from + count);
      if (lo >= hi) continue;
      keep.push_back({b + (lo - from), b + (hi - from),
                      {r.src.rank, r.src.buffer, r.src.offset + (lo - r.begin)}});
    }
    std::sort(keep.begin(), keep.end(), [](const Run& x, const Run& y) { return x.begin < y.begin; });
    v = std::move(keep);
  }
  const std::map<std::pair<int32_t, std::string>, std::vector<Run>>& all() const { return map_; }

 private:
  std::map<std::pair<int32_t, std::string>, std::vector<Run>> map_;
};

bool movement_op(CollOp op) {
  return op == CollOp::AllGather || op == CollOp::AllToAll || op == CollOp::Send ||
         op == CollOp::Broadcast || op == CollOp::ManyToMany;
}

// Runs one matched group on the provenance (inputs all read before any output is written).
void run_group(const Schedule& s, const MatchGroup& g, Provenance& pv,
               std::set<std::pair<int32_t, std::string>>& written,
               std::map<std::pair<int32_t, std::string>, ElemSet>& written_elems) {
  std::vector<const Collective*> cs;
  for (const OpRef& r : g.members) cs.push_back(s.op(r).collective());
  const size_t n = cs.size();
  std::vector<std::vector<Run>> in(n);
  for (size_t i = 0; i < n; ++i)
    if (!cs[i]->in.empty()) in[i] = pv.read(g.members[i].rank, cs[i]->in);
  auto put = [&](size_t i, const Slice& dst, const std::vector<Run>& runs, int64_t from,
                 int64_t count) {
    int32_t r = g.members[i].rank;
    pv.write(r, dst, runs, from, count);
    written.insert({r, dst.buffer});
    written_elems[{r, dst.buffer}].add(dst.offset, dst.offset + count);
  };
  const int64_t k = cs[0]->count;
  switch (g.op) {
    case CollOp::Send:
      put(1, cs[1]->out, in[0], 0, k);
      break;
    case CollOp::AllGather:
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j) put(i, cs[i]->out.sub(j * k, k), in[j], 0, k);
      break;
    case CollOp::AllToAll:
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j) put(i, cs[i]->out.sub(j * k, k), in[j], i * k, k);
      break;
    case CollOp::Broadcast: {
      size_t root = 0;
      for (size_t i = 0; i < n; ++i)
        if (g.members[i].rank == cs[0]->root) root = i;
      for (size_t i = 0; i < n; ++i) put(i, cs[i]->out, in[root], 0, k);
      break;
    }
    case CollOp::ManyToMany:
      for (size_t b = 0; b < n; ++b) {
        std::map<int32_t, int> seen;
        for (const PeerChunk& rc : cs[b]->recvs) {
          int nth = seen[rc.peer]++;
          for (size_t a = 0; a < n; ++a) {
            if (g.members[a].rank != rc.peer) continue;
            for (const PeerChunk& sc : cs[a]->sends)
              if (sc.peer == g.members[b].rank && nth-- == 0) {
                put(b, cs[b]->out.sub(rc.offset, rc.count), in[a], sc.offset, rc.count);
                break;
              }
          }
        }
      }
      break;
    default:
      break;
  }
}

}  // namespace

// Why one function of ~240 lines (docs/architecture.md, "Long functions"): it is one proof, in
// the order its steps depend on each other (chain ops totally ordered per rank, intermediates
// dead, every final element traced to its origin, transfers merged, buffers laid out, the
// fused schedule built); each step rejects with the reason the finding reports, and the later
// steps use the earlier steps' maps. The element tracing that needs nothing else is above.
MovementPlan plan_movement(const Dataflow& df, const std::vector<MatchGroup>& stage1,
                           const std::vector<MatchGroup>& stage2,
                           const analysis::CostModel& cm, const std::string& comm_stem) {
  MovementPlan p;
  const Schedule& s = df.schedule();
  const auto& hb = df.hb();
  std::string dtype;
  std::map<int32_t, std::vector<OpRef>> chain;  // per rank, the chain's ops
  std::set<int64_t> chain_ids;
  for (const auto* stage : {&stage1, &stage2}) {
    // Groups of one stage run side by side (one P2P per pipeline channel): a rank pays the
    // largest of them; the stages run one after the other.
    int64_t stage_bytes = 0;
    Ns stage_ns = 0;
    for (const MatchGroup& g : *stage) {
      if (!movement_op(g.op)) {
        p.problem = std::string(to_string(g.op)) + " is not pure data movement";
        return p;
      }
      for (const OpRef& r : g.members) {
        const Collective& c = *s.op(r).collective();
        if (dtype.empty()) dtype = c.dtype;
        if (c.dtype != dtype) {
          p.problem = "the chain mixes dtypes";
          return p;
        }
        chain[r.rank].push_back(r);
        chain_ids.insert(s.op(r).id);
      }
      stage_ns = std::max(stage_ns, group_ns(s, g, cm));
      stage_bytes = std::max(stage_bytes, group_wire_bytes(s, g));
    }
    p.baseline_ns += stage_ns;
    p.baseline_bytes += stage_bytes;
  }
  // Each rank's chain ops must be totally ordered, stage 1 before stage 2.
  for (auto& [rank, refs] : chain) {
    std::sort(refs.begin(), refs.end(), [&](OpRef a, OpRef b) { return hb.before(a, b); });
    for (size_t i = 1; i < refs.size(); ++i)
      if (!hb.before(refs[i - 1], refs[i])) {
        p.problem = "the chain's ops on rank " + std::to_string(rank) + " are not ordered";
        return p;
      }
  }
  Provenance pv;
  std::set<std::pair<int32_t, std::string>> w1, w2;
  std::map<std::pair<int32_t, std::string>, ElemSet> e1, e2;
  for (const MatchGroup& g : stage1) run_group(s, g, pv, w1, e1);
  for (const MatchGroup& g : stage2) run_group(s, g, pv, w2, e2);

  // Stage-1 outputs not overwritten by stage 2 are intermediates: they must be dead afterwards
  // (no reader but the chain, not an output at the end).
  std::vector<OpRef> live_readers, opaque;
  bool live_end = false;
  for (const MatchGroup& g : stage1)
    for (const OpRef& r : g.members) {
      Access a = access_of(s, r.rank, s.op(r));
      for (const Slice& w : a.writes) {
        Uses u = df.uses_after(r, w);
        if (!u.unordered.empty()) {
          p.problem = "ops touching the intermediate '" + w.buffer + "' are not ordered";
          return p;
        }
        opaque.insert(opaque.end(), u.opaque.begin(), u.opaque.end());
        for (const auto& use : u.readers)
          if (!chain_ids.count(s.op(use.op).id)) live_readers.push_back(use.op);
        ElemSet end = u.live_at_end;
        auto it = e2.find({r.rank, w.buffer});
        if (it != e2.end())
          for (const auto& [b, e] : it->second.iv) end.subtract(b, e);
        if (!end.empty()) live_end = true;
      }
    }

  // Sends: every final element of stage 2 from its origin.
  struct Xfer {
    int32_t src, dst;
    std::string sbuf, dbuf;
    int64_t soff, doff, n;
  };
  std::vector<Xfer> xfers;
  int64_t self_copies = 0;
  std::vector<int32_t> self_ranks;
  for (const auto& [key, set] : e2) {
    const auto& [rank, buf] = key;
    for (const auto& [b, e] : set.iv) {
      for (const Run& r : pv.read(rank, Slice{buf, b, e - b})) {
        int64_t db = b + r.begin, n = r.end - r.begin;
        if (r.src.rank == rank) {
          if (r.src.buffer != buf || r.src.offset != db) {
            self_copies += n;
            self_ranks.push_back(rank);
          }
          continue;
        }
        xfers.push_back({r.src.rank, rank, r.src.buffer, buf, r.src.offset, db, n});
      }
    }
  }
  // Merge contiguous transfers of one (src, dst) pair.
  std::sort(xfers.begin(), xfers.end(), [](const Xfer& a, const Xfer& b) {
    return std::tie(a.src, a.dst, a.dbuf, a.doff) < std::tie(b.src, b.dst, b.dbuf, b.doff);
  });
  std::vector<Xfer> merged;
  for (const Xfer& x : xfers) {
    if (!merged.empty()) {
      Xfer& m = merged.back();
      if (m.src == x.src && m.dst == x.dst && m.sbuf == x.sbuf && m.dbuf == x.dbuf &&
          m.soff + m.n == x.soff && m.doff + m.n == x.doff) {
        m.n += x.n;
        continue;
      }
    }
    merged.push_back(x);
  }
  // Per rank: one input buffer and one output buffer.
  std::map<int32_t, std::pair<std::string, std::pair<int64_t, int64_t>>> in_span, out_span;
  auto span = [&](auto& m, int32_t r, const std::string& buf, int64_t b, int64_t e) {
    auto it = m.find(r);
    if (it == m.end()) {
      m[r] = {buf, {b, e}};
      return true;
    }
    if (it->second.first != buf) return false;
    it->second.second.first = std::min(it->second.second.first, b);
    it->second.second.second = std::max(it->second.second.second, e);
    return true;
  };
  std::map<int32_t, int64_t> sent;
  for (const Xfer& x : merged) {
    if (!span(in_span, x.src, x.sbuf, x.soff, x.soff + x.n) ||
        !span(out_span, x.dst, x.dbuf, x.doff, x.doff + x.n)) {
      p.problem = "a rank's data comes from (or goes to) several buffers";
      return p;
    }
    sent[x.src] += x.n;
  }
  int64_t most = 0;
  for (const auto& [r, n] : sent) most = std::max(most, n);
  std::set<int32_t> members;
  for (const Xfer& x : merged) {
    members.insert(x.src);
    members.insert(x.dst);
  }
  std::vector<int32_t> mem(members.begin(), members.end());
  const int64_t esize = dtype_bytes_of(dtype);
  p.fused_bytes = most * esize;
  std::string comm_id = fresh_comm(s, comm_stem);
  p.fused_ns = merged.empty() ? 0
                              : cm.collective_ns(CollOp::ManyToMany, most * esize,
                                                 static_cast<int>(mem.size()), comm_id, mem);
  for (const auto& [r, refs] : chain) {
    p.ranks.push_back(r);
    for (OpRef x : refs) p.removed.push_back(s.op(x).id);
  }
  sort_unique(p.removed);

  std::vector<std::string> why;
  if (!opaque.empty()) why.push_back("assumes " + name_ops(s, opaque) + " do not read the chain's "
                                     "intermediate data");
  if (!live_readers.empty())
    why.push_back("assumes " + name_ops(s, live_readers) +
                  " can run where the data comes from (Chimera moves such ops, e.g. the MoE "
                  "gate, to the sending side); here they read the intermediate data");
  if (live_end) why.push_back("assumes the intermediate data is not needed at the end of the step");
  if (self_copies > 0) {
    sort_unique(self_ranks);
    why.push_back("assumes ranks write their own " + std::to_string(self_copies) +
                  " elements in place (the IR has no local copy op; ranks " +
                  [&] {
                    std::string t;
                    for (size_t i = 0; i < self_ranks.size(); ++i)
                      t += (i ? "," : "") + std::to_string(self_ranks[i]);
                    return t;
                  }() +
                  " would copy)");
  }
  for (size_t i = 0; i < why.size(); ++i) p.assumption += (i ? "; " : "") + why[i];
  if (!p.assumption.empty()) {
    p.built = true;  // advice: the saving is known, the rewrite is not applied
    return p;
  }

  // Build the fused schedule: each rank's manytomany replaces its last chain op; the sources of
  // a rank must not change between its first chain op and that point.
  Schedule f = s;
  f.comms.push_back(Comm{comm_id, mem});
  std::map<int32_t, Collective> m2m;
  for (int32_t r : mem) {
    Collective c;
    c.op = CollOp::ManyToMany;
    c.comm = comm_id;
    c.dtype = dtype;
    c.count = 0;
    if (auto it = in_span.find(r); it != in_span.end())
      c.in = {it->second.first, it->second.second.first,
              it->second.second.second - it->second.second.first};
    if (auto it = out_span.find(r); it != out_span.end())
      c.out = {it->second.first, it->second.second.first,
               it->second.second.second - it->second.second.first};
    c.label = "fused";
    m2m[r] = c;
  }
  for (const Xfer& x : merged) {
    m2m[x.src].sends.push_back({x.dst, x.soff - m2m[x.src].in.offset, x.n});
    m2m[x.dst].recvs.push_back({x.src, x.doff - m2m[x.dst].out.offset, x.n});
  }
  for (const Xfer& x : merged) {
    const auto& refs = chain[x.src];
    if (refs.size() < 2) continue;
    Slice src{x.sbuf, x.soff, x.n};
    for (OpRef w : df.writers_between(refs.front(), refs.back(), src))
      if (!chain_ids.count(s.op(w).id)) {
        p.problem = "the data rank " + std::to_string(x.src) + " sends changes inside the chain";
        return p;
      }
  }
  p.comm = Comm{comm_id, mem};
  f.comms.pop_back();
  for (const auto& [r, refs] : chain) {
    std::vector<int64_t> ids;
    for (OpRef x : refs) ids.push_back(s.op(x).id);
    int64_t last = ids.back();
    if (members.count(r)) {
      p.puts.push_back({last, m2m[r], ids});
      ids.pop_back();
    }
    for (int64_t id : ids) p.drop.push_back(id);
  }
  apply_movement(f, p);
  std::string problem;
  if (!valid(f, &problem)) {
    p.problem = "the fused schedule would not be valid: " + problem;
    return p;
  }
  p.built = true;
  return p;
}

void apply_movement(Schedule& s, const MovementPlan& p) {
  // Another rewrite may have taken the id since the plan was made.
  Comm comm = p.comm;
  comm.id = fresh_comm(s, p.comm.id);
  add_comm(s, comm);  // with its images when the schedule holds rank classes
  int64_t& next = s.op_id_counter();
  for (const MovementPlan::Put& put : p.puts) {
    OpRef at = must_find(s, put.at);
    Collective c = put.op;
    c.comm = comm.id;
    s.op(at) = make_op(next, c, put.replaces);
  }
  for (int64_t id : p.drop) remove_op(s, id);
}

bool finding_from_plan(const MovementPlan& p, const std::string& pass, const std::string& summary,
                       Finding& f) {
  if (!p.built) return false;
  f.pass = pass;
  f.ranks = p.ranks;
  f.ops = p.removed;
  f.saving_ns = p.baseline_ns - p.fused_ns;
  f.saving_bytes = p.baseline_bytes - p.fused_bytes;
  f.summary = summary;
  f.legal = p.assumption.empty();
  f.assumption = p.assumption;
  if (f.legal) {
    auto plan = std::make_shared<MovementPlan>(p);
    f.rewrite = [plan](Schedule& x) { apply_movement(x, *plan); };
  }
  return true;
}

}  // namespace braid::fusion::passes

#include "fusion/passes/replicas.h"

#include <algorithm>
#include <functional>

#include "fusion/interpreter.h"
#include "fusion/symmetry.h"

namespace braid::fusion::passes {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
uint64_t mix(uint64_t h, const std::string& s) { return mix(h, std::hash<std::string>{}(s)); }

constexpr int kMaxDepth = 20000;  // deeper chains are not traced (signature unknown)

}  // namespace

const Replicas::RankWriters& Replicas::writers(int32_t rank) {
  auto [it, fresh] = writers_.try_emplace(rank);
  if (!fresh) return it->second;
  const Schedule& s = df_.schedule();
  const auto& streams = s.ranks[rank].streams;
  for (int32_t st = 0; st < static_cast<int32_t>(streams.size()); ++st)
    for (int32_t i = 0; i < static_cast<int32_t>(streams[st].ops.size()); ++i) {
      OpRef r{rank, st, i};
      Access a = access_of(s, rank, s.op(r));
      if (a.any) it->second.opaque.push_back(r);
      for (const Slice& w : a.writes) {
        auto& v = it->second.by_buffer[w.buffer];
        if (v.empty() || v.back() != r) v.push_back(r);
      }
    }
  return it->second;
}

std::optional<uint64_t> Replicas::signature(OpRef at, const Slice& slice) {
  const auto key = std::make_tuple(at.rank, at.stream, at.index, slice.buffer, slice.offset,
                                   slice.count);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  if (depth_ > kMaxDepth) return std::nullopt;
  ++depth_;
  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  } guard{depth_};

  const Schedule& s = df_.schedule();
  const HappensBefore& hb = df_.hb();
  const RankWriters& rw = writers(at.rank);
  auto fail = [&]() -> std::optional<uint64_t> {
    memo_[key] = std::nullopt;
    return std::nullopt;
  };
  for (const OpRef& o : rw.opaque)
    if (o != at && !hb.before(at, o)) return fail();  // may have written it before `at`

  // The writers of the slice before `at`, each with the elements it wrote.
  struct Cand {
    OpRef op;
    Slice w;
    ElemSet elems;
  };
  std::vector<Cand> cands;
  if (auto it = rw.by_buffer.find(slice.buffer); it != rw.by_buffer.end())
    for (const OpRef& w : it->second) {
      if (w == at) continue;  // reads happen before its own writes
      for (const Slice& x : access_of(s, at.rank, s.op(w)).writes) {
        if (!x.overlaps(slice)) continue;
        if (!hb.before(w, at)) {
          if (hb.before(at, w)) continue;
          return fail();  // unordered with `at`
        }
        const int64_t b = std::max(x.offset, slice.offset), e = std::min(x.end(), slice.end());
        cands.push_back({w, x, ElemSet::of({slice.buffer, b, e - b})});
      }
    }
  // Keep, per candidate, the elements no later candidate overwrites.
  for (size_t i = 0; i < cands.size(); ++i)
    for (size_t j = 0; j < cands.size(); ++j) {
      if (i == j || cands[i].op == cands[j].op) continue;
      if (!hb.ordered(cands[i].op, cands[j].op)) {
        bool clash = false;
        for (auto [b, e] : cands[j].elems.iv)
          if (!cands[i].elems.intersect(b, e).empty()) clash = true;
        if (clash) return fail();
        continue;
      }
      if (hb.before(cands[i].op, cands[j].op))
        for (auto [b, e] : ElemSet::of({slice.buffer, std::max(cands[j].w.offset, slice.offset),
                                        std::min(cands[j].w.end(), slice.end()) -
                                            std::max(cands[j].w.offset, slice.offset)})
                               .iv)
          cands[i].elems.subtract(b, e);
    }
  // Pieces in element order; elements no writer covers hold the initial data.
  struct Piece {
    int64_t a, b;
    uint64_t sig;
  };
  std::vector<Piece> pieces;
  ElemSet rest = ElemSet::of(slice);
  for (const Cand& c : cands)
    for (auto [a, b] : c.elems.iv) {
      auto p = piece(c.op, c.w, a, b);
      if (!p) return fail();
      pieces.push_back({a, b, *p});
      rest.subtract(a, b);
    }
  if (!rest.empty()) {
    const Buffer* buf = s.ranks[at.rank].find_buffer(slice.buffer);
    const int32_t vr = value_rank(s, at.rank, buf ? buf->replicated : std::string());
    for (auto [a, b] : rest.iv)
      pieces.push_back({a, b, mix(mix(mix(mix(1, vr), slice.buffer), a), b)});
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& x, const Piece& y) { return x.a < y.a; });
  uint64_t h = mix(7, slice.count);
  for (const Piece& p : pieces) h = mix(mix(mix(h, p.a - slice.offset), p.b - p.a), p.sig);
  memo_[key] = h;
  return h;
}

std::optional<uint64_t> Replicas::piece(OpRef op, const Slice& w, int64_t a, int64_t b) {
  const Schedule& s = df_.schedule();
  const Op& o = s.op(op);
  if (const Compute* c = o.compute()) {
    if (c->opaque) return std::nullopt;
    // Element e of the write is compute_value(label, value rank, buffer, e, the reads at
    // position (e - w.offset) mod each read's count).
    uint64_t h = mix(mix(mix(mix(mix(2, c->label), value_rank(s, op.rank, c->replicated)),
                             w.buffer),
                         a),
                     b);
    h = mix(h, a - w.offset);
    // Row-wise fields and fn change what the op computes from the same reads.
    h = mix(mix(h, c->fn), static_cast<uint64_t>(c->sum_rows));
    for (const auto* v : {&c->read_rows, &c->write_rows, &c->transpose, &c->transposed_reads})
      for (int64_t x : *v) h = mix(h, static_cast<uint64_t>(x));
    for (const Slice& r : c->reads) {
      auto sig = signature(op, r);
      if (!sig) return std::nullopt;
      h = mix(mix(h, r.count), *sig);
    }
    return h;
  }
  const Collective* c = o.collective();
  if (!c) return std::nullopt;
  const MatchGroup* g = df_.group(op);
  if (!g) return std::nullopt;
  const uint64_t gid = static_cast<uint64_t>(g - df_.matching().groups.data());
  switch (c->op) {
    case CollOp::AllReduce:
    case CollOp::AllGather:
    case CollOp::Broadcast:
      // Every member's output is the same.
      return mix(mix(mix(3, gid), a - w.offset), b - a);
    case CollOp::Recv: {
      for (const OpRef& m : g->members) {
        const Collective* sc = s.op(m).collective();
        if (!sc || sc->op != CollOp::Send) continue;
        auto sig = signature(m, sc->in.sub(a - w.offset, b - a));
        if (!sig) return std::nullopt;
        return mix(4, *sig);
      }
      return std::nullopt;
    }
    case CollOp::AllToAll: {
      // Block j of the output is block (this rank's index) of member j's input: equal on two
      // ranks at the same index of two all-to-alls whose members send equal data (the EP groups
      // of two TP ranks, Megatron's replicated MoE block).
      const Comm* comm = s.find_comm(c->comm);
      const int idx = comm ? comm->index_of(op.rank) : -1;
      const int64_t k = c->count;
      // Members that are images are not in the schedule to trace (symmetry.h).
      if (idx < 0 || k <= 0 || has_images(s, *comm)) return std::nullopt;
      uint64_t h = mix(6, static_cast<uint64_t>(idx));
      for (int64_t lo = a - w.offset; lo < b - w.offset;) {
        const int64_t j = lo / k, hi = std::min(b - w.offset, (j + 1) * k);
        if (j >= static_cast<int64_t>(comm->ranks.size())) return std::nullopt;
        const OpRef* src = nullptr;
        for (const OpRef& m : g->members)
          if (m.rank == comm->ranks[j]) src = &m;
        if (!src) return std::nullopt;
        const Collective* sc = s.op(*src).collective();
        auto sig = signature(*src, sc->in.sub(idx * k + (lo - j * k), hi - lo));
        if (!sig) return std::nullopt;
        h = mix(mix(mix(h, static_cast<uint64_t>(lo)), static_cast<uint64_t>(hi - lo)), *sig);
        lo = hi;
      }
      return h;
    }
    default:
      // Rank-specific (reduce-scatter shards, many-to-many chunks, ...).
      return mix(mix(mix(mix(5, static_cast<uint64_t>(op.rank)), static_cast<uint64_t>(o.id)), a), b);
  }
}

bool Replicas::same(const std::vector<std::pair<OpRef, Slice>>& reads) {
  std::optional<uint64_t> first;
  for (const auto& [at, sl] : reads) {
    auto sig = signature(at, sl);
    if (!sig) return false;
    if (first && *first != *sig) return false;
    first = sig;
  }
  return true;
}

}  // namespace braid::fusion::passes

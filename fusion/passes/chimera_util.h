// Finding the stages of Chimera's fusion patterns from data flow (internal to the passes).
#pragma once

#include <map>

#include "fusion/passes/passes.h"

namespace braid::fusion::passes {

// Collectives of kind `op` on `rank` that read the value `at` leaves in `slice` (before it is
// overwritten), and their match groups (deduplicated, in order of first appearance).
inline std::vector<const MatchGroup*> reader_groups(const Dataflow& df, OpRef at,
                                                    const Slice& slice, CollOp op) {
  std::vector<const MatchGroup*> out;
  Uses u = df.uses_after(at, slice);
  for (const auto& r : u.readers) {
    const Collective* c = df.schedule().op(r.op).collective();
    if (!c || c->op != op) continue;
    const MatchGroup* g = df.group(r.op);
    if (g && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  }
  return out;
}

// Collectives of kind `op` (before `at` on its rank) whose output is what `at` reads from
// `slice`: the last writers of those elements.
inline std::vector<const MatchGroup*> writer_groups(const Dataflow& df, OpRef at,
                                                    const Slice& slice, CollOp op) {
  std::vector<const MatchGroup*> out;
  const Schedule& s = df.schedule();
  const auto& streams = s.ranks[at.rank].streams;
  for (int32_t st = 0; st < static_cast<int32_t>(streams.size()); ++st)
    for (int32_t i = 0; i < static_cast<int32_t>(streams[st].ops.size()); ++i) {
      OpRef w{at.rank, st, i};
      const Collective* c = s.op(w).collective();
      if (!c || c->op != op || !df.hb().before(w, at)) continue;
      Access a = access_of(s, at.rank, s.op(w));
      bool hit = false;
      for (const Slice& x : a.writes)
        if (x.overlaps(slice)) {
          // It must still be the value `at` reads: nothing writes it in between.
          Slice part{x.buffer, std::max(x.offset, slice.offset), 0};
          part.count = std::min(x.end(), slice.end()) - part.offset;
          if (df.writers_between(w, at, part).empty()) hit = true;
        }
      const MatchGroup* g = hit ? df.group(w) : nullptr;
      if (g && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
    }
  return out;
}

// Collectives of kind `op` that the value `at` leaves in `slice` reaches, directly or through a
// chain of (declared) compute ops, and the compute ops on the way.
struct Reach {
  const MatchGroup* group = nullptr;
  std::vector<OpRef> via;  // compute between, empty when the collective reads the value itself
};
inline std::vector<Reach> reach(const Dataflow& df, OpRef at, const Slice& slice, CollOp op,
                                int depth = 6) {
  std::vector<Reach> out;
  struct Item {
    OpRef at;
    Slice slice;
    std::vector<OpRef> via;
  };
  std::vector<Item> frontier{{at, slice, {}}};
  std::vector<OpRef> seen;
  const Schedule& s = df.schedule();
  for (int d = 0; d <= depth && !frontier.empty(); ++d) {
    std::vector<Item> next;
    for (const Item& it : frontier) {
      Uses u = df.uses_after(it.at, it.slice);
      for (const auto& r : u.readers) {
        const Op& o = s.op(r.op);
        if (const Collective* c = o.collective()) {
          if (c->op != op) continue;
          const MatchGroup* g = df.group(r.op);
          if (!g) continue;
          bool dup = false;
          for (const Reach& x : out) dup = dup || x.group == g;
          if (!dup) out.push_back({g, it.via});
        } else if (const Compute* c = o.compute(); c && !c->opaque) {
          if (std::find(seen.begin(), seen.end(), r.op) != seen.end()) continue;
          seen.push_back(r.op);
          for (const Slice& w : c->writes) {
            Item n{r.op, w, it.via};
            n.via.push_back(r.op);
            next.push_back(std::move(n));
          }
        }
      }
    }
    frontier = std::move(next);
  }
  return out;
}

inline std::vector<MatchGroup> copy_groups(const std::vector<const MatchGroup*>& v) {
  std::vector<MatchGroup> out;
  for (const MatchGroup* g : v) out.push_back(*g);
  return out;
}

inline std::vector<int64_t> group_ids(const Schedule& s, const std::vector<MatchGroup>& gs) {
  std::vector<int64_t> v;
  for (const MatchGroup& g : gs)
    for (int64_t id : member_ids(s, g)) v.push_back(id);
  sort_unique(v);
  return v;
}

inline std::vector<int32_t> group_ranks(const std::vector<MatchGroup>& gs) {
  std::vector<int32_t> v;
  for (const MatchGroup& g : gs)
    for (int32_t r : member_ranks(g)) v.push_back(r);
  sort_unique(v);
  return v;
}

}  // namespace braid::fusion::passes

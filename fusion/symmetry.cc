#include "fusion/symmetry.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "trace/error.h"

namespace braid::fusion {

namespace {

std::string n(int64_t v) { return std::to_string(v); }

// Equal but for op ids (a's are taken from b's at the same places).
bool same_but_ids(RankSchedule a, const RankSchedule& b) {
  if (a.streams.size() != b.streams.size()) return false;
  for (size_t st = 0; st < a.streams.size(); ++st) {
    auto& x = a.streams[st].ops;
    const auto& y = b.streams[st].ops;
    if (x.size() != y.size()) return false;
    for (size_t k = 0; k < x.size(); ++k) x[k].id = y[k].id;
  }
  return a == b;
}

// Whether pi of `sym` maps `s` (every rank present) onto itself: rank pi(y) runs the image of
// rank y's schedule, for every y but the last of each orbit (whose image is the first, which
// the others imply: pi^orbit is the identity).
bool holds(const Schedule& s, const Symmetry& sym) {
  SymmetryMap m(s, sym);
  const std::vector<int> one = m.comms_after(1);
  const int32_t world = static_cast<int32_t>(s.ranks.size());
  try {
    for (int32_t y = 0; y < world; ++y) {
      if (sym.image_index(y) == sym.orbit() - 1) continue;
      if (!same_but_ids(m.image(s.ranks[y], 1, one), s.ranks[sym.image(y, 1)])) return false;
    }
  } catch (const Error&) {
    return false;  // a communicator without an image
  }
  return true;
}

int64_t largest_id(const Schedule& s) {
  int64_t top = -1;
  for (const RankSchedule& r : s.ranks)
    for (const Stream& st : r.streams)
      for (const Op& op : st.ops) top = std::max(top, op.id);
  return top;
}

}  // namespace

SymmetryMap::SymmetryMap(const Schedule& s, Symmetry sym)
    : s_(s), sym_(sym), next_(s.comms.size(), -1) {
  for (size_t c = 0; c < s.comms.size(); ++c) index_.emplace(s.comms[c].id, static_cast<int>(c));
  std::map<std::vector<int32_t>, std::vector<int>> by_set;
  std::vector<std::vector<int32_t>> sets(s.comms.size());
  for (size_t c = 0; c < s.comms.size(); ++c) {
    sets[c] = s.comms[c].ranks;
    std::sort(sets[c].begin(), sets[c].end());
    by_set[sets[c]].push_back(static_cast<int>(c));
  }
  for (size_t c = 0; c < s.comms.size(); ++c) {
    std::vector<int32_t> img;
    for (int32_t r : s.comms[c].ranks) img.push_back(sym.image(r, 1));
    std::sort(img.begin(), img.end());
    auto it = by_set.find(img);
    const std::vector<int>& own = by_set[sets[c]];
    if (it == by_set.end() || it->second.size() != own.size()) continue;
    const auto k = std::find(own.begin(), own.end(), static_cast<int>(c)) - own.begin();
    next_[c] = it->second[k];
  }
}

int SymmetryMap::index(const std::string& id) const {
  auto it = index_.find(id);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> SymmetryMap::comms_after(int64_t i) const {
  std::vector<int> m(next_.size());
  std::iota(m.begin(), m.end(), 0);
  for (int64_t k = 0; k < i % sym_.orbit(); ++k)
    for (int& c : m)
      if (c >= 0) c = next_[c];
  return m;
}

RankSchedule SymmetryMap::image(const RankSchedule& r, int64_t i, const std::vector<int>& comms) const {
  if (i % sym_.orbit() == 0) return r;
  RankSchedule out = r;
  out.rank = sym_.image(r.rank, i);
  std::unordered_map<std::string, const std::string*> renamed;
  auto comm = [&](std::string& id) {
    if (id.empty()) return;
    auto it = renamed.find(id);
    if (it == renamed.end()) {
      const int c = index(id);
      if (c < 0 || comms[c] < 0)
        throw Error(ErrorCode::Internal, "communicator '" + id + "' of rank " + n(r.rank) +
                                             " has no image under the schedule's symmetry");
      it = renamed.emplace(id, &s_.comms[comms[c]].id).first;
    }
    id = *it->second;
  };
  auto rank = [&](int32_t& p) {
    if (p >= 0) p = sym_.image(p, i);
  };
  const int64_t shift_ids = i * sym_.id_stride;
  for (Buffer& b : out.buffers) comm(b.replicated);
  for (Stream& st : out.streams)
    for (Op& op : st.ops) {
      op.id += shift_ids;
      for (int64_t& x : op.replaces) x += shift_ids;
      if (Compute* c = op.compute()) comm(c->replicated);
      if (Collective* c = op.collective()) {
        comm(c->comm);
        rank(c->root);
        rank(c->peer);
        for (PeerChunk& p : c->sends) rank(p.peer);
        for (PeerChunk& p : c->recvs) rank(p.peer);
      }
    }
  return out;
}

size_t expanded_op_count(const Schedule& s) {
  return s.op_count() * static_cast<size_t>(s.symmetry.orbit());
}

int32_t rank_classes(const Schedule& s) {
  const auto world = static_cast<int32_t>(s.ranks.size());
  return s.symmetry.on() ? world / s.symmetry.orbit() : world;
}

int64_t id_stride_for(int64_t next_id) {
  int64_t p = 10;
  while (p < 10 * next_id) p *= 10;
  return p;
}

Schedule expand(const Schedule& s, size_t max_ops) {
  const Symmetry& sym = s.symmetry;
  if (!sym.on()) return s;
  const size_t total = expanded_op_count(s);
  if (total > max_ops)
    throw Error(ErrorCode::Usage,
                "schedule '" + s.name + "' has " + n(static_cast<int64_t>(s.ranks.size())) +
                    " ranks in " + n(rank_classes(s)) + " rank classes; every rank at once is " +
                    n(static_cast<int64_t>(total)) + " ops, more than the " +
                    n(static_cast<int64_t>(max_ops)) +
                    " this command holds (braid fuse and braid ab --backend sim --no-data-check work on the "
                    "classes)");
  if (std::vector<std::string> p = symmetry_problems(s); !p.empty())
    throw Error(ErrorCode::BadFormat, "schedule '" + s.name + "': " + p.front());
  SymmetryMap m(s, sym);
  Schedule out;
  out.name = s.name;
  out.provenance = s.provenance;
  out.lifted = s.lifted;
  out.comms = s.comms;
  out.ranks.resize(s.ranks.size());
  for (int32_t i = 0; i < sym.orbit(); ++i) {
    const std::vector<int> comms = m.comms_after(i);
    for (const RankSchedule& r : s.ranks)
      if (sym.stored(r.rank)) out.ranks[sym.image(r.rank, i)] = m.image(r, i, comms);
  }
  return out;
}

Schedule fold(const Schedule& s) {
  const auto world = static_cast<int32_t>(s.ranks.size());
  if (s.symmetry.on() || world < 2) return s;
  for (const RankSchedule& r : s.ranks)
    for (const Stream& st : r.streams)
      for (const Op& op : st.ops)
        if (!op.replaces.empty()) return s;
  // Candidates by orbit, largest first (fewest classes), then the smaller block.
  std::vector<Symmetry> cands;
  for (int32_t block = 2; block <= world; ++block) {
    if (world % block) continue;
    for (int32_t shift = 1; shift < block; ++shift)
      if (block % shift == 0) cands.push_back({block, shift, 0});
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Symmetry& a, const Symmetry& b) {
    return a.orbit() > b.orbit();
  });
  for (Symmetry sym : cands) {
    if (!holds(s, sym)) continue;
    Schedule f = s;
    for (RankSchedule& r : f.ranks)
      if (!sym.stored(r.rank)) r = RankSchedule{r.rank, {}, {}, {}};
    sym.id_stride = id_stride_for(largest_id(f) + 1);
    f.symmetry = sym;
    if (symmetry_problems(f).empty()) return f;
  }
  return s;
}

bool has_images(const Schedule& s, const Comm& c) {
  if (!s.symmetry.on()) return false;
  bool stored = false, image = false;
  for (int32_t r : c.ranks) (s.symmetry.stored(r) ? stored : image) = true;
  return stored && image;
}

std::string add_comm(Schedule& s, Comm c) {
  const std::string id = c.id;
  std::vector<int32_t> set = c.ranks;
  std::sort(set.begin(), set.end());
  const Symmetry& sym = s.symmetry;
  s.comms.push_back(std::move(c));
  if (!sym.on()) return id;
  std::set<std::string> ids;
  for (const Comm& x : s.comms) ids.insert(x.id);
  const std::vector<int32_t> members = s.comms.back().ranks;
  for (int32_t i = 1; i < sym.orbit(); ++i) {
    Comm img;
    for (int32_t r : members) img.ranks.push_back(sym.image(r, i));
    std::vector<int32_t> sorted = img.ranks;
    std::sort(sorted.begin(), sorted.end());
    if (sorted == set) break;  // its own image: one communicator serves the whole orbit
    img.id = id + "~" + n(i);
    for (int k = 1; ids.count(img.id); ++k) img.id = id + "~" + n(i) + "." + n(k);
    ids.insert(img.id);
    s.comms.push_back(std::move(img));
  }
  return id;
}

std::vector<std::string> symmetry_problems(const Schedule& s) {
  std::vector<std::string> out;
  const Symmetry& sym = s.symmetry;
  if (!sym.on()) return out;
  const auto world = static_cast<int32_t>(s.ranks.size());
  if (sym.shift <= 0 || sym.block % sym.shift || world % sym.block) {
    out.push_back("symmetry block " + n(sym.block) + " and shift " + n(sym.shift) +
                  " do not divide the " + n(world) + " ranks and each other");
    return out;
  }
  if (sym.id_stride <= 0) out.push_back("symmetry id_stride " + n(sym.id_stride) + " is not > 0");
  SymmetryMap m(s, sym);
  for (size_t c = 0; c < s.comms.size(); ++c) {
    const Comm& comm = s.comms[c];
    if (m.next(static_cast<int>(c)) < 0) {
      out.push_back("communicator '" + comm.id + "' has no image under the symmetry");
      continue;
    }
    if (has_images(s, comm) && m.next(static_cast<int>(c)) != static_cast<int>(c))
      out.push_back("communicator '" + comm.id +
                    "' joins stored ranks and images but is not its own image");
  }
  for (const RankSchedule& r : s.ranks) {
    if (!sym.stored(r.rank)) {
      if (!r.streams.empty() || !r.buffers.empty())
        out.push_back("rank " + n(r.rank) + " is an image of rank " +
                      n(sym.representative(r.rank)) + " but holds ops or buffers");
      continue;
    }
    for (const Stream& st : r.streams)
      for (const Op& op : st.ops) {
        if (op.id >= sym.id_stride)
          out.push_back("op id " + n(op.id) + " of rank " + n(r.rank) +
                        " is not below the symmetry's id_stride " + n(sym.id_stride));
        const Collective* c = op.collective();
        if (c && c->peer >= 0 && c->peer < world && !sym.stored(c->peer))
          out.push_back("rank " + n(r.rank) + " (op id " + n(op.id) + ") exchanges with rank " +
                        n(c->peer) + ", an image of rank " + n(sym.representative(c->peer)) +
                        ": point-to-point partners must be stored");
      }
  }
  return out;
}

}  // namespace braid::fusion

#include "fusion/dataflow.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <queue>

#include "fusion/labels.h"
#include "trace/error.h"

namespace braid::fusion {

// ---------------------------------------------------------------------------------------------
// ElemSet

ElemSet ElemSet::of(const Slice& s) {
  ElemSet e;
  if (!s.empty() && s.count > 0) e.iv.push_back({s.offset, s.end()});
  return e;
}

int64_t ElemSet::size() const {
  int64_t n = 0;
  for (const auto& [b, e] : iv) n += e - b;
  return n;
}

void ElemSet::add(int64_t b, int64_t e) {
  if (b >= e) return;
  std::vector<std::pair<int64_t, int64_t>> out;
  bool placed = false;
  for (const auto& x : iv) {
    if (x.second < b) {
      out.push_back(x);
    } else if (e < x.first) {
      if (!placed) out.push_back({b, e});
      placed = true;
      out.push_back(x);
    } else {
      b = std::min(b, x.first);
      e = std::max(e, x.second);
    }
  }
  if (!placed) out.push_back({b, e});
  std::sort(out.begin(), out.end());
  iv = std::move(out);
}

void ElemSet::subtract(int64_t b, int64_t e) {
  if (b >= e) return;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& x : iv) {
    if (x.second <= b || e <= x.first) {
      out.push_back(x);
      continue;
    }
    if (x.first < b) out.push_back({x.first, b});
    if (e < x.second) out.push_back({e, x.second});
  }
  iv = std::move(out);
}

ElemSet ElemSet::intersect(int64_t b, int64_t e) const {
  ElemSet r;
  for (const auto& x : iv) {
    int64_t lo = std::max(b, x.first), hi = std::min(e, x.second);
    if (lo < hi) r.iv.push_back({lo, hi});
  }
  return r;
}

bool ElemSet::within(int64_t b, int64_t e) const {
  for (const auto& x : iv)
    if (x.first < b || x.second > e) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Happens-before

HappensBefore::HappensBefore(const Schedule& s) {
  const size_t nranks = s.ranks.size();
  base_.resize(nranks);
  clock_.resize(nranks);
  cyclic_.assign(nranks, false);
  for (size_t ri = 0; ri < nranks; ++ri) {
    const RankSchedule& r = s.ranks[ri];
    const int nstreams = static_cast<int>(r.streams.size());
    std::vector<OpRef> refs;
    for (int si = 0; si < nstreams; ++si) {
      base_[ri].push_back(static_cast<int>(refs.size()));
      for (int i = 0; i < static_cast<int>(r.streams[si].ops.size()); ++i)
        refs.push_back({static_cast<int32_t>(ri), si, i});
    }
    const int n = static_cast<int>(refs.size());
    std::map<std::string, int> records;
    for (int v = 0; v < n; ++v)
      if (const Record* e = s.op(refs[v]).record()) records.emplace(e->event, v);
    std::vector<int> record_of(n, -1), indeg(n, 0);
    std::vector<std::vector<int>> succ(n);
    for (int v = 0; v < n; ++v) {
      if (refs[v].index > 0) {
        succ[v - 1].push_back(v);
        ++indeg[v];
      }
      if (const Wait* w = s.op(refs[v]).wait()) {
        auto it = records.find(w->event);
        if (it != records.end()) {
          record_of[v] = it->second;
          succ[it->second].push_back(v);
          ++indeg[v];
        }
      }
    }
    std::queue<int> ready;
    for (int v = 0; v < n; ++v)
      if (indeg[v] == 0) ready.push(v);
    std::vector<int> topo;
    while (!ready.empty()) {
      int v = ready.front();
      ready.pop();
      topo.push_back(v);
      for (int w : succ[v])
        if (--indeg[w] == 0) ready.push(w);
    }
    auto& clock = clock_[ri];
    clock.assign(n, std::vector<int32_t>(nstreams, 0));
    if (static_cast<int>(topo.size()) < n) {
      cyclic_[ri] = true;
      continue;
    }
    for (int v : topo) {
      auto& c = clock[v];
      const OpRef& ref = refs[v];
      if (ref.index > 0) c = clock[v - 1];
      if (record_of[v] >= 0) {
        const auto& rc = clock[record_of[v]];
        for (int k = 0; k < nstreams; ++k) c[k] = std::max(c[k], rc[k]);
      }
      c[ref.stream] = ref.index + 1;
    }
  }
}

bool HappensBefore::before(OpRef a, OpRef b) const {
  if (a.rank != b.rank || a == b || cyclic_[a.rank]) return false;
  const auto& cb = clock_[b.rank][base_[b.rank][b.stream] + b.index];
  return cb[a.stream] >= a.index + 1;
}

// ---------------------------------------------------------------------------------------------
// Dataflow

Dataflow::Dataflow(const Schedule& s)
    : s_(s), hb_(s), m_(match_schedule_collectives(s)), index_(s.ranks.size()) {}

const std::vector<OpRef>& Dataflow::collectives_on(int32_t rank, const std::string& comm) const {
  static const std::vector<OpRef> none;
  RankIndex& ix = index_[rank];
  if (!ix.comms_built) {
    ix.comms_built = true;
    const auto& streams = s_.ranks[rank].streams;
    for (int32_t st = 0; st < static_cast<int32_t>(streams.size()); ++st)
      for (int32_t i = 0; i < static_cast<int32_t>(streams[st].ops.size()); ++i)
        if (const Collective* c = streams[st].ops[i].collective())
          ix.by_comm[c->comm].push_back({rank, st, i});
  }
  auto it = ix.by_comm.find(comm);
  return it == ix.by_comm.end() ? none : it->second;
}

const std::vector<OpRef>& Dataflow::touching(int32_t rank, const std::string& buffer) const {
  RankIndex& ix = index_[rank];
  if (!ix.built) {
    ix.built = true;
    const auto& streams = s_.ranks[rank].streams;
    for (int32_t st = 0; st < static_cast<int32_t>(streams.size()); ++st)
      for (int32_t i = 0; i < static_cast<int32_t>(streams[st].ops.size()); ++i) {
        OpRef o{rank, st, i};
        Access acc = access_of(s_, rank, s_.op(o));
        if (acc.any) {
          ix.opaque.push_back(o);
          continue;
        }
        auto note = [&](const Slice& x) {
          auto& v = ix.by_buffer[x.buffer];
          if (v.empty() || v.back() != o) v.push_back(o);
        };
        for (const Slice& x : acc.reads) note(x);
        for (const Slice& x : acc.writes) note(x);
      }
    // Opaque compute may touch every buffer: merge it into each list, keeping the order.
    if (!ix.opaque.empty())
      for (auto& [name, v] : ix.by_buffer) {
        std::vector<OpRef> merged;
        std::merge(v.begin(), v.end(), ix.opaque.begin(), ix.opaque.end(),
                   std::back_inserter(merged));
        v = std::move(merged);
      }
  }
  auto it = ix.by_buffer.find(buffer);
  return it == ix.by_buffer.end() ? ix.opaque : it->second;
}

const MatchGroup* Dataflow::group(OpRef r) const {
  int g = m_.group_of(r);
  return g < 0 ? nullptr : &m_.groups[g];
}

bool Dataflow::is_output(int32_t rank, const std::string& buffer) const {
  const auto& outs = s_.ranks[rank].outputs;
  return outs.empty() || std::find(outs.begin(), outs.end(), buffer) != outs.end();
}

namespace {
bool touches(const std::vector<Slice>& v, const Slice& s) {
  for (const Slice& x : v)
    if (x.overlaps(s)) return true;
  return false;
}
}  // namespace

Uses Dataflow::uses_after(OpRef at, const Slice& slice) const {
  Uses u;
  struct Touch {
    OpRef ref;
    Access acc;
  };
  std::vector<Touch> after;
  for (const OpRef& o : touching(at.rank, slice.buffer)) {
    if (o == at) continue;
    Access acc = access_of(s_, at.rank, s_.op(o));
    if (!acc.any && !touches(acc.reads, slice) && !touches(acc.writes, slice)) continue;
    if (hb_.before(o, at)) continue;
    if (!hb_.before(at, o)) {
      u.unordered.push_back(o);
      continue;
    }
    if (acc.any) {
      u.opaque.push_back(o);
      continue;
    }
    after.push_back({o, std::move(acc)});
  }
  for (const Touch& r : after) {
    ElemSet e;
    for (const Slice& x : r.acc.reads)
      if (x.overlaps(slice))
        e.add(std::max(x.offset, slice.offset), std::min(x.end(), slice.end()));
    if (e.empty()) continue;
    for (const Touch& w : after) {
      if (w.ref == r.ref) continue;
      bool hit = false;
      for (const Slice& x : w.acc.writes)
        if (x.buffer == slice.buffer && !e.intersect(x.offset, x.end()).empty()) hit = true;
      if (!hit) continue;
      if (hb_.before(w.ref, r.ref)) {
        for (const Slice& x : w.acc.writes)
          if (x.buffer == slice.buffer) e.subtract(x.offset, x.end());
      } else if (!hb_.before(r.ref, w.ref)) {
        u.unordered.push_back(w.ref);
      }
    }
    if (!e.empty()) u.readers.push_back({r.ref, std::move(e)});
  }
  if (is_output(at.rank, slice.buffer)) {
    ElemSet e = ElemSet::of(slice);
    for (const Touch& w : after)
      for (const Slice& x : w.acc.writes)
        if (x.buffer == slice.buffer) e.subtract(x.offset, x.end());
    u.live_at_end = std::move(e);
  }
  return u;
}

std::vector<OpRef> Dataflow::writers_between(OpRef a, OpRef b, const Slice& slice) const {
  std::vector<OpRef> out;
  for (const OpRef& o : touching(a.rank, slice.buffer)) {
    if (o == a || o == b) continue;
    Access acc = access_of(s_, a.rank, s_.op(o));
    if (!acc.any && !touches(acc.writes, slice)) continue;
    if (hb_.before(o, a) || hb_.before(b, o)) continue;
    out.push_back(o);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Costs

namespace {
analysis::Algorithm wire_algo(CollOp op) {
  switch (op) {
    case CollOp::Send:
    case CollOp::Recv:
    case CollOp::AllToAll:
    case CollOp::ManyToMany:
      return analysis::Algorithm::Direct;
    default:
      return analysis::Algorithm::Ring;
  }
}
}  // namespace

int64_t wire_bytes(const Schedule& s, const Collective& c, int32_t rank) {
  (void)rank;
  if (c.op == CollOp::Recv) return 0;
  const Comm* comm = s.find_comm(c.comm);
  const int n = comm ? static_cast<int>(comm->ranks.size()) : 1;
  double f = analysis::wire_factor(c.op, n, wire_algo(c.op));
  return static_cast<int64_t>(std::llround(f * static_cast<double>(collective_bytes(s, c))));
}

int64_t group_wire_bytes(const Schedule& s, const MatchGroup& g) {
  int64_t most = 0;
  for (const OpRef& r : g.members)
    most = std::max(most, wire_bytes(s, *s.op(r).collective(), r.rank));
  return most;
}

Ns group_ns(const Schedule& s, const MatchGroup& g, const analysis::CostModel& cm) {
  const Collective& c0 = *s.op(g.members.front()).collective();
  if (c0.op == CollOp::Send || c0.op == CollOp::Recv) {
    std::vector<int32_t> members{g.members[0].rank, g.members[1].rank};
    return cm.collective_ns(CollOp::Send, collective_bytes(s, c0), 2, c0.comm, members);
  }
  const Comm* comm = s.find_comm(c0.comm);
  std::vector<int32_t> members = comm ? comm->ranks : std::vector<int32_t>{};
  int64_t bytes = 0;
  for (const OpRef& r : g.members)
    bytes = std::max(bytes, collective_bytes(s, *s.op(r).collective()));
  return cm.collective_ns(c0.op, bytes, static_cast<int>(members.size()), c0.comm, members);
}

// ---------------------------------------------------------------------------------------------
// Edits

OpRef must_find(const Schedule& s, int64_t id) {
  auto r = s.find_op(id);
  if (!r)
    throw Error(ErrorCode::Usage, "op " + std::to_string(id) +
                                      " is not in the schedule (the finding was made on another "
                                      "version of it)");
  return *r;
}

Op remove_op(Schedule& s, int64_t id) {
  OpRef r = must_find(s, id);
  auto& ops = s.ranks[r.rank].streams[r.stream].ops;
  Op op = std::move(ops[r.index]);
  ops.erase(ops.begin() + r.index);
  return op;
}

void insert_op(Schedule& s, int32_t rank, int32_t stream, int32_t index, Op op) {
  auto& ops = s.ranks[rank].streams[stream].ops;
  ops.insert(ops.begin() + std::clamp<int32_t>(index, 0, static_cast<int32_t>(ops.size())),
             std::move(op));
}

Op make_op(int64_t& next, decltype(Op::body) body, std::vector<int64_t> replaces) {
  Op op;
  op.id = next++;
  op.body = std::move(body);
  std::sort(replaces.begin(), replaces.end());
  replaces.erase(std::unique(replaces.begin(), replaces.end()), replaces.end());
  op.replaces = std::move(replaces);
  return op;
}

std::string fresh_event(const Schedule& s, int32_t rank, const std::string& stem) {
  auto used = [&](const std::string& name) {
    for (const Stream& st : s.ranks[rank].streams)
      for (const Op& op : st.ops) {
        if (const Record* e = op.record(); e && e->event == name) return true;
        if (const Wait* w = op.wait(); w && w->event == name) return true;
      }
    return false;
  };
  std::string name = stem;
  for (int i = 1; used(name); ++i) name = stem + "." + std::to_string(i);
  return name;
}

std::string fresh_comm(const Schedule& s, const std::string& stem) {
  std::string name = stem;
  for (int i = 1; s.find_comm(name); ++i) name = stem + "." + std::to_string(i);
  return name;
}

std::string fresh_stream(const Schedule& s, int32_t rank, const std::string& stem) {
  auto used = [&](const std::string& name) {
    for (const Stream& st : s.ranks[rank].streams)
      if (st.name == name) return true;
    return false;
  };
  std::string name = stem;
  for (int i = 1; used(name); ++i) name = stem + "." + std::to_string(i);
  return name;
}

std::string op_name(const Op& op) {
  if (const Compute* c = op.compute()) return "compute '" + short_label(c->label) + "'";
  if (const Collective* c = op.collective()) {
    std::string t = std::string(to_string(c->op));
    if (!c->label.empty()) t += " '" + c->label + "'";
    return t + " on '" + c->comm + "'";
  }
  return std::string(to_string(op.kind()));
}

}  // namespace braid::fusion

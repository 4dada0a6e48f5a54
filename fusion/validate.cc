#include "fusion/validate.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "fusion/symmetry.h"

namespace braid::fusion {

namespace {

using Problems = std::vector<std::string>;

std::string q(std::string_view s) { return "'" + std::string(s) + "'"; }

bool is_p2p(CollOp op) { return op == CollOp::Send || op == CollOp::Recv; }

// ---------------------------------------------------------------------------------------------
// Structure, slices, per-op shapes

// What a schedule's dtypes may be (trace/model.h dtype_size knows them; normalized names).
constexpr std::string_view kKnownDtypes =
    "float64, float32, float16, bfloat16, float8_e4m3, float8_e5m2, int64, int32, int16, int8, "
    "uint64, uint32, uint8, bool";

// A rank's buffers by name (the first of a name, as RankSchedule::find_buffer).
using BufferIndex = std::unordered_map<std::string_view, const Buffer*>;

void check_slice(const Schedule& s, const RankSchedule& r, const BufferIndex& bufs, OpRef ref,
                 const Slice& sl, const char* what, const std::string& dtype, Problems& out) {
  auto found = bufs.find(sl.buffer);
  const Buffer* b = found == bufs.end() ? nullptr : found->second;
  // Built only for a problem: describing every op made validation allocation-bound.
  auto where = [&] { return describe(s, ref) + ": " + what + " "; };
  if (!b) {
    out.push_back(where() + "names buffer " + q(sl.buffer) + ", which rank " +
                  std::to_string(r.rank) + " does not have");
    return;
  }
  if (sl.offset < 0 || sl.count < 0 || sl.offset > b->size || sl.count > b->size - sl.offset)
    out.push_back(where() + "slice [" + std::to_string(sl.offset) + ", " +
                  std::to_string(sl.offset + sl.count) + ") is out of bounds of buffer " +
                  q(b->name) + " (size " + std::to_string(b->size) + ")");
  if (!dtype.empty() && b->dtype != dtype)
    out.push_back(where() + "buffer " + q(b->name) + " has dtype " + q(b->dtype) +
                  ", the collective " + q(dtype));
}

// `want`: the slice's required count, or -1 when the slice must be absent.
void expect_slice(const Schedule& s, OpRef ref, const Slice& sl, const char* name, int64_t want,
                  Problems& out) {
  auto where = [&] { return describe(s, ref) + ": "; };
  if (want < 0) {
    if (!sl.empty()) out.push_back(where() + "'" + name + "' must be absent on this rank");
    return;
  }
  if (sl.empty()) {
    out.push_back(where() + "missing '" + name + "' slice");
  } else if (sl.count != want) {
    out.push_back(where() + "'" + name + "' has " + std::to_string(sl.count) +
                  " elements, expected " + std::to_string(want));
  }
}

void check_collective(const Schedule& s, const RankSchedule& r, const BufferIndex& bufs, OpRef ref,
                      const Collective& c, Problems& out) {
  auto where = [&] { return describe(s, ref) + ": "; };
  const Comm* comm = s.find_comm(c.comm);
  if (!comm) {
    out.push_back(where() + "unknown communicator " + q(c.comm));
    return;
  }
  if (comm->index_of(r.rank) < 0) {
    out.push_back(where() + "rank " + std::to_string(r.rank) + " is not a member of " + q(c.comm));
    return;
  }
  if (c.dtype.empty()) out.push_back(where() + "empty dtype");
  else if (dtype_size(c.dtype) <= 0)
    out.push_back(where() + "dtype " + q(c.dtype) + " is not one braid knows (" +
                  std::string(kKnownDtypes) + ")");
  if (c.count < 0) out.push_back(where() + "negative count");
  if (!c.in.empty()) check_slice(s, r, bufs, ref, c.in, "'in'", c.dtype, out);
  if (!c.out.empty()) check_slice(s, r, bufs, ref, c.out, "'out'", c.dtype, out);

  const int64_t n = static_cast<int64_t>(comm->ranks.size()), k = c.count;
  const bool uses_root = c.op == CollOp::Broadcast || c.op == CollOp::Reduce;
  if (uses_root) {
    if (comm->index_of(c.root) < 0)
      out.push_back(where() + "root " + std::to_string(c.root) + " is not a member of " +
                    q(c.comm));
  } else if (c.root != -1) {
    out.push_back(where() + "'root' does not apply to " + std::string(to_string(c.op)));
  }
  if (is_p2p(c.op)) {
    if (c.peer == r.rank)
      out.push_back(where() + "peer is the rank itself");
    else if (comm->index_of(c.peer) < 0)
      out.push_back(where() + "peer " + std::to_string(c.peer) + " is not a member of " +
                    q(c.comm));
  } else if (c.peer != -1) {
    out.push_back(where() + "'peer' does not apply to " + std::string(to_string(c.op)));
  }
  if (c.op != CollOp::ManyToMany && (!c.sends.empty() || !c.recvs.empty()))
    out.push_back(where() + "'sends'/'recvs' apply only to manytomany");

  const bool root = r.rank == c.root;
  switch (c.op) {
    case CollOp::AllReduce:
      expect_slice(s, ref, c.in, "in", k, out);
      expect_slice(s, ref, c.out, "out", k, out);
      break;
    case CollOp::AllGather:
      expect_slice(s, ref, c.in, "in", k, out);
      expect_slice(s, ref, c.out, "out", n * k, out);
      break;
    case CollOp::ReduceScatter:
      expect_slice(s, ref, c.in, "in", n * k, out);
      expect_slice(s, ref, c.out, "out", k, out);
      break;
    case CollOp::Broadcast:
      expect_slice(s, ref, c.in, "in", root ? k : -1, out);
      expect_slice(s, ref, c.out, "out", k, out);
      break;
    case CollOp::Reduce:
      expect_slice(s, ref, c.in, "in", k, out);
      expect_slice(s, ref, c.out, "out", root ? k : -1, out);
      break;
    case CollOp::AllToAll:
      expect_slice(s, ref, c.in, "in", n * k, out);
      expect_slice(s, ref, c.out, "out", n * k, out);
      break;
    case CollOp::Send:
      expect_slice(s, ref, c.in, "in", k, out);
      expect_slice(s, ref, c.out, "out", -1, out);
      break;
    case CollOp::Recv:
      expect_slice(s, ref, c.in, "in", -1, out);
      expect_slice(s, ref, c.out, "out", k, out);
      break;
    case CollOp::ManyToMany: {
      if (k != 0) out.push_back(where() + "count must be 0 for manytomany (counts are per peer)");
      auto chunks = [&](const std::vector<PeerChunk>& v, const Slice& sl, const char* what) {
        if (!v.empty() && sl.empty())
          out.push_back(where() + "has " + what + " but no '" +
                        (what == std::string("sends") ? "in" : "out") + "' slice");
        for (const PeerChunk& p : v) {
          std::string pw = where() + what + " chunk for peer " + std::to_string(p.peer) + " ";
          if (p.peer == r.rank)
            out.push_back(pw + "is the rank itself (copy locally with compute instead)");
          else if (comm->index_of(p.peer) < 0)
            out.push_back(pw + "is not a member of " + q(c.comm));
          if (p.offset < 0 || p.count < 0 || (!sl.empty() && p.offset + p.count > sl.count))
            out.push_back(pw + "[" + std::to_string(p.offset) + ", " +
                          std::to_string(p.offset + p.count) + ") is outside the slice (" +
                          std::to_string(sl.count) + " elements)");
        }
      };
      chunks(c.sends, c.in, "sends");
      chunks(c.recvs, c.out, "recvs");
      break;
    }
    default:
      out.push_back(where() + "unsupported collective op " + q(to_string(c.op)));
  }
}

// What is wrong with a compute's row-wise fields and fn (docs/schedule-ir.md), empty when
// nothing.
std::string row_problem(const Compute& c) {
  if (c.fn == "add") {
    if (c.row_wise() || !c.read_rows.empty() || c.sum_rows || !c.transpose.empty() ||
        !c.transposed_reads.empty())
      return "fn \"add\" takes no row fields";
    for (const Slice& sl : c.reads)
      for (const Slice& w : c.writes)
        if (sl.count != w.count) return "fn \"add\" needs reads and writes of one count";
    return "";
  }
  if (!c.fn.empty()) return "unknown fn " + q(c.fn);
  if (!c.row_wise()) {
    if (!c.read_rows.empty() || c.sum_rows || !c.transpose.empty() || !c.transposed_reads.empty())
      return "read_rows, transpose or sum_rows without write_rows";
    return "";
  }
  if (c.opaque) return "opaque compute cannot be row-wise";
  if (c.read_rows.size() != c.reads.size() || c.write_rows.size() != c.writes.size())
    return "read_rows / write_rows need one entry per read / write";
  auto rows_of = [](const Slice& sl, int64_t n, bool whole_ok) -> std::string {
    if (n < 0 || (n == 0 && !whole_ok)) return "row count " + std::to_string(n);
    if (n > 0 && sl.count % n != 0)
      return "slice of " + std::to_string(sl.count) + " elements is not " + std::to_string(n) +
             " whole rows";
    return "";
  };
  for (size_t k = 0; k < c.reads.size(); ++k)
    if (std::string why = rows_of(c.reads[k], c.read_rows[k], true); !why.empty())
      return "read " + std::to_string(k) + ": " + why;
  if (c.sum_rows) {
    if (!c.transpose.empty() || !c.transposed_reads.empty()) return "sum_rows takes no transpose";
    int64_t n = -1;
    for (int64_t r : c.read_rows)
      if (r > 0) {
        if (n >= 0 && r != n) return "sum_rows needs every per-row read to have the same rows";
        n = r;
      }
    if (n < 0) return "sum_rows needs a per-row read";
    for (int64_t w : c.write_rows)
      if (w != 1) return "sum_rows writes are one row each (write_rows 1)";
    return "";
  }
  int64_t blocks = 1;
  if (!c.transpose.empty()) {
    if (c.transpose.size() != 2 || c.transpose[0] < 1 || c.transpose[1] < 1)
      return "transpose needs two positive block counts";
    blocks = c.transpose[0] * c.transpose[1];
    if (c.transposed_reads.empty()) return "transpose without transposed_reads";
  }
  for (int64_t k : c.transposed_reads)
    if (c.transpose.empty() || k < 0 || k >= static_cast<int64_t>(c.reads.size()) ||
        c.read_rows[k] == 0)
      return "transposed_reads names " + std::to_string(k) +
             ", which is not a per-row read of a transposed op";
  for (size_t w = 0; w < c.writes.size(); ++w) {
    if (std::string why = rows_of(c.writes[w], c.write_rows[w], false); !why.empty())
      return "write " + std::to_string(w) + ": " + why;
    const int64_t rw = c.write_rows[w];
    if (rw % blocks)
      return "write " + std::to_string(w) + ": rows not divisible into the transpose's blocks";
    for (size_t k = 0; k < c.reads.size(); ++k) {
      const int64_t rk = c.read_rows[k];
      if (rk == 0) continue;
      if (rk % blocks)
        return "read " + std::to_string(k) + ": rows not divisible into the transpose's blocks";
      if (rk % rw && rw % rk)
        return "read " + std::to_string(k) + " (" + std::to_string(rk) + " rows) and write " +
               std::to_string(w) + " (" + std::to_string(rw) + " rows): neither divides the other";
    }
  }
  return "";
}

// What is wrong with `replicated` (Buffer / Compute) on rank `ri`, empty when nothing.
std::string replicated_problem(const Schedule& s, int32_t ri, const std::string& comm) {
  if (comm.empty()) return "";
  const Comm* c = s.find_comm(comm);
  if (c && c->index_of(ri) >= 0) return "";
  return "replicated over " + q(comm) + ", " +
         (c ? "which this rank is not a member of" : "an unknown communicator");
}

void check_structure(const Schedule& s, Problems& out) {
  const int32_t nranks = static_cast<int32_t>(s.ranks.size());
  std::set<std::string> comm_ids;
  for (const Comm& c : s.comms) {
    if (c.id.empty()) out.push_back("communicator with an empty id");
    if (!comm_ids.insert(c.id).second)
      out.push_back("communicator " + q(c.id) + " is defined twice");
    if (c.ranks.empty()) out.push_back("communicator " + q(c.id) + " has no ranks");
    std::set<int32_t> seen;
    for (int32_t r : c.ranks) {
      if (r < 0 || r >= nranks)
        out.push_back("communicator " + q(c.id) + " names rank " + std::to_string(r) +
                      ", but the schedule has ranks 0.." + std::to_string(nranks - 1));
      if (!seen.insert(r).second)
        out.push_back("communicator " + q(c.id) + " lists rank " + std::to_string(r) + " twice");
    }
  }
  std::map<int64_t, OpRef> ids;
  for (int32_t ri = 0; ri < nranks; ++ri) {
    const RankSchedule& r = s.ranks[ri];
    std::string rn = "rank " + std::to_string(ri);
    if (r.rank != ri) out.push_back(rn + " is numbered " + std::to_string(r.rank));
    std::set<std::string> names;
    for (const Buffer& b : r.buffers) {
      if (b.name.empty()) out.push_back(rn + ": buffer with an empty name");
      if (!names.insert(b.name).second)
        out.push_back(rn + ": buffer " + q(b.name) + " is declared twice");
      if (b.size < 0) out.push_back(rn + ": buffer " + q(b.name) + " has a negative size");
      if (dtype_size(b.dtype) <= 0)
        out.push_back(rn + ": buffer " + q(b.name) + " has dtype " + q(b.dtype) +
                      ", not one braid knows (" + std::string(kKnownDtypes) + ")");
      if (std::string why = replicated_problem(s, ri, b.replicated); !why.empty())
        out.push_back(rn + ": buffer " + q(b.name) + " is " + why);
    }
    for (const std::string& o : r.outputs)
      if (!names.count(o)) out.push_back(rn + ": output " + q(o) + " is not a declared buffer");
    names.clear();
    BufferIndex bufs;
    for (const Buffer& b : r.buffers) bufs.emplace(b.name, &b);
    std::set<std::string> records;
    for (int32_t si = 0; si < static_cast<int32_t>(r.streams.size()); ++si) {
      const Stream& st = r.streams[si];
      if (!names.insert(st.name).second)
        out.push_back(rn + ": stream name " + q(st.name) + " is used twice");
      for (int32_t i = 0; i < static_cast<int32_t>(st.ops.size()); ++i) {
        const Op& op = st.ops[i];
        OpRef ref{ri, si, i};
        auto where = [&] { return describe(s, ref) + ": "; };
        if (op.id < 0) out.push_back(where() + "negative id");
        auto [it, fresh] = ids.emplace(op.id, ref);
        if (!fresh)
          out.push_back(where() + "id " + std::to_string(op.id) + " is also used by " +
                        describe(s, it->second));
        if (const Compute* c = op.compute()) {
          if (c->duration_ns < 0) out.push_back(where() + "negative duration");
          if (std::string why = replicated_problem(s, ri, c->replicated); !why.empty())
            out.push_back(where() + why);
          if (c->opaque && !c->replicated.empty())
            out.push_back(where() + "opaque compute cannot be replicated");
          if (std::string why = row_problem(*c); !why.empty()) out.push_back(where() + why);
          for (const Slice& sl : c->reads) check_slice(s, r, bufs, ref, sl, "read", "", out);
          for (const Slice& sl : c->writes) check_slice(s, r, bufs, ref, sl, "write", "", out);
        } else if (const Collective* c = op.collective()) {
          check_collective(s, r, bufs, ref, *c, out);
        } else if (const Delay* d = op.delay()) {
          if (d->duration_ns < 0) out.push_back(where() + "negative duration");
        } else if (const Record* e = op.record()) {
          if (e->event.empty()) out.push_back(where() + "empty event name");
          if (!records.insert(e->event).second)
            out.push_back(where() + "event " + q(e->event) + " is recorded twice on " + rn +
                          " (events are single-assignment)");
        } else if (const Wait* w = op.wait()) {
          if (w->event.empty()) out.push_back(where() + "empty event name");
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Local order per rank: stream order + record -> wait edges.

struct RankOrder {
  std::vector<int> base;       // flat index of each stream's first op
  std::vector<OpRef> refs;     // flat index -> op
  std::vector<int> record_of;  // flat index of a wait -> flat index of its record, or -1
  std::vector<int> topo;       // flat indices in a deterministic topological order
  std::vector<std::vector<int32_t>> clock;  // vector clock per flat index
  bool cyclic = false;

  int flat(OpRef r) const { return base[r.stream] + r.index; }
  // True when a happens before b (or a == b) on this rank.
  bool before(OpRef a, OpRef b) const { return clock[flat(b)][a.stream] >= a.index + 1; }
};

RankOrder order_rank(const Schedule& s, int32_t ri, Problems* out) {
  const RankSchedule& r = s.ranks[ri];
  RankOrder o;
  const int nstreams = static_cast<int>(r.streams.size());
  for (int si = 0; si < nstreams; ++si) {
    o.base.push_back(static_cast<int>(o.refs.size()));
    for (int i = 0; i < static_cast<int>(r.streams[si].ops.size()); ++i)
      o.refs.push_back({ri, si, i});
  }
  const int n = static_cast<int>(o.refs.size());
  std::map<std::string, int> records;
  for (int v = 0; v < n; ++v)
    if (const Record* e = s.op(o.refs[v]).record()) records.emplace(e->event, v);
  o.record_of.assign(n, -1);
  std::vector<std::vector<int>> succ(n);
  std::vector<int> indeg(n, 0);
  for (int v = 0; v < n; ++v) {
    if (o.refs[v].index > 0) {
      succ[v - 1].push_back(v);
      ++indeg[v];
    }
    if (const Wait* w = s.op(o.refs[v]).wait()) {
      auto it = records.find(w->event);
      if (it == records.end()) {
        if (out)
          out->push_back(describe(s, o.refs[v]) + ": waits for event " + q(w->event) +
                         ", which no stream of rank " + std::to_string(ri) + " records");
      } else {
        o.record_of[v] = it->second;
        succ[it->second].push_back(v);
        ++indeg[v];
      }
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int v = 0; v < n; ++v)
    if (indeg[v] == 0) ready.push(v);
  std::vector<bool> done(n, false);
  while (!ready.empty()) {
    int v = ready.top();
    ready.pop();
    done[v] = true;
    o.topo.push_back(v);
    for (int w : succ[v])
      if (--indeg[w] == 0) ready.push(w);
  }
  if (static_cast<int>(o.topo.size()) < n) {
    o.cyclic = true;
    for (int v = 0; v < n; ++v) {
      if (done[v]) continue;
      o.topo.push_back(v);
      int rec = o.record_of[v];
      if (out && rec >= 0 && !done[rec])
        out->push_back(describe(s, o.refs[v]) + ": waits for event " +
                       q(s.op(o.refs[v]).wait()->event) +
                       ", which is recorded only after the "
                       "wait can complete (by " +
                       describe(s, o.refs[rec]) + ")");
    }
  }
  o.clock.assign(n, std::vector<int32_t>(nstreams, 0));
  for (int v : o.topo) {
    auto& c = o.clock[v];
    const OpRef& ref = o.refs[v];
    if (ref.index > 0) c = o.clock[v - 1];
    if (o.record_of[v] >= 0) {
      const auto& rc = o.clock[o.record_of[v]];
      for (int k = 0; k < nstreams; ++k) c[k] = std::max(c[k], rc[k]);
    }
    c[ref.stream] = ref.index + 1;
  }
  return o;
}

// ---------------------------------------------------------------------------------------------
// Matching

struct Analysis {
  std::vector<RankOrder> orders;
  Matching matching;
  bool any_cyclic = false;
};

std::string shape(const Collective& c) {
  std::string t =
      std::string(to_string(c.op)) + " count " + std::to_string(c.count) + " dtype " + q(c.dtype);
  if (c.op == CollOp::Broadcast || c.op == CollOp::Reduce) t += " root " + std::to_string(c.root);
  return t;
}

Analysis analyze(const Schedule& s, Problems* out) {
  Analysis a;
  Matching& m = a.matching;
  const int32_t nranks = static_cast<int32_t>(s.ranks.size());
  m.group_index.resize(nranks);
  for (int32_t ri = 0; ri < nranks; ++ri) {
    a.orders.push_back(order_rank(s, ri, out));
    a.any_cyclic = a.any_cyclic || a.orders.back().cyclic;
    for (const Stream& st : s.ranks[ri].streams) m.group_index[ri].emplace_back(st.ops.size(), -1);
  }
  // Per (comm, rank): every op on the communicator, and its collectives, in local order.
  std::map<std::pair<std::string, int32_t>, std::vector<OpRef>> all_ops, colls;
  // Per (comm, src, dst): sends at src and recvs at dst.
  std::map<std::tuple<std::string, int32_t, int32_t>,
           std::pair<std::vector<OpRef>, std::vector<OpRef>>>
      channels;
  for (int32_t ri = 0; ri < nranks; ++ri) {
    const RankOrder& o = a.orders[ri];
    for (int v : o.topo) {
      OpRef ref = o.refs[v];
      const Collective* c = s.op(ref).collective();
      if (!c) continue;
      const Comm* comm = s.find_comm(c->comm);
      if (!comm || comm->index_of(ri) < 0) continue;
      all_ops[{c->comm, ri}].push_back(ref);
      if (!is_p2p(c->op)) {
        colls[{c->comm, ri}].push_back(ref);
      } else if (c->peer != ri && comm->index_of(c->peer) >= 0) {
        if (c->op == CollOp::Send)
          channels[{c->comm, ri, c->peer}].first.push_back(ref);
        else
          channels[{c->comm, c->peer, ri}].second.push_back(ref);
      }
    }
  }
  auto problem = [&](std::string p) {
    m.problems.push_back(p);
    if (out) out->push_back(std::move(p));
  };
  // The order of a communicator's ops on one rank must not depend on stream timing.
  for (const auto& [key, refs] : all_ops) {
    const RankOrder& o = a.orders[key.second];
    if (o.cyclic) continue;
    for (size_t i = 1; i < refs.size(); ++i)
      if (!o.before(refs[i - 1], refs[i]))
        problem(describe(s, refs[i - 1]) + " and " + describe(s, refs[i]) + " use communicator " +
                q(key.first) +
                " but are not ordered by stream order or "
                "events, so their order on the communicator is ambiguous");
  }
  auto add_group = [&](MatchGroup g) {
    int gi = static_cast<int>(m.groups.size());
    for (const OpRef& r : g.members) m.group_index[r.rank][r.stream][r.index] = gi;
    m.groups.push_back(std::move(g));
  };
  for (const Comm& comm : s.comms) {
    size_t most = 0;
    for (int32_t r : comm.ranks) {
      auto it = colls.find({comm.id, r});
      if (it != colls.end()) most = std::max(most, it->second.size());
    }
    for (size_t k = 0; k < most; ++k) {
      std::vector<OpRef> members;
      std::vector<int32_t> missing;
      for (int32_t r : comm.ranks) {
        // An image rank runs its representative's op on this communicator (its own image,
        // symmetry_problems checks): the group is seen through the stored members.
        if (!s.symmetry.stored(r)) continue;
        auto it = colls.find({comm.id, r});
        if (it != colls.end() && it->second.size() > k)
          members.push_back(it->second[k]);
        else
          missing.push_back(r);
      }
      const Collective& first = *s.op(members.front()).collective();
      if (!missing.empty()) {
        for (int32_t r : missing) {
          auto it = colls.find({comm.id, r});
          size_t have = it == colls.end() ? 0 : it->second.size();
          problem(describe(s, members.front()) + " is collective #" + std::to_string(k) +
                  " on communicator " + q(comm.id) + ", but rank " + std::to_string(r) +
                  " has no partner for it (rank " + std::to_string(r) + " has " +
                  std::to_string(have) + " collectives on " + q(comm.id) + ")");
        }
        continue;
      }
      for (size_t i = 1; i < members.size(); ++i) {
        const Collective& c = *s.op(members[i]).collective();
        if (c.op != first.op || c.count != first.count || c.dtype != first.dtype ||
            ((c.op == CollOp::Broadcast || c.op == CollOp::Reduce) && c.root != first.root))
          problem("collective #" + std::to_string(k) + " on communicator " + q(comm.id) +
                  " does not match: " + describe(s, members.front()) + " is " + shape(first) +
                  ", " + describe(s, members[i]) + " is " + shape(c));
      }
      if (first.op == CollOp::ManyToMany) {
        // Rank a's j-th send chunk to b pairs with b's j-th recv chunk from a.
        for (const OpRef& ra : members)
          for (const OpRef& rb : members) {
            if (ra.rank == rb.rank) continue;
            const Collective& ca = *s.op(ra).collective();
            const Collective& cb = *s.op(rb).collective();
            std::vector<int64_t> sent, got;
            for (const PeerChunk& p : ca.sends)
              if (p.peer == rb.rank) sent.push_back(p.count);
            for (const PeerChunk& p : cb.recvs)
              if (p.peer == ra.rank) got.push_back(p.count);
            if (sent != got) {
              auto list = [](const std::vector<int64_t>& v) {
                std::string t = "[";
                for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
                return t + "]";
              };
              problem("manytomany #" + std::to_string(k) + " on communicator " + q(comm.id) +
                      ": rank " + std::to_string(ra.rank) + " sends chunks of " + list(sent) +
                      " elements to rank " + std::to_string(rb.rank) + ", which receives " +
                      list(got) + " from it");
            }
          }
      }
      add_group(MatchGroup{first.op, comm.id, static_cast<int64_t>(k), std::move(members)});
    }
  }
  for (const auto& [key, lists] : channels) {
    const auto& [comm, src, dst] = key;
    const auto& [sends, recvs] = lists;
    size_t both = std::min(sends.size(), recvs.size());
    for (size_t k = 0; k < both; ++k) {
      const Collective& a1 = *s.op(sends[k]).collective();
      const Collective& b1 = *s.op(recvs[k]).collective();
      if (a1.count != b1.count || a1.dtype != b1.dtype)
        problem(describe(s, sends[k]) + " (count " + std::to_string(a1.count) + " dtype " +
                q(a1.dtype) + ") is matched with " + describe(s, recvs[k]) + " (count " +
                std::to_string(b1.count) + " dtype " + q(b1.dtype) + ")");
      add_group(MatchGroup{CollOp::Send, comm, static_cast<int64_t>(k), {sends[k], recvs[k]}});
    }
    for (size_t k = both; k < sends.size(); ++k)
      problem(describe(s, sends[k]) + " is send #" + std::to_string(k) + " from rank " +
              std::to_string(src) + " to rank " + std::to_string(dst) + " on " + q(comm) +
              ", but rank " + std::to_string(dst) + " has no matching recv");
    for (size_t k = both; k < recvs.size(); ++k)
      problem(describe(s, recvs[k]) + " is recv #" + std::to_string(k) + " from rank " +
              std::to_string(src) + " on " + q(comm) + ", but rank " + std::to_string(src) +
              " has no matching send");
  }
  return a;
}

// ---------------------------------------------------------------------------------------------
// Deadlock: a cycle in the job-wide happens-before graph, where each matched group is one node.

void check_deadlock(const Schedule& s, const Analysis& a, Problems& out) {
  const int32_t nranks = static_cast<int32_t>(s.ranks.size());
  std::vector<int> rank_base;
  int n = 0;
  for (int32_t ri = 0; ri < nranks; ++ri) {
    rank_base.push_back(n);
    n += static_cast<int>(a.orders[ri].refs.size());
  }
  auto gid = [&](OpRef r) { return rank_base[r.rank] + a.orders[r.rank].flat(r); };
  // Node of each op: its group's node (n + group index) or its own index.
  std::vector<int> node(n);
  std::vector<OpRef> rep(n + a.matching.groups.size());
  for (int32_t ri = 0; ri < nranks; ++ri)
    for (const OpRef& r : a.orders[ri].refs) {
      int g = a.matching.group_of(r);
      node[gid(r)] = g >= 0 ? n + g : gid(r);
      rep[gid(r)] = r;
    }
  for (size_t g = 0; g < a.matching.groups.size(); ++g)
    rep[n + g] = a.matching.groups[g].members[0];
  const int total = n + static_cast<int>(a.matching.groups.size());
  std::vector<std::vector<int>> succ(total), pred(total);
  std::vector<int> indeg(total, 0);
  auto edge = [&](int u, int v) {
    succ[u].push_back(v);
    pred[v].push_back(u);
    ++indeg[v];
  };
  std::vector<bool> used(total, false);
  for (int32_t ri = 0; ri < nranks; ++ri) {
    const RankOrder& o = a.orders[ri];
    for (size_t v = 0; v < o.refs.size(); ++v) {
      const OpRef& r = o.refs[v];
      int me = node[gid(r)];
      used[me] = true;
      if (r.index > 0) edge(node[gid(o.refs[v - 1])], me);
      if (o.record_of[v] >= 0) edge(node[gid(o.refs[o.record_of[v]])], me);
    }
  }
  std::vector<int> queue;
  for (int v = 0; v < total; ++v)
    if (used[v] && indeg[v] == 0) queue.push_back(v);
  std::vector<bool> done(total, false);
  for (size_t i = 0; i < queue.size(); ++i) {
    int v = queue[i];
    done[v] = true;
    for (int w : succ[v])
      if (--indeg[w] == 0) queue.push_back(w);
  }
  int start = -1;
  for (int v = 0; v < total && start < 0; ++v)
    if (used[v] && !done[v]) start = v;
  if (start < 0) return;
  // Every node left has a predecessor left: walk predecessors until one repeats.
  std::map<int, size_t> pos;
  std::vector<int> walk;
  int cur = start;
  while (!pos.count(cur)) {
    pos[cur] = walk.size();
    walk.push_back(cur);
    for (int p : pred[cur])
      if (!done[p]) {
        cur = p;
        break;
      }
  }
  std::vector<int> cycle(walk.begin() + static_cast<long>(pos[cur]), walk.end());
  std::reverse(cycle.begin(), cycle.end());
  auto name = [&](int v) {
    std::string t = describe(s, rep[v]);
    if (v >= n) {
      const MatchGroup& g = a.matching.groups[v - n];
      if (g.op == CollOp::Send) {
        t += " paired with " + describe(s, g.members[1]);
      } else {
        t += " [matched on ranks";
        for (const OpRef& r : g.members) t += " " + std::to_string(r.rank);
        t += "]";
      }
    }
    return t;
  };
  std::string msg =
      "deadlock: these ops wait for each other in a cycle (each must complete "
      "before the next can): ";
  for (size_t i = 0; i < cycle.size(); ++i) msg += (i ? " -> " : "") + name(cycle[i]);
  msg += " -> back to the first";
  out.push_back(msg);
}

}  // namespace

int Matching::group_of(OpRef r) const {
  if (r.rank < 0 || r.rank >= static_cast<int32_t>(group_index.size())) return -1;
  const auto& st = group_index[r.rank];
  if (r.stream < 0 || r.stream >= static_cast<int32_t>(st.size())) return -1;
  if (r.index < 0 || r.index >= static_cast<int32_t>(st[r.stream].size())) return -1;
  return st[r.stream][r.index];
}

Matching match_schedule_collectives(const Schedule& s) { return analyze(s, nullptr).matching; }

std::vector<std::string> validate(const Schedule& s, const ValidateOptions& opt,
                                  Matching* matching) {
  Problems out = symmetry_problems(s);
  check_structure(s, out);
  Analysis a = analyze(s, &out);
  // A local cycle is already reported, and the job-wide graph would report it again.
  if (opt.check_deadlock && !a.any_cyclic) check_deadlock(s, a, out);
  if (matching) *matching = std::move(a.matching);
  return out;
}

}  // namespace braid::fusion

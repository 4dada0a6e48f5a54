#include "fusion/ir.h"

#include <algorithm>
#include <cstdint>

#include "trace/error.h"

namespace braid::fusion {

std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::Compute:
      return "compute";
    case OpKind::Collective:
      return "collective";
    case OpKind::Delay:
      return "delay";
    case OpKind::Record:
      return "record";
    case OpKind::Wait:
      return "wait";
  }
  return "unknown";
}

bool Slice::overlaps(const Slice& o) const {
  return !empty() && buffer == o.buffer && count > 0 && o.count > 0 && offset < o.end() &&
         o.offset < end();
}

const Buffer* RankSchedule::find_buffer(std::string_view name) const {
  for (const Buffer& b : buffers)
    if (b.name == name) return &b;
  return nullptr;
}

int Comm::index_of(int32_t rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

const Comm* Schedule::find_comm(std::string_view id) const {
  for (const Comm& c : comms)
    if (c.id == id) return &c;
  return nullptr;
}

std::optional<OpRef> Schedule::find_op(int64_t id) const {
  auto holds = [this](OpRef r, int64_t want) {
    return r.rank >= 0 && r.rank < static_cast<int32_t>(ranks.size()) && r.stream >= 0 &&
           r.stream < static_cast<int32_t>(ranks[r.rank].streams.size()) && r.index >= 0 &&
           r.index < static_cast<int32_t>(ranks[r.rank].streams[r.stream].ops.size()) &&
           op(r).id == want;
  };
  auto scan_stream = [this](int32_t r, int32_t st, int64_t want) -> std::optional<OpRef> {
    const auto& ops = ranks[r].streams[st].ops;
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].id == want) return OpRef{r, st, static_cast<int32_t>(i)};
    return std::nullopt;
  };
  auto index_all = [this] {
    op_index_.clear();
    for (size_t r = 0; r < ranks.size(); ++r)
      for (size_t st = 0; st < ranks[r].streams.size(); ++st) {
        const auto& ops = ranks[r].streams[st].ops;
        for (size_t i = 0; i < ops.size(); ++i)
          op_index_[ops[i].id] = {static_cast<int32_t>(r), static_cast<int32_t>(st),
                                  static_cast<int32_t>(i)};
      }
  };
  if (op_index_.empty()) index_all();  // first use
  // The cached position is checked before it is trusted: edits move ops without telling. A
  // moved op is looked for on its stream first (inserts and removals shift it along it).
  auto it = op_index_.find(id);
  if (it != op_index_.end()) {
    if (holds(it->second, id)) return it->second;
    const OpRef was = it->second;
    if (was.rank >= 0 && was.rank < static_cast<int32_t>(ranks.size()) && was.stream >= 0 &&
        was.stream < static_cast<int32_t>(ranks[was.rank].streams.size())) {
      // Nearby first: an edit shifts the ops after it by a few places.
      const auto& ops = ranks[was.rank].streams[was.stream].ops;
      const int32_t n = static_cast<int32_t>(ops.size());
      for (int32_t d = 1; d <= 16; ++d)
        for (int32_t i : {was.index + d, was.index - d})
          if (i >= 0 && i < n && ops[i].id == id)
            return it->second = OpRef{was.rank, was.stream, i};
      if (auto at = scan_stream(was.rank, was.stream, id)) return it->second = *at;
    }
  }
  // Not indexed (an op added since) or gone: index every op again, so the ops a rewrite added
  // cost one pass together rather than one each.
  index_all();
  it = op_index_.find(id);
  if (it != op_index_.end()) return it->second;
  return std::nullopt;
}

int64_t Schedule::next_op_id() const {
  int64_t next = 0;
  for (const auto& r : ranks)
    for (const auto& st : r.streams)
      for (const auto& op : st.ops) next = std::max(next, op.id + 1);
  return next;
}

RankSchedule& Schedule::add_rank(int32_t rank) {
  while (static_cast<int32_t>(ranks.size()) <= rank) {
    RankSchedule r;
    r.rank = static_cast<int32_t>(ranks.size());
    ranks.push_back(std::move(r));
  }
  return ranks[rank];
}

int Schedule::add_stream(int32_t rank, std::string name) {
  auto& r = add_rank(rank);
  r.streams.push_back(Stream{std::move(name), {}});
  return static_cast<int>(r.streams.size()) - 1;
}

void Schedule::add_buffer(int32_t rank, std::string name, std::string dtype, int64_t size) {
  add_rank(rank).buffers.push_back(Buffer{std::move(name), std::move(dtype), size, {}});
}

size_t Schedule::op_count() const {
  size_t n = 0;
  for (const auto& r : ranks)
    for (const auto& st : r.streams) n += st.ops.size();
  return n;
}

int64_t& Schedule::op_id_counter() {
  const size_t n = op_count();
  const auto handed_out = static_cast<size_t>(id_counter_ - id_counter_checked_);
  if (id_counter_ops_ == SIZE_MAX || n > id_counter_ops_ + handed_out)
    id_counter_ = std::max(id_counter_, next_op_id());
  id_counter_checked_ = id_counter_;
  id_counter_ops_ = n;
  return id_counter_;
}

int64_t Schedule::append(int32_t rank, int stream, decltype(Op::body) body) {
  const int64_t id = op_id_counter()++;
  add_rank(rank).streams.at(stream).ops.push_back(Op{id, std::move(body), {}});
  return id;
}

Access access_of(const Schedule& s, int32_t rank, const Op& op) {
  Access a;
  if (const Compute* c = op.compute()) {
    a.reads = c->reads;
    a.writes = c->writes;
    a.any = c->opaque;
    return a;
  }
  const Collective* c = op.collective();
  if (!c) return a;
  auto add = [](std::vector<Slice>& v, const Slice& sl) {
    if (!sl.empty()) v.push_back(sl);
  };
  switch (c->op) {
    case CollOp::Broadcast:
      if (rank == c->root) add(a.reads, c->in);
      add(a.writes, c->out);
      break;
    case CollOp::Reduce:
      add(a.reads, c->in);
      if (rank == c->root) add(a.writes, c->out);
      break;
    case CollOp::ManyToMany:
      for (const PeerChunk& p : c->sends)
        if (!c->in.empty()) a.reads.push_back(c->in.sub(p.offset, p.count));
      for (const PeerChunk& p : c->recvs)
        if (!c->out.empty()) a.writes.push_back(c->out.sub(p.offset, p.count));
      break;
    default:
      add(a.reads, c->in);
      add(a.writes, c->out);
  }
  return a;
}

int64_t collective_elements(const Collective& c, int64_t comm_size) {
  switch (c.op) {
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::AllToAll:
      return comm_size * c.count;
    case CollOp::ManyToMany: {
      int64_t elems = 0;
      for (const PeerChunk& p : c.sends) elems += p.count;
      return elems;
    }
    default:
      return c.count;
  }
}

int64_t dtype_bytes_of(const std::string& dtype) {
  const int b = dtype_size(dtype);
  if (b <= 0)
    throw Error(ErrorCode::Internal, "dtype '" + dtype +
                                         "' is not one braid knows; validate() refuses a "
                                         "schedule that names it");
  return b;
}

int64_t collective_bytes(const Schedule& s, const Collective& c) {
  const Comm* comm = s.find_comm(c.comm);
  const int64_t n = comm ? static_cast<int64_t>(comm->ranks.size()) : 1;
  return collective_elements(c, n) * dtype_bytes_of(c.dtype);
}

namespace {

std::vector<OpRef> touching(const Schedule& s, int32_t rank, const Slice& slice, bool reads) {
  std::vector<OpRef> out;
  if (rank < 0 || rank >= static_cast<int32_t>(s.ranks.size())) return out;
  const auto& streams = s.ranks[rank].streams;
  for (size_t st = 0; st < streams.size(); ++st)
    for (size_t i = 0; i < streams[st].ops.size(); ++i) {
      Access a = access_of(s, rank, streams[st].ops[i]);
      bool hit = a.any;
      for (const Slice& x : reads ? a.reads : a.writes) hit = hit || x.overlaps(slice);
      if (hit) out.push_back({rank, static_cast<int32_t>(st), static_cast<int32_t>(i)});
    }
  return out;
}

}  // namespace

std::vector<OpRef> consumers_of(const Schedule& s, int32_t rank, const Slice& slice) {
  return touching(s, rank, slice, true);
}

std::vector<OpRef> producers_of(const Schedule& s, int32_t rank, const Slice& slice) {
  return touching(s, rank, slice, false);
}

std::string describe(const Schedule& s, OpRef r) {
  std::string out = "rank " + std::to_string(r.rank);
  if (r.rank < 0 || r.rank >= static_cast<int32_t>(s.ranks.size())) return out;
  const auto& streams = s.ranks[r.rank].streams;
  if (r.stream < 0 || r.stream >= static_cast<int32_t>(streams.size())) return out;
  out += " stream '" + streams[r.stream].name + "'";
  if (r.index < 0 || r.index >= static_cast<int32_t>(streams[r.stream].ops.size())) return out;
  const Op& op = streams[r.stream].ops[r.index];
  out += " op " + std::to_string(r.index) + " (id " + std::to_string(op.id) + ": ";
  if (const Compute* c = op.compute()) {
    out += "compute '" + c->label + "'";
  } else if (const Collective* c = op.collective()) {
    out += std::string(to_string(c->op));
    if (!c->label.empty()) out += " '" + c->label + "'";
    out += " on '" + c->comm + "'";
    if (c->op == CollOp::Send) out += " to rank " + std::to_string(c->peer);
    if (c->op == CollOp::Recv) out += " from rank " + std::to_string(c->peer);
  } else if (const Delay* d = op.delay()) {
    out += "delay " + std::to_string(d->duration_ns) + " ns";
  } else if (const Record* e = op.record()) {
    out += "record '" + e->event + "'";
  } else if (const Wait* w = op.wait()) {
    out += "wait '" + w->event + "'";
  }
  return out + ")";
}

}  // namespace braid::fusion

#include "fusion/lift_et.h"

#include <algorithm>

namespace braid::fusion {

std::string et_buffer_name(int64_t storage, int32_t gen) {
  return "st" + std::to_string(storage) + (gen > 0 ? "." + std::to_string(gen) : std::string());
}

const EtFlowOp* RankEtFlow::parent_of(const EtFlowOp& op) const {
  auto it = by_node.find(op.parent);
  if (it == by_node.end() || op.parent == op.node) return nullptr;
  return &ops[it->second];
}

const EtFlowOp* RankEtFlow::innermost(int64_t tid, Ns t) const {
  auto it = by_tid.find(tid);
  if (it == by_tid.end()) return nullptr;
  const auto& v = it->second;
  auto hi =
      std::upper_bound(v.begin(), v.end(), t, [&](Ns x, int32_t k) { return x < ops[k].start; });
  // The latest-starting op that still holds t is the innermost (spans nest on a thread).
  for (auto k = hi; k != v.begin();) {
    --k;
    if (ops[*k].end >= t) return &ops[*k];
  }
  return nullptr;
}

const EtFlowOp* RankEtFlow::launched_by(int64_t correlation) const {
  if (correlation == 0) return nullptr;
  auto l = launches.find(correlation);
  if (l == launches.end()) return nullptr;
  const EtFlowOp* op = innermost(l->second.first, l->second.second);
  // A kernel launched inside a view or an allocation belongs to the op around it that computes.
  for (const EtFlowOp* o = op; o; o = parent_of(*o))
    if (o->computes() || o->kind == EtOpKind::Comm) return o;
  return op;
}

const EtFlowOp* RankEtFlow::comm_of(const EtFlowOp* op) const {
  for (const EtFlowOp* o = op; o; o = parent_of(*o))
    if (o->kind == EtOpKind::Comm) return o;
  return nullptr;
}

const EtFlowOp* RankEtFlow::comm_at(Ns start, std::string_view name) const {
  for (const EtFlowOp& o : ops)
    if (o.joined && o.kind == EtOpKind::Comm && o.start == start && o.name == name) return &o;
  return nullptr;
}

std::vector<analysis::HostCompute> et_host_compute(const RankEtFlow& flow) {
  std::map<int64_t, int64_t> comm_tids, op_tids;
  for (const EtFlowOp& o : flow.ops) {
    if (!o.joined) continue;
    if (o.kind == EtOpKind::Comm) ++comm_tids[o.tid];
    if (o.computes()) ++op_tids[o.tid];
  }
  const auto& votes = comm_tids.empty() ? op_tids : comm_tids;
  int64_t main_tid = 0, most = -1;
  for (auto [tid, n] : votes)
    if (n > most) most = n, main_tid = tid;
  std::map<int64_t, int64_t> stream_of;
  int64_t next = -2;
  for (auto [tid, n] : op_tids) stream_of[tid] = tid == main_tid ? -1 : next--;
  std::vector<analysis::HostCompute> out;
  for (size_t k = 0; k < flow.ops.size(); ++k) {
    const EtFlowOp& o = flow.ops[k];
    if (!o.joined || !o.computes() || o.computing_descendant) continue;
    analysis::HostCompute h;
    h.stream = stream_of[o.tid];
    h.start = o.start;
    h.end = o.end;
    h.step = o.step;
    h.ref = static_cast<int32_t>(k);
    out.push_back(h);
  }
  return out;
}

analysis::RankTrace with_host_compute(const analysis::RankTrace& t, const EtFlow* et,
                                      int32_t rank) {
  analysis::RankTrace copy = t;
  if (!et || !t.kernels.empty() || !t.memcpys.empty()) return copy;
  if (auto it = et->ranks.find(rank); it != et->ranks.end())
    copy.host_compute = et_host_compute(it->second);
  return copy;
}

EtFlow load_et_flow(const TraceReader& r, int64_t run) {
  EtFlow flow;
  r.et_ops(run, [&](const EtOp& o) {
    RankEtFlow& rf = flow.ranks[o.rank];
    EtFlowOp f;
    f.node = o.node;
    f.parent = o.parent;
    f.name = r.str(o.name);
    f.kind = o.kind;
    f.joined = o.join != EtJoin::None;
    f.tid = o.tid;
    f.start = o.op_start;
    f.end = o.op_end;
    f.step = o.step;
    rf.by_node[o.node] = static_cast<int32_t>(rf.ops.size());
    rf.ops.push_back(std::move(f));
    if (o.join != EtJoin::None && o.step >= 0) flow.steps.insert(o.step);
    return true;
  });
  if (flow.empty()) return flow;
  // Tensors, grouped by node (the reader gives them in (rank, node, output, arg, item) order).
  std::map<int32_t, std::unordered_map<int64_t, std::vector<EtTensor>>> tensors;
  r.et_tensors(run, [&](const EtTensor& t) {
    tensors[t.rank][t.node].push_back(t);
    return true;
  });
  for (auto& [rank, rf] : flow.ranks) {
    auto& by_node = tensors[rank];
    // Generations, in the order the ops were entered (node ids).
    std::unordered_map<int64_t, int32_t> gen;
    std::unordered_map<int64_t, int64_t> last_fresh;  // storage -> tensor id of its allocation
    for (EtFlowOp& op : rf.ops) {
      auto it = by_node.find(op.node);
      if (it == by_node.end()) continue;
      std::set<int64_t> in_storages;
      for (const EtTensor& t : it->second)
        if (!t.output) in_storages.insert(t.storage);
      auto access = [&](const EtTensor& t) {
        EtAccess a;
        a.storage = t.storage;
        a.gen = gen[t.storage];
        a.lo = t.lo * t.itemsize;
        a.hi = t.hi * t.itemsize;
        a.dtype = r.str(t.dtype);
        a.itemsize = t.itemsize;
        a.numel = t.numel;
        return a;
      };
      for (const EtTensor& t : it->second)
        if (!t.output && t.storage != 0 && t.numel > 0) op.reads.push_back(access(t));
      for (const EtTensor& t : it->second) {
        if (!t.output || t.storage == 0) continue;
        if (!in_storages.count(t.storage)) {
          auto lf = last_fresh.find(t.storage);
          if (lf == last_fresh.end() || lf->second != t.tensor) {
            ++gen[t.storage];
            last_fresh[t.storage] = t.tensor;
          }
        }
        if (t.numel > 0) op.writes.push_back(access(t));
      }
      if (op.kind == EtOpKind::View || op.kind == EtOpKind::Alloc ||
          op.kind == EtOpKind::Annotation) {
        op.reads.clear();  // no data moves (the generation above still counts an allocation)
        op.writes.clear();
      }
    }
    for (size_t k = 0; k < rf.ops.size(); ++k) {
      const EtFlowOp& op = rf.ops[k];
      if (!op.joined) continue;
      rf.by_tid[op.tid].push_back(static_cast<int32_t>(k));
      // An op around one that computes or communicates is not compute of its own (aten::linear
      // around aten::addmm; a Python autograd function around its c10d all-reduce).
      if (op.computes() || op.kind == EtOpKind::Comm)
        for (const EtFlowOp* p = rf.parent_of(op); p; p = rf.parent_of(*p)) {
          auto& q = rf.ops[rf.by_node.at(p->node)];
          if (q.computing_descendant) break;
          q.computing_descendant = true;
        }
    }
    for (auto& [tid, v] : rf.by_tid)
      std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
        const EtFlowOp &x = rf.ops[a], &y = rf.ops[b];
        return x.start != y.start ? x.start < y.start : x.end > y.end;
      });
  }
  // Launch calls: which thread launched each GPU activity, and when.
  r.api_calls(run, [&](const ApiCall& a) {
    if ((a.kind == ApiKind::Runtime || a.kind == ApiKind::Driver) && a.correlation != 0) {
      auto it = flow.ranks.find(a.rank);
      if (it != flow.ranks.end())
        it->second.launches.emplace(a.correlation, std::make_pair(a.tid, a.start));
    }
    return true;
  });
  return flow;
}

}  // namespace braid::fusion

namespace braid::fusion {

using analysis::OpPos;

std::string EtRankPlan::key(const EtAccess& a) const { return et_buffer_name(a.storage, a.gen); }

void EtRankPlan::add_compute(OpPos pos, const EtFlowOp* op, Ns start, Ns end) {
  Touch t;
  t.pos = pos;
  t.start = start;
  t.end = end;
  if (op && op->computes()) {
    t.reads = op->reads;
    t.writes = op->writes;
    t.flow = true;
  }
  ops_[pos] = std::move(t);
}

namespace {
bool in_place(CollOp op) {
  return op == CollOp::AllReduce || op == CollOp::Broadcast || op == CollOp::Reduce;
}
bool same_range(const EtAccess& a, const EtAccess& b) {
  return a.storage == b.storage && a.gen == b.gen && a.lo == b.lo && a.hi == b.hi;
}
}  // namespace

void EtRankPlan::add_collective(OpPos pos, const EtFlowOp* comm, CollOp op,
                                const std::string& dtype, int64_t in_n, int64_t out_n, Ns start,
                                Ns end) {
  Touch t;
  t.pos = pos;
  t.start = start;
  t.end = end;
  t.coll = true;
  t.op = op;
  t.dtype = dtype;
  t.in_n = in_n;
  t.out_n = out_n;
  if (comm) {
    t.flow = true;
    t.reads = comm->reads;
    t.writes = comm->writes.empty() && in_place(op) ? comm->reads : comm->writes;
    const int64_t e = std::max(1, dtype_size(dtype));
    auto fits = [&](const EtAccess& a, int64_t n) {
      return n >= 0 && a.dense() && a.hi - a.lo == n * e && a.itemsize == e;
    };
    for (const EtAccess& a : t.reads)
      if (!t.in && fits(a, in_n)) t.in = a;
    if (in_place(op) && t.in && in_n == out_n) {
      t.out = t.in;
    } else {
      for (const auto* list : {&t.writes, &t.reads})
        for (const EtAccess& a : *list)
          if (!t.out && fits(a, out_n) && !(t.in && same_range(a, *t.in))) t.out = a;
    }
  }
  ops_[pos] = std::move(t);
}

void EtRankPlan::finish() {
  // Buffers: one per storage generation, in the dtype of the first collective that takes it
  // whole, else of its first tensor; as large as the furthest byte any op touches.
  auto note = [&](const EtAccess& a, const std::string& dtype, int32_t itemsize) {
    BufInfo& b = bufs_[key(a)];
    if (b.name.empty()) {
      b.name = key(a);
      b.dtype = dtype;
      b.itemsize = std::max(1, itemsize);
    }
    b.bytes = std::max(b.bytes, a.hi);
  };
  for (auto& [pos, t] : ops_)
    if (t.coll) {
      const int32_t e = std::max(1, dtype_size(t.dtype));
      for (const auto& x : {t.in, t.out})
        if (x) note(*x, t.dtype, e);
    }
  for (auto& [pos, t] : ops_)
    for (const auto* list : {&t.reads, &t.writes})
      for (const EtAccess& a : *list)
        // A dtype braid does not know (complex, quantized) is a buffer of bytes.
        if (dtype_size(a.dtype) > 0)
          note(a, a.dtype, a.itemsize);
        else
          note(a, "uint8", 1);
  // A collective whose tensor landed in a buffer of another dtype is staged instead.
  for (auto& [pos, t] : ops_) {
    if (!t.coll) continue;
    for (auto* x : {&t.in, &t.out})
      if (*x && bufs_.at(key(**x)).dtype != t.dtype) x->reset();
  }
  for (auto& [name, b] : bufs_) {
    Buffer buf;
    buf.name = b.name;
    buf.dtype = b.dtype;
    buf.size = (b.bytes + b.itemsize - 1) / b.itemsize;
    buffers_.push_back(buf);
  }
  for (auto& [pos, t] : ops_) {
    if (!t.coll || !t.flow) continue;
    Coll c;
    if (t.in) c.in = slice(*t.in);
    if (t.out) c.out = slice(*t.out);
    c.stage_in = t.in_n >= 0 && !t.in;
    c.stage_out = t.out_n >= 0 && !t.out;
    if (c.stage_in)
      for (const EtAccess& a : t.reads) c.stage_reads.push_back(slice(a));
    if (c.stage_out)
      for (const EtAccess& a : t.writes) c.stage_writes.push_back(slice(a));
    colls_[pos] = std::move(c);
  }

  // Dependencies across streams from the storages, and the outputs.
  struct Use {
    OpPos pos;
    Ns start, end;
    int64_t lo, hi;
    bool write;
  };
  std::map<std::string, std::vector<Use>> uses;  // by buffer, in start order
  std::vector<const Touch*> order;
  for (auto& [pos, t] : ops_)
    if (t.flow) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const Touch* a, const Touch* b) { return a->start < b->start; });
  std::map<std::string, bool> first_is_read, written;
  for (const Touch* t : order) {
    std::set<OpPos> from;
    auto scan = [&](const EtAccess& a, bool write) {
      auto it = uses.find(key(a));
      if (it == uses.end()) return;
      std::set<int32_t> streams_done;
      int budget = 256;
      for (auto u = it->second.rbegin(); u != it->second.rend() && budget-- > 0; ++u) {
        if (u->pos.stream == t->pos.stream || streams_done.count(u->pos.stream)) continue;
        if (u->end > t->start) continue;  // ran alongside: not ordered by the trace
        if (u->hi <= a.lo || a.hi <= u->lo) continue;
        if (!write && !u->write) continue;  // read after read
        from.insert(u->pos);
        streams_done.insert(u->pos.stream);
      }
    };
    for (const EtAccess& a : t->reads) scan(a, false);
    for (const EtAccess& a : t->writes) scan(a, true);
    if (!from.empty()) {
      deps_[t->pos].assign(from.begin(), from.end());
      dep_count_ += static_cast<int64_t>(from.size());
    }
    for (const EtAccess& a : t->reads) {
      first_is_read.try_emplace(key(a), true);
      uses[key(a)].push_back({t->pos, t->start, t->end, a.lo, a.hi, false});
    }
    for (const EtAccess& a : t->writes) {
      first_is_read.try_emplace(key(a), false);
      written[key(a)] = true;
      uses[key(a)].push_back({t->pos, t->start, t->end, a.lo, a.hi, true});
    }
  }
  // Outputs: what the step read before writing and then wrote (parameters, optimizer state,
  // accumulated gradients); a step that updates no such state keeps what it wrote last
  // (buffers whose last use is a write).
  for (auto& [name, w] : written)
    if (first_is_read[name]) outputs_.push_back(name);
  if (outputs_.empty())
    for (auto& [name, v] : uses)
      if (!v.empty() && v.back().write) outputs_.push_back(name);
}

Slice EtRankPlan::slice(const EtAccess& a) const {
  const BufInfo& b = bufs_.at(key(a));
  const int64_t lo = a.lo / b.itemsize, hi = (a.hi + b.itemsize - 1) / b.itemsize;
  return {b.name, lo, hi - lo};
}

bool EtRankPlan::compute(OpPos pos, std::vector<Slice>& reads, std::vector<Slice>& writes) const {
  auto it = ops_.find(pos);
  if (it == ops_.end() || !it->second.flow || it->second.coll) return false;
  auto add = [](std::vector<Slice>& v, Slice s) {
    if (s.count > 0 && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(std::move(s));
  };
  for (const EtAccess& a : it->second.reads) add(reads, slice(a));
  for (const EtAccess& a : it->second.writes) add(writes, slice(a));
  return true;
}

const EtRankPlan::Coll* EtRankPlan::collective(OpPos pos) const {
  auto it = colls_.find(pos);
  return it == colls_.end() ? nullptr : &it->second;
}

const std::vector<OpPos>& EtRankPlan::deps(OpPos pos) const {
  static const std::vector<OpPos> none;
  auto it = deps_.find(pos);
  return it == deps_.end() ? none : it->second;
}

}  // namespace braid::fusion

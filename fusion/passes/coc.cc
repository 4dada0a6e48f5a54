// coc: communication over computation (MindSpeed CoC). A GEMM and the collective next to it are
// split into k chunks (k in {2, 4, 8}) along the GEMM's output and pipelined on two streams:
// - GEMM -> All-Reduce: chunk i's all-reduce runs on a second stream while chunk i+1 computes;
// - GEMM -> Reduce-Scatter: chunk i covers rows i*L/k..(i+1)*L/k of the L-element input, which
//   belong to one or several ranks' output shards; each part is reduced to the rank that owns it
//   (one Reduce per part, rooted at the owner), while chunk i+1 computes;
// - All-Gather -> GEMM: the gathered buffer arrives in k row chunks, each part broadcast from
//   the rank whose shard it is, and GEMM chunk i starts once chunk i has arrived.
// Rooted parts keep every chunk contiguous on every rank, so no strided layout is needed; they
// cost one collective latency per part, which the cost model weighs. It simulates the pipeline
// (a compute chunk takes duration/k plus the kernel overhead, a communication chunk the
// collectives of its parts) and picks the k with the shortest time; no rewrite when no k beats
// the unsplit pair. That estimate is local (the pair alone): the pipeline, given a simulator,
// applies a finding only when the simulated step of the whole schedule gets shorter
// (judged_by_step). A pair is chunked once: the chunks coc made (their collectives wait on a
// "coc." event) are never chunked again, so the pass reaches a fixed point after one round.
#include <algorithm>

#include "fusion/passes/passes.h"

namespace braid::fusion::passes {
namespace {

struct Member {
  OpRef coll;            // the collective
  OpRef gemm;            // its producer (all-reduce, reduce-scatter) or consumer (all-gather)
  OpRef record, wait;    // two-stream form: gemm; record e  ||  wait e; collective
  bool two_stream = false;
};

// One part of a chunk of a reduce-scatter's input / an all-gather's output: elements
// [offset, offset + count) of the full (ranks x count) range, all in the shard of `owner` (an
// index into the communicator).
struct Part {
  int owner = 0;
  int64_t offset = 0, count = 0;
};

// The parts of chunk i of k of a range of `ranks` shards of `shard` elements each.
std::vector<Part> chunk_parts(int64_t shard, int ranks, int k, int i) {
  const int64_t n = shard * ranks / k;
  std::vector<Part> parts;
  for (int64_t a = i * n, end = (i + 1) * n; a < end;) {
    const int owner = static_cast<int>(a / shard);
    const int64_t b = std::min(end, (owner + 1) * shard);
    parts.push_back({owner, a, b - a});
    a = b;
  }
  return parts;
}

// Splits compute `c` (one write slice) into k chunks; false when a read cannot follow the split.
// `whole` (optional) gets, per read, whether every chunk reads it whole.
bool split_compute(const Compute& c, int k, std::vector<Compute>& out,
                   std::vector<bool>* whole = nullptr) {
  if (c.writes.size() != 1) return false;
  const Slice& w = c.writes[0];
  if (w.count % k != 0) return false;
  const int64_t n = w.count / k;
  if (whole) whole->clear();
  for (int i = 0; i < k; ++i) {
    Compute part = c;
    part.duration_ns = c.duration_ns / k;
    part.writes = {w.sub(i * n, n)};
    part.reads.clear();
    for (const Slice& r : c.reads) {
      bool kept = false;
      if (r.count >= w.count) {
        part.reads.push_back(r.sub(i * n, n));  // element j reads r[j]: split in step
      } else if (r.count > 0 && n % r.count == 0) {
        part.reads.push_back(r);  // element j reads r[j mod count]: the whole slice per chunk
        kept = true;
      } else {
        return false;
      }
      if (whole && i == 0) whole->push_back(kept);
    }
    out.push_back(std::move(part));
  }
  return true;
}

class Coc : public DataflowPass {
 public:
  Coc()
      : DataflowPass(
            "coc",
            "GEMM -> All-Reduce / Reduce-Scatter and All-Gather -> GEMM split into 2/4/8 chunks "
            "pipelined on two streams") {}

  bool judged_by_step() const override { return true; }

  std::vector<Finding> find_on(const Schedule& s, const Dataflow& df, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->hits(s, g.members)) continue;
      if (g.op != CollOp::AllReduce && g.op != CollOp::ReduceScatter &&
          g.op != CollOp::AllGather)
        continue;
      const bool gather = g.op == CollOp::AllGather;
      std::vector<Member> members;
      std::vector<OpRef> opaque;
      bool ok = true;
      for (const OpRef& r : g.members) {
        auto m = gather ? consumer(s, r) : producer(s, r);
        if (!m) {
          ok = false;
          break;
        }
        if (s.op(m->gemm).compute()->opaque) opaque.push_back(m->gemm);
        members.push_back(*m);
      }
      if (!ok) continue;
      const Collective& c0 = *s.op(g.members[0]).collective();
      const Comm* comm = s.find_comm(c0.comm);
      const int t = static_cast<int>(comm->ranks.size());
      const int64_t esize = dtype_bytes_of(c0.dtype);
      const Ns overhead = static_cast<Ns>(cm.profile().gpu.kernel_overhead_ns);
      Ns longest = 0;
      for (const Member& m : members)
        longest = std::max(longest, s.op(m.gemm).compute()->duration_ns);
      const Ns coll_ns = group_ns(s, g, cm);
      const Ns baseline = longest + coll_ns;
      // Length of the range that is chunked: the all-reduce's buffer, the reduce-scatter's
      // input, the all-gather's output.
      const int64_t range = g.op == CollOp::AllReduce ? c0.count : c0.count * t;
      int best_k = 0;
      Ns best = baseline;
      for (int k : {2, 4, 8}) {
        if (range % k != 0) continue;
        bool splits = true;
        for (const Member& m : members)
          if (!s.op(m.gemm).compute()->opaque && !splittable(s, m, g.op, k)) splits = false;
        if (!splits) continue;
        std::vector<Ns> comm_chunk(k);
        for (int i = 0; i < k; ++i) {
          if (g.op == CollOp::AllReduce) {
            comm_chunk[i] = cm.collective_ns(CollOp::AllReduce, range / k * esize, t, c0.comm,
                                             comm->ranks);
            continue;
          }
          for (const Part& p : chunk_parts(c0.count, t, k, i))
            comm_chunk[i] += cm.collective_ns(gather ? CollOp::Broadcast : CollOp::Reduce,
                                              p.count * esize, t, c0.comm, comm->ranks);
        }
        const Ns end = pipeline_ns(s, members, k, overhead, comm_chunk, gather);
        if (end < best) {
          best = end;
          best_k = k;
        }
      }
      if (best_k == 0) continue;
      Finding f;
      f.pass = std::string(name());
      f.ranks = member_ranks(g);
      for (const Member& m : members) {
        f.ops.push_back(s.op(m.gemm).id);
        f.ops.push_back(s.op(m.coll).id);
      }
      sort_unique(f.ops);
      // The family: the same GEMM and collective (labels, communicator without its numbers) at
      // the same k, on sibling communicators and micro-batches.
      std::string stem;
      for (char ch : c0.comm)
        if (ch < '0' || ch > '9') stem += ch;
      f.family = s.op(members[0].gemm).compute()->label + "|" + c0.label + "|" + stem + "|" +
                 std::to_string(best_k);
      f.saving_ns = baseline - best;
      f.saving_bytes = 0;
      const std::string parts =
          g.op == CollOp::AllReduce
              ? ""
              : " (" + std::to_string(std::max(best_k, t)) +
                    (gather ? " broadcasts from the shards' owners)" : " reduces to the shards' owners)");
      f.summary = gather ? op_name(s.op(g.members[0])) + " -> " + op_name(s.op(members[0].gemm))
                         : op_name(s.op(members[0].gemm)) + " -> " + op_name(s.op(g.members[0]));
      f.summary += " split into " + std::to_string(best_k) + " pipelined chunks" + parts;
      if (!opaque.empty()) {
        f.legal = false;
        f.assumption = "assumes " + name_ops(s, opaque) +
                       (gather ? " read the all-gather's output" : " produce the collective's input") +
                       " and can be split into " + std::to_string(best_k) +
                       " chunks along their output rows";
      } else {
        f.legal = true;
        std::vector<std::pair<int64_t, int64_t>> ids;  // (gemm, collective)
        for (const Member& m : members) ids.push_back({s.op(m.gemm).id, s.op(m.coll).id});
        const int k = best_k;
        f.rewrite = [ids, k](Schedule& x) {
          for (auto [gid, cid] : ids) rewrite(x, gid, cid, k);
        };
        // A caller that validates what it applies (the pipeline) spares the copy.
        if (!(focus && focus->caller_validates)) {
          Schedule probe = s;
          f.rewrite(probe);
          if (!valid(probe)) continue;
        }
      }
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
  // Whether member m's GEMM splits into k chunks that pipeline with the collective's chunks.
  static bool splittable(const Schedule& s, const Member& m, CollOp op, int k) {
    const Compute& c = *s.op(m.gemm).compute();
    const Collective& coll = *s.op(m.coll).collective();
    std::vector<Compute> parts;
    std::vector<bool> whole;
    if (!split_compute(c, k, parts, &whole)) return false;
    if (op == CollOp::AllGather) {
      // Chunk i must read only rows of chunks 0..i of the gathered buffer, split in step with
      // the write (which is never longer than the gathered buffer then), and must not write what
      // the broadcasts read or write meanwhile.
      bool reads_gathered = false;
      for (size_t j = 0; j < c.reads.size(); ++j) {
        if (!c.reads[j].overlaps(coll.out)) continue;
        if (c.reads[j] != coll.out || whole[j] || c.writes[0].count > coll.out.count) return false;
        reads_gathered = true;
      }
      return reads_gathered && !c.writes[0].overlaps(coll.out) &&
             !(!coll.in.empty() && c.writes[0].overlaps(coll.in));
    }
    // A read kept whole must not be something the chunks' collectives change; an all-reduce in
    // place changes only the chunk it follows.
    for (const Slice& rd : c.reads)
      if (rd.overlaps(coll.out) &&
          !(op == CollOp::AllReduce && rd == coll.in && rd == coll.out))
        return false;
    return true;
  }

  // Two-stage pipeline time. Producer form: a chunk's collective starts when every member
  // computed it and the previous collective ended. Gather form: chunk i computes once its
  // collectives and the previous chunk ended.
  static Ns pipeline_ns(const Schedule& s, const std::vector<Member>& members, int k,
                        Ns overhead, const std::vector<Ns>& comm_chunk, bool gather) {
    Ns chunk = 0;
    for (const Member& m : members)
      chunk = std::max(chunk, s.op(m.gemm).compute()->duration_ns / k + overhead);
    Ns comm_end = 0, comp_end = 0;
    for (int i = 0; i < k; ++i) {
      if (gather) {
        comm_end += comm_chunk[i];
        comp_end = std::max(comp_end, comm_end) + chunk;
      } else {
        comp_end += chunk;
        comm_end = std::max(comm_end, comp_end) + comm_chunk[i];
      }
    }
    return gather ? comp_end : comm_end;
  }

  static std::optional<Member> producer(const Schedule& s, OpRef ar) {
    const Collective& c = *s.op(ar).collective();
    auto writes_input = [&](OpRef g) {
      const Compute* cp = s.op(g).compute();
      return cp && (cp->opaque || (cp->writes.size() == 1 && cp->writes[0] == c.in));
    };
    if (ar.index == 0) return std::nullopt;
    OpRef prev{ar.rank, ar.stream, ar.index - 1};
    if (writes_input(prev)) return Member{ar, prev, {}, {}, false};
    const Wait* w = s.op(prev).wait();
    // A chunk of an earlier coc rewrite (its collective waits on the chunk's "coc." event).
    if (!w || w->event.rfind("coc.", 0) == 0) return std::nullopt;
    const auto& streams = s.ranks[ar.rank].streams;
    for (int32_t st = 0; st < static_cast<int32_t>(streams.size()); ++st)
      for (int32_t i = 1; i < static_cast<int32_t>(streams[st].ops.size()); ++i) {
        const Record* r = streams[st].ops[i].record();
        if (!r || r->event != w->event || st == ar.stream) continue;
        OpRef g{ar.rank, st, i - 1};
        if (writes_input(g)) return Member{ar, g, {ar.rank, st, i}, prev, true};
      }
    return std::nullopt;
  }

  // The all-gather's reader: the next op on its stream, a compute that reads the gathered
  // buffer (or opaque compute, for advice).
  static std::optional<Member> consumer(const Schedule& s, OpRef ag) {
    const Collective& c = *s.op(ag).collective();
    const auto& ops = s.ranks[ag.rank].streams[ag.stream].ops;
    if (ag.index + 1 >= static_cast<int32_t>(ops.size())) return std::nullopt;
    OpRef next{ag.rank, ag.stream, ag.index + 1};
    const Compute* cp = s.op(next).compute();
    if (!cp) return std::nullopt;
    if (!cp->opaque &&
        std::none_of(cp->reads.begin(), cp->reads.end(),
                     [&](const Slice& r) { return r.overlaps(c.out); }))
      return std::nullopt;
    return Member{ag, next, {}, {}, false};
  }

  // The parts of chunk i as collectives on this rank: reduces of the input rows to their
  // owners (reduce-scatter) or broadcasts of them from their owners (all-gather).
  static std::vector<Collective> part_ops(const Schedule& x, int32_t rank, const Collective& c,
                                          int k, int i) {
    const Comm* comm = x.find_comm(c.comm);
    const int t = static_cast<int>(comm->ranks.size());
    const bool gather = c.op == CollOp::AllGather;
    std::vector<Collective> v;
    for (const Part& p : chunk_parts(c.count, t, k, i)) {
      Collective q = c;
      q.op = gather ? CollOp::Broadcast : CollOp::Reduce;
      q.count = p.count;
      q.root = comm->ranks[p.owner];
      const bool owner = q.root == rank;
      const int64_t in_shard = p.offset - p.owner * c.count;  // offset inside the owner's shard
      if (gather) {
        q.in = owner ? c.in.sub(in_shard, p.count) : Slice{};
        q.out = c.out.sub(p.offset, p.count);
      } else {
        q.in = c.in.sub(p.offset, p.count);
        q.out = owner ? c.out.sub(in_shard, p.count) : Slice{};
      }
      v.push_back(std::move(q));
    }
    return v;
  }

  static void rewrite(Schedule& x, int64_t gemm_id, int64_t coll_id, int k) {
    int64_t& next = x.op_id_counter();
    OpRef g = must_find(x, gemm_id);
    OpRef a = must_find(x, coll_id);
    const int32_t rank = g.rank;
    const Compute comp = *x.op(g).compute();
    const Collective coll = *x.op(a).collective();
    const bool two_stream = g.stream != a.stream;
    std::vector<Compute> parts;
    split_compute(comp, k, parts);
    std::vector<std::string> ev;
    for (int i = 0; i < k; ++i)
      ev.push_back(
          fresh_event(x, rank, "coc." + std::to_string(coll_id) + "." + std::to_string(i)));
    // The collectives of chunk i.
    auto chunk_colls = [&](int i) {
      if (coll.op != CollOp::AllReduce) return part_ops(x, rank, coll, k, i);
      const int64_t n = coll.count / k;
      Collective c = coll;
      c.count = n;
      c.in = coll.in.sub(i * n, n);
      c.out = coll.out.sub(i * n, n);
      return std::vector<Collective>{c};
    };
    auto& gops = x.ranks[rank].streams[g.stream].ops;
    if (coll.op == CollOp::AllGather) {
      // Compute stream: "all-gather; gemm" becomes "record start; (wait e_i; chunk i)..."; the
      // comm stream waits for start, then broadcasts chunk i's parts and records e_i.
      std::string start = fresh_event(x, rank, "coc." + std::to_string(coll_id) + ".start");
      std::vector<Op> comp_ops{make_op(next, Record{start}, {})};
      std::vector<Op> comm_ops{make_op(next, Wait{start}, {})};
      for (int i = 0; i < k; ++i) {
        for (Collective& c : chunk_colls(i)) comm_ops.push_back(make_op(next, c, {coll_id}));
        comm_ops.push_back(make_op(next, Record{ev[i]}, {}));
        comp_ops.push_back(make_op(next, Wait{ev[i]}, {}));
        comp_ops.push_back(make_op(next, parts[i], {gemm_id}));
      }
      std::string sname = fresh_stream(x, rank, x.ranks[rank].streams[g.stream].name + ".coc");
      gops.erase(gops.begin() + a.index, gops.begin() + a.index + 2);
      gops.insert(gops.begin() + a.index, comp_ops.begin(), comp_ops.end());
      x.ranks[rank].streams.push_back(Stream{sname, std::move(comm_ops)});
      return;
    }
    // Compute stream: the chunks, each followed by its event.
    std::vector<Op> comp_ops;
    for (int i = 0; i < k; ++i) {
      comp_ops.push_back(make_op(next, parts[i], {gemm_id}));
      comp_ops.push_back(make_op(next, Record{ev[i]}, {}));
    }
    // Comm stream: wait for chunk i, then its collectives.
    std::vector<Op> comm_ops;
    for (int i = 0; i < k; ++i) {
      comm_ops.push_back(make_op(next, Wait{ev[i]}, {}));
      for (Collective& c : chunk_colls(i)) comm_ops.push_back(make_op(next, c, {coll_id}));
    }
    if (two_stream) {
      // gemm; record e || wait e; collective: chunks replace the gemm (record e stays after the
      // last one), the waits and chunk collectives replace "wait e; collective".
      gops.erase(gops.begin() + g.index);
      gops.insert(gops.begin() + g.index, comp_ops.begin(), comp_ops.end());
      OpRef a2 = must_find(x, coll_id);
      auto& aops = x.ranks[rank].streams[a2.stream].ops;
      aops.erase(aops.begin() + a2.index - 1, aops.begin() + a2.index + 1);
      aops.insert(aops.begin() + a2.index - 1, comm_ops.begin(), comm_ops.end());
      return;
    }
    // One stream: the chunk collectives go to a new stream; the original stream waits for the
    // last one where the collective was.
    std::string done = fresh_event(x, rank, "coc." + std::to_string(coll_id) + ".done");
    comp_ops.push_back(make_op(next, Wait{done}, {}));
    comm_ops.push_back(make_op(next, Record{done}, {}));
    std::string sname = fresh_stream(x, rank, x.ranks[rank].streams[g.stream].name + ".coc");
    gops.erase(gops.begin() + g.index, gops.begin() + g.index + 2);
    gops.insert(gops.begin() + g.index, comp_ops.begin(), comp_ops.end());
    x.ranks[rank].streams.push_back(Stream{sname, std::move(comm_ops)});
  }
};

}  // namespace

std::unique_ptr<Pass> make_coc() { return std::make_unique<Coc>(); }

}  // namespace braid::fusion::passes

// coc: communication over computation (MindSpeed CoC). A GEMM whose output is all-reduced right
// after is split into k chunks (k in {2, 4, 8}) along its output; chunk i's all-reduce runs on a
// second stream while chunk i+1 computes. The cost model simulates the pipeline (a compute chunk
// takes duration/k plus the kernel overhead, a communication chunk the all-reduce of 1/k of the
// bytes) and picks the k with the shortest time; no rewrite when no k beats the unsplit pair.
#include <algorithm>

#include "fusion/passes/passes.h"

namespace braid::fusion::passes {
namespace {

struct Member {
  OpRef ar;              // the all-reduce
  OpRef gemm;            // its producer
  OpRef record, wait;    // two-stream form: gemm; record e  ||  wait e; all-reduce
  bool two_stream = false;
};

// Splits compute `c` (one write slice) into k chunks; false when a read cannot follow the split.
bool split_compute(const Compute& c, int k, std::vector<Compute>& out) {
  if (c.writes.size() != 1) return false;
  const Slice& w = c.writes[0];
  if (w.count % k != 0) return false;
  const int64_t n = w.count / k;
  for (int i = 0; i < k; ++i) {
    Compute part = c;
    part.duration_ns = c.duration_ns / k;
    part.writes = {w.sub(i * n, n)};
    part.reads.clear();
    for (const Slice& r : c.reads) {
      if (r.count >= w.count) {
        part.reads.push_back(r.sub(i * n, n));  // element j reads r[j]: split in step
      } else if (r.count > 0 && n % r.count == 0) {
        part.reads.push_back(r);  // element j reads r[j mod count]: the whole slice per chunk
      } else {
        return false;
      }
    }
    out.push_back(std::move(part));
  }
  return true;
}

class Coc : public Pass {
 public:
  std::string_view name() const override { return "coc"; }
  std::string_view description() const override {
    return "GEMM -> All-Reduce split into 2/4/8 chunks pipelined on two streams";
  }

  std::vector<Finding> find_in(const Schedule& s, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    std::optional<Dataflow> own_df;
    const Dataflow& df = dataflow_of(s, focus, own_df);
    for (const MatchGroup& g : df.matching().groups) {
      if (focus && !focus->hits(s, g.members)) continue;
      if (g.op != CollOp::AllReduce) continue;
      std::vector<Member> members;
      std::vector<OpRef> opaque;
      bool ok = true;
      for (const OpRef& r : g.members) {
        auto m = producer(s, r);
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
      const int64_t bytes = nccl_bytes(s, c0);
      const Ns overhead = static_cast<Ns>(cm.profile().gpu.kernel_overhead_ns);
      Ns longest = 0;
      for (const Member& m : members)
        longest = std::max(longest, s.op(m.gemm).compute()->duration_ns);
      const Ns ar_ns = group_ns(s, g, cm);
      const Ns baseline = longest + ar_ns;
      int best_k = 0;
      Ns best = baseline;
      for (int k : {2, 4, 8}) {
        if (c0.count % k != 0) continue;
        bool splits = true;
        for (const Member& m : members) {
          const Compute& c = *s.op(m.gemm).compute();
          std::vector<Compute> parts;
          if (!c.opaque && !split_compute(c, k, parts)) splits = false;
          // A read kept whole must not be something the chunks' all-reduces change.
          if (!c.opaque)
            for (const Slice& rd : c.reads)
              if (rd.overlaps(s.op(m.ar).collective()->out) &&
                  !(rd == s.op(m.ar).collective()->in && rd == s.op(m.ar).collective()->out))
                splits = false;
        }
        if (!splits) continue;
        // Two-stage pipeline; a chunk's all-reduce starts when every member computed it.
        const Ns comm_chunk =
            cm.collective_ns(CollOp::AllReduce, bytes / k, static_cast<int>(comm->ranks.size()),
                             c0.comm, comm->ranks);
        Ns comm_end = 0;
        for (int i = 0; i < k; ++i) {
          Ns ready = 0;
          for (const Member& m : members)
            ready = std::max(ready, (i + 1) * (s.op(m.gemm).compute()->duration_ns / k + overhead));
          comm_end = std::max(comm_end, ready) + comm_chunk;
        }
        if (comm_end < best) {
          best = comm_end;
          best_k = k;
        }
      }
      if (best_k == 0) continue;
      Finding f;
      f.pass = std::string(name());
      f.ranks = member_ranks(g);
      for (const Member& m : members) {
        f.ops.push_back(s.op(m.gemm).id);
        f.ops.push_back(s.op(m.ar).id);
      }
      sort_unique(f.ops);
      f.saving_ns = baseline - best;
      f.saving_bytes = 0;
      f.summary = op_name(s.op(members[0].gemm)) + " -> " + op_name(s.op(g.members[0])) +
                  " split into " + std::to_string(best_k) + " pipelined chunks";
      if (!opaque.empty()) {
        f.legal = false;
        f.assumption = "assumes " + name_ops(s, opaque) +
                       " produce the all-reduce's input and can be split into " +
                       std::to_string(best_k) + " chunks along their output rows";
      } else {
        f.legal = true;
        std::vector<std::pair<int64_t, int64_t>> ids;  // (gemm, all-reduce)
        for (const Member& m : members) ids.push_back({s.op(m.gemm).id, s.op(m.ar).id});
        const int k = best_k;
        f.rewrite = [ids, k](Schedule& x) {
          for (auto [gid, aid] : ids) rewrite(x, gid, aid, k);
        };
        Schedule probe = s;
        f.rewrite(probe);
        if (!valid(probe)) continue;
      }
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
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
    if (!w) return std::nullopt;
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

  static void rewrite(Schedule& x, int64_t gemm_id, int64_t ar_id, int k) {
    int64_t next = x.next_op_id();
    OpRef g = must_find(x, gemm_id);
    OpRef a = must_find(x, ar_id);
    const int32_t rank = g.rank;
    const Compute comp = *x.op(g).compute();
    const Collective ar = *x.op(a).collective();
    const bool two_stream = g.stream != a.stream;
    std::vector<Compute> parts;
    split_compute(comp, k, parts);
    const int64_t n = ar.count / k;
    std::vector<std::string> ev;
    for (int i = 0; i < k; ++i)
      ev.push_back(fresh_event(x, rank, "coc." + std::to_string(ar_id) + "." + std::to_string(i)));
    // Compute stream: the chunks, each followed by its event.
    std::vector<Op> comp_ops;
    for (int i = 0; i < k; ++i) {
      comp_ops.push_back(make_op(next, parts[i], {gemm_id}));
      comp_ops.push_back(make_op(next, Record{ev[i]}, {}));
    }
    // Comm stream: wait for chunk i, all-reduce it.
    std::vector<Op> comm_ops;
    for (int i = 0; i < k; ++i) {
      Collective c = ar;
      c.count = n;
      c.in = ar.in.sub(i * n, n);
      c.out = ar.out.sub(i * n, n);
      comm_ops.push_back(make_op(next, Wait{ev[i]}, {}));
      comm_ops.push_back(make_op(next, c, {ar_id}));
    }
    auto& gops = x.ranks[rank].streams[g.stream].ops;
    if (two_stream) {
      // gemm; record e || wait e; all-reduce: chunks replace the gemm (record e stays after the
      // last one), the waits and chunk all-reduces replace "wait e; all-reduce".
      gops.erase(gops.begin() + g.index);
      gops.insert(gops.begin() + g.index, comp_ops.begin(), comp_ops.end());
      OpRef a2 = must_find(x, ar_id);
      auto& aops = x.ranks[rank].streams[a2.stream].ops;
      aops.erase(aops.begin() + a2.index - 1, aops.begin() + a2.index + 1);
      aops.insert(aops.begin() + a2.index - 1, comm_ops.begin(), comm_ops.end());
      return;
    }
    // One stream: the chunk all-reduces go to a new stream; the original stream waits for the
    // last one where the all-reduce was.
    std::string done = fresh_event(x, rank, "coc." + std::to_string(ar_id) + ".done");
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

// Legality and plan of the MoE block rewrite (moe_plan.h).
#include "fusion/passes/moe_plan.h"

#include <map>

#include "fusion/passes/chimera_util.h"
#include "fusion/passes/replicas.h"

namespace braid::fusion::passes::moe {

std::optional<Plan> Planner::make_plan(const std::vector<Cand>& cands,
                                       const std::vector<size_t>& comp,
                                       std::vector<Region>& regions, int t, std::string& why) {
  Plan plan;
  plan.seed = seed_;
  plan.t = t;
  plan.delta_stem =
      pass_ + "." + std::to_string(s_.op(cands[comp[0]].seed->members[0]).id) + ".wgrad";
  Replicas replicas(df_);
  size_t base = 0;
  for (size_t ck : comp) {
    const MatchGroup& g = *cands[ck].seed;
    const Comm& tp = *s_.find_comm(s_.op(g.members[0]).collective()->comm);
    const Region& r0 = regions[base];
    for (size_t j = 0; j < g.members.size(); ++j)
      if (regions[base + j].ops().size() != r0.ops().size()) {
        why = "the TP ranks' MoE blocks differ (" + std::to_string(r0.ops().size()) + " vs " +
              std::to_string(regions[base + j].ops().size()) + " ops)";
        return std::nullopt;
      }
    for (size_t k = 0; k < r0.ops().size(); ++k) {
      std::vector<std::vector<std::pair<OpRef, Slice>>> per_read;
      for (size_t j = 0; j < g.members.size(); ++j) {
        const Region& rj = regions[base + j];
        const OpRef o = rj.ops()[k];
        const Op& op = s_.op(o);
        const Role ro = rj.role(o);
        if (s_.op(r0.ops()[k]).kind() != op.kind() || r0.role(r0.ops()[k]) != ro) {
          why = "the TP ranks' MoE blocks differ at " + describe(s_, o);
          return std::nullopt;
        }
        if (const Compute* c = op.compute()) {
          if (c->label != s_.op(r0.ops()[k]).compute()->label) {
            why = "the TP ranks' MoE blocks differ at " + describe(s_, o);
            return std::nullopt;
          }
          if (c->replicated != tp.id) {
            why = describe(s_, o) + " is not declared the same function on every rank of '" +
                  tp.id + "' (replicated)";
            return std::nullopt;
          }
          if (!shardable(*c, ro, t, rj, o, why)) return std::nullopt;
          auto ext = external_reads(rj, o);
          if (per_read.empty()) per_read.resize(ext.size());
          if (ext.size() != per_read.size()) {
            why = "the TP ranks' MoE blocks differ at " + describe(s_, o);
            return std::nullopt;
          }
          for (size_t q = 0; q < ext.size(); ++q) per_read[q].push_back({o, ext[q]});
        } else {
          const Collective& kc = *op.collective();
          if (kc.count % t && ro != Role::LocalSum) {
            why = describe(s_, o) + " does not split " + std::to_string(t) + " ways";
            return std::nullopt;
          }
          // A reduce-scatter of a value the same on every rank sums t copies of it.
          if (ro == Role::LocalSum) per_read.push_back({{o, kc.in}});
        }
      }
      for (const auto& reads : per_read) {
        std::vector<std::pair<OpRef, Slice>> all = reads;
        if (reads.size() == 1) {  // a local sum: across the reduce-scatter's members
          const MatchGroup* rg = df_.group(reads[0].first);
          all.clear();
          for (const OpRef& m : rg->members) all.push_back({m, s_.op(m).collective()->in});
        }
        if (!replicas.same(all)) {
          why = "'" + reads[0].second.buffer + "' read by " + describe(s_, reads[0].first) +
                " is not provably the same on every rank of '" + tp.id + "'";
          return std::nullopt;
        }
      }
    }
    for (size_t j = 0; j < g.members.size(); ++j) {
      const Region& rj = regions[base + j];
      RankPlan rp;
      rp.rank = g.members[j].rank;
      rp.index = tp.index_of(rp.rank);
      rp.tp_comm = tp.id;
      for (const OpRef& o : rj.ops()) rp.ops.push_back({s_.op(o).id, rj.role(o)});
      for (const auto& [w, sl] : rj.exits()) {
        if (sl.count != rj.n()) {
          why = "'" + sl.buffer +
                "' is read whole after the MoE block but is not a token "
                "activation an all-gather can restore";
          return std::nullopt;
        }
        if (w == g.members[j] && seed_ == CollOp::AllGather) {
          rp.keep_seed = true;  // the all-gather stays; the block reads its own shard
          continue;
        }
        rp.exits.push_back({s_.op(w).id, sl});
      }
      gathers(rj, g.members[j], rp);
      plan.ranks.push_back(std::move(rp));
    }
    base += g.members.size();
  }
  for (const Region& r : regions)
    for (const OpRef& o : r.ops()) {
      if (r.role(o) == Role::Sum) {
        const Slice& w = s_.op(o).compute()->writes[0];
        const Buffer* b = s_.ranks[o.rank].find_buffer(w.buffer);
        const int db = b ? static_cast<int>(dtype_bytes_of(b->dtype)) : 2;
        plan.add_ns =
            std::max(plan.add_ns, cm_.compute_ns(double(w.count), 3.0 * double(w.count) * db, db));
      } else if (r.role(o) == Role::LocalSum) {
        const Collective& k = *s_.op(o).collective();
        const double n = double(k.count), db = double(dtype_bytes_of(k.dtype));
        plan.local_sum_ns = std::max(
            plan.local_sum_ns, cm_.compute_ns(n * (t - 1), n * (t + 1) * db, static_cast<int>(db)));
      }
    }
  return plan;
}

void Planner::gathers(const Region& r, OpRef seed, RankPlan& rp) const {
  std::map<OpRef, bool> seen;  // all-gather -> read only by the region
  for (const OpRef& o : r.ops()) {
    const Compute* c = s_.op(o).compute();
    if (!c) continue;
    for (const Slice& rd : c->reads) {
      for (const MatchGroup* g : writer_groups(df_, o, rd, CollOp::AllGather)) {
        if (s_.op(g->members[0]).collective()->comm != rp.tp_comm) continue;
        for (const OpRef& m : g->members) {
          if (m.rank != o.rank) continue;
          const Collective& ag = *s_.op(m).collective();
          if (!(ag.out == rd)) continue;  // a part of it: leave it to the all-gather
          rp.redirects.push_back({rd.sub(rp.index * ag.count, ag.count), ag.in});
          if (!seen.count(m)) {
            Uses u = df_.uses_after(m, ag.out);
            bool only = u.known() && u.live_at_end.empty();
            for (const auto& use : u.readers) only = only && has(r.ops(), use.op);
            seen[m] = only;
          }
        }
      }
    }
  }
  for (const auto& [m, only] : seen) {
    if (m == seed) {
      if (!only) rp.keep_seed = true;
      continue;
    }
    if (only) rp.drop.push_back(s_.op(m).id);
  }
}

bool Planner::shardable(const Compute& c, Role role, int t, const Region& r, OpRef o,
                        std::string& why) const {
  auto no = [&](const std::string& w) {
    why = describe(s_, o) + ": " + w;
    return false;
  };
  if (role == Role::Positional) {
    for (const auto* v : {&c.reads, &c.writes})
      for (const Slice& sl : *v)
        if (sl.count % t) return no("its slices do not split " + std::to_string(t) + " ways");
    return true;
  }
  for (size_t k = 0; k < c.reads.size(); ++k)
    if (c.read_rows[k] % t) return no("rows do not split " + std::to_string(t) + " ways");
  if (role == Role::Sum) {
    // Whole reads other than the accumulators would be read by every TP rank's partial sum.
    for (size_t k = 0; k < c.reads.size(); ++k) {
      if (c.read_rows[k] > 0) continue;
      bool acc = false;
      for (const Slice& w : c.writes) acc = acc || c.reads[k] == w;
      if (!acc) return no("a row sum reading '" + c.reads[k].buffer + "' whole");
    }
    return true;
  }
  for (int64_t w : c.write_rows)
    if (w % t) return no("rows do not split " + std::to_string(t) + " ways");
  if (!c.transpose.empty()) {
    // The routing must transpose exactly the t x ep grid: token segment i * ep + e <->
    // destination block e * t + i. Then TP rank i's 1/t of the tokens, permuted without the
    // transpose, lands in the same destinations (block e of its part goes to EP rank e).
    const int64_t a = c.transpose[0], b = c.transpose[1], ep = r.ep();
    const bool to_dest = r.write_order(o) == Order::Dest;
    if (to_dest ? (a != ep || b != t) : (a != t || b != ep))
      return no("its routing transposes a " + std::to_string(a) + " x " + std::to_string(b) +
                " grid, not the " + std::to_string(t) + " TP ranks' token segments x " +
                std::to_string(ep) + " EP ranks");
  }
  return true;
}

std::vector<Slice> Planner::external_reads(const Region& r, OpRef o) const {
  const Compute& c = *s_.op(o).compute();
  std::vector<Slice> out;
  for (size_t k = 0; k < c.reads.size(); ++k) {
    const Slice& rd = c.reads[k];
    if (c.sum_rows && c.read_rows[k] == 0) continue;
    bool inside = false;
    for (const OpRef& w : r.ops()) {
      if (!(w < o)) break;
      for (const Slice& x : access_of(s_, w.rank, s_.op(w)).writes)
        inside = inside || x.overlaps(rd);
    }
    if (!inside) out.push_back(rd);
  }
  return out;
}

void apply_plan(Schedule& x, const Plan& p) {
  int64_t& next = x.op_id_counter();
  const int t = p.t;
  for (const RankPlan& rp : p.ranks) {
    const int i = rp.index;
    auto shard = [&](const Slice& sl) { return sl.sub(i * (sl.count / t), sl.count / t); };
    auto redirect = [&](const Slice& sl) {
      for (const auto& [from, to] : rp.redirects)
        if (from == sl) return to;
      return sl;
    };
    std::vector<std::pair<Slice, int64_t>> sums;  // (accumulator, offset of its partial sum)
    int64_t delta_size = 0, last_sum = -1;
    std::string delta_dtype;
    std::vector<int64_t> sum_ids;
    for (const RankPlan::Item& it : rp.ops) {
      const OpRef at = must_find(x, it.id);
      Op& op = x.op(at);
      switch (it.role) {
        case Role::Seed: {
          Collective& c = *op.collective();
          if (p.seed == CollOp::AllReduce) {
            c.op = CollOp::ReduceScatter;
            c.count /= t;
            c.out = shard(c.out);
          }
          break;
        }
        case Role::AllToAll: {
          Collective& c = *op.collective();
          c.count /= t;
          c.in = shard(c.in);
          c.out = shard(c.out);
          break;
        }
        case Role::LocalSum: {
          // t copies of the rank's own shard, which every rank holds the same.
          const Collective c = *op.collective();
          Compute add;
          add.label = c.label + ".local";
          add.duration_ns = p.local_sum_ns;
          add.fn = "add";
          add.reads.assign(static_cast<size_t>(t), shard(c.in));
          add.writes = {c.out};
          const std::vector<int64_t> repl = op.replaces;
          op.body = std::move(add);
          op.replaces = repl;
          break;
        }
        case Role::Positional: {
          Compute& c = *op.compute();
          for (auto* v : {&c.reads, &c.writes})
            for (Slice& sl : *v) sl = redirect(shard(sl));
          c.duration_ns /= t;
          break;
        }
        case Role::Rows: {
          Compute& c = *op.compute();
          for (size_t k = 0; k < c.reads.size(); ++k)
            if (c.read_rows[k] > 0) {
              c.reads[k] = redirect(shard(c.reads[k]));
              c.read_rows[k] /= t;
            }
          for (size_t w = 0; w < c.writes.size(); ++w) {
            c.writes[w] = shard(c.writes[w]);
            c.write_rows[w] /= t;
          }
          c.transpose.clear();
          c.transposed_reads.clear();
          c.duration_ns /= t;
          break;
        }
        case Role::Sum: {
          Compute& c = *op.compute();
          std::vector<Slice> reads;
          std::vector<int64_t> rows;
          for (size_t k = 0; k < c.reads.size(); ++k)
            if (c.read_rows[k] > 0) {
              reads.push_back(redirect(shard(c.reads[k])));
              rows.push_back(c.read_rows[k] / t);
            }
          c.reads = std::move(reads);
          c.read_rows = std::move(rows);
          for (Slice& w : c.writes) {
            if (delta_dtype.empty()) {
              const Buffer* b = x.ranks[rp.rank].find_buffer(w.buffer);
              delta_dtype = b ? b->dtype : "float32";
            }
            sums.push_back({w, delta_size});
            w = Slice{"", delta_size, w.count};  // the delta buffer, named below
            delta_size += w.count;
          }
          c.duration_ns /= t;
          last_sum = it.id;
          sum_ids.push_back(it.id);
          break;
        }
      }
    }
    // Values read in full after the block go back to every TP rank.
    for (const auto& [w, sl] : rp.exits) {
      const OpRef at = must_find(x, w);
      Collective ag;
      ag.op = CollOp::AllGather;
      ag.comm = rp.tp_comm;
      ag.dtype = x.ranks[rp.rank].find_buffer(sl.buffer)->dtype;
      ag.count = sl.count / t;
      ag.in = shard(sl);
      ag.out = sl;
      ag.label = sl.buffer + ".allgather";
      insert_op(x, at.rank, at.stream, at.index + 1, make_op(next, ag, {rp.ops[0].id}));
    }
    // All-gathers only the block read, the seed among them when nothing else reads it.
    for (int64_t id : rp.drop) remove_op(x, id);
    if (p.seed == CollOp::AllGather && !rp.keep_seed) remove_op(x, rp.ops[0].id);
    if (sums.empty()) continue;
    // The partial weight gradients: one All-Reduce over the TP group, then each added into
    // the gradient it accumulated into before.
    std::string delta = p.delta_stem;
    for (int n = 2; x.ranks[rp.rank].find_buffer(delta); ++n)
      delta = p.delta_stem + "." + std::to_string(n);
    x.add_buffer(rp.rank, delta, delta_dtype, delta_size);
    for (int64_t id : sum_ids)
      for (Slice& w : x.op(must_find(x, id)).compute()->writes)
        if (w.buffer.empty()) w.buffer = delta;
    OpRef at = must_find(x, last_sum);
    Collective ar;
    ar.op = CollOp::AllReduce;
    ar.comm = rp.tp_comm;
    ar.dtype = delta_dtype;
    ar.count = delta_size;
    ar.in = ar.out = Slice{delta, 0, delta_size};
    ar.label = p.delta_stem + ".allreduce";
    insert_op(x, at.rank, at.stream, ++at.index, make_op(next, ar, sum_ids));
    for (const auto& [acc, off] : sums) {
      Compute add;
      add.label = p.delta_stem + ".add";
      add.duration_ns = p.add_ns;
      add.fn = "add";
      add.reads = {acc, Slice{delta, off, acc.count}};
      add.writes = {acc};
      insert_op(x, at.rank, at.stream, ++at.index, make_op(next, add, sum_ids));
    }
  }
}

}  // namespace braid::fusion::passes::moe

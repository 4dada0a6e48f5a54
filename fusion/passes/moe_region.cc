// Building the MoE block rewrite's regions (moe_region.h).
#include "fusion/passes/moe_region.h"

#include <set>

#include "fusion/passes/chimera_util.h"

namespace braid::fusion::passes::moe {

bool Region::build(std::string& why) {
  const Collective& sc = *s_.op(seed_).collective();
  n_ = sc.out.count;
  tp_comm_ = sc.comm;
  add(seed_, Role::Seed);
  std::vector<Value> work{{seed_, sc.out, Kind::Token}};
  std::vector<std::pair<size_t, OpRef>> pending;  // (value, positional reader) to settle
  while (!work.empty()) {
    Value v = work.back();
    work.pop_back();
    const size_t vi = values_.size();
    values_.push_back(v);
    Uses u = df_.uses_after(v.writer, v.slice);
    if (!u.known())
      return fail(why, "the uses of '" + v.slice.buffer + "' after " + describe(s_, v.writer) +
                           " cannot be known");
    if (!u.live_at_end.empty()) outside_.push_back({vi, std::nullopt});
    for (const auto& use : u.readers) {
      const OpRef rd = use.op;
      if (has(ops_, rd)) continue;
      const Op& op = s_.op(rd);
      const Compute* c = op.compute();
      const Collective* k = op.collective();
      if (c && !c->opaque && c->row_wise()) {
        add(rd, c->sum_rows ? Role::Sum : Role::Rows);
        if (!c->sum_rows)
          for (const Slice& w : c->writes) work.push_back({rd, w, Kind::Row});
      } else if (k && k->op == CollOp::AllToAll && v.kind == Kind::Row) {
        const Comm* comm = s_.find_comm(k->comm);
        ep_ = comm ? static_cast<int>(comm->ranks.size()) : 0;
        add(rd, Role::AllToAll);
        work.push_back({rd, k->out, Kind::Row});
      } else if (k && k->op == CollOp::ReduceScatter && k->comm == tp_comm_ &&
                 v.kind != Kind::Exit && k->in == v.slice && k->count * t_ == v.slice.count) {
        // Summing t copies of a value every TP rank holds the same: a local sum.
        add(rd, Role::LocalSum);
      } else if (c && !c->opaque && positional_token_op(*c)) {
        if (has(pre_, rd) && v.kind == Kind::Token) {
          add(rd, Role::Positional);
          for (const Slice& w : c->writes) work.push_back({rd, w, Kind::Token});
        } else if (v.kind == Kind::Row) {
          // Right after the MoE block (the residual add, the norm's backward).
          add(rd, Role::Positional);
          for (const Slice& w : c->writes) work.push_back({rd, w, Kind::Exit});
        } else {
          pending.push_back({vi, rd});
        }
      } else {
        outside_.push_back({vi, use});
      }
    }
  }
  for (const auto& [vi, rd] : pending)
    if (!has(ops_, rd)) {
      Uses u = df_.uses_after(values_[vi].writer, values_[vi].slice);
      for (const auto& use : u.readers)
        if (use.op == rd) outside_.push_back({vi, use});
    }
  std::sort(ops_.begin(), ops_.end());
  for (const OpRef& r : ops_)
    if (r.stream != seed_.stream)
      return fail(why, describe(s_, r) + " is on another stream than " + describe(s_, seed_));
  if (!orders(why)) return false;
  // Reads from outside the region: the rank's own shard of a token-order value needs nothing,
  // the whole of it an all-gather after its writer; a value in the experts' order cannot be.
  for (const Outside& o : outside_) {
    const Value& v = values_[o.value];
    const Order ord = order_of(v);
    const Slice own = v.slice.sub(index_ * (v.slice.count / t_), v.slice.count / t_);
    if (o.use && o.use->elems.within(own.offset, own.end())) continue;
    if (ord == Order::Dest)
      return fail(why, "'" + v.slice.buffer + "' (rows in the experts' order) is " +
                           (o.use ? "also read by " + describe(s_, o.use->op)
                                  : std::string("a result of the step")));
    add_exit(v.writer, v.slice);
  }
  return true;
}

std::optional<Order> Region::read_order(OpRef at, const Slice& sl) const {
  std::optional<Order> o;
  for (const OpRef& w : ops_) {
    if (!(w < at)) break;
    for (const auto& [x, ord] : written_[w])
      if (x.overlaps(sl)) o = ord;
  }
  return o ? o : Order::Token;
}

Order Region::order_of(const Value& v) const {
  for (const auto& [x, ord] : written_.at(v.writer))
    if (x == v.slice) return ord;
  return Order::Token;
}

bool Region::orders(std::string& why) {
  for (const OpRef& r : ops_) {
    auto& out = written_[r];
    const Op& op = s_.op(r);
    const Role ro = role_.at(r);
    if (ro == Role::Seed || ro == Role::Positional) {
      for (const Slice& w : access_of(s_, r.rank, op).writes) out.push_back({w, Order::Token});
      continue;
    }
    if (ro == Role::AllToAll) {
      const Collective& k = *op.collective();
      if (read_order(r, k.in) != Order::Dest)
        return fail(why, describe(s_, r) + " sends rows in token order");
      out.push_back({k.out, Order::Dest});
      continue;
    }
    if (ro == Role::LocalSum) {
      const Collective& k = *op.collective();
      if (read_order(r, k.in) != Order::Token)
        return fail(why, describe(s_, r) + " reduces rows in the experts' order");
      continue;
    }
    const Compute& c = *op.compute();
    std::optional<Order> plain, flipped;
    for (size_t k = 0; k < c.reads.size(); ++k) {
      if (c.read_rows[k] == 0) continue;
      const Order o = *read_order(r, c.reads[k]);
      const bool tr = std::find(c.transposed_reads.begin(), c.transposed_reads.end(),
                                static_cast<int64_t>(k)) != c.transposed_reads.end();
      auto& slot = tr ? flipped : plain;
      if (slot && *slot != o) return fail(why, describe(s_, r) + " reads rows in two orders");
      slot = o;
    }
    Order w = Order::Token;
    if (flipped) w = *flipped == Order::Token ? Order::Dest : Order::Token;
    if (plain && flipped && *plain != w)
      return fail(why, describe(s_, r) + " reads rows in two orders");
    if (plain && !flipped) w = *plain;
    write_order_[r] = w;
    if (ro == Role::Rows)
      for (const Slice& x : c.writes) out.push_back({x, w});
  }
  return true;
}

bool build_regions(const Dataflow& df, const std::vector<Cand>& cands,
                   const std::vector<size_t>& comp, int t, const std::string& seed_name,
                   std::vector<Region>& regions, std::string& why) {
  const Schedule& s = df.schedule();
  for (size_t k : comp) {
    const MatchGroup& g = *cands[k].seed;
    const Comm& tp = *s.find_comm(s.op(g.members[0]).collective()->comm);
    if (static_cast<int>(tp.ranks.size()) != t) {
      why = "the " + seed_name + "s are over groups of different sizes";
      return false;
    }
    for (size_t j = 0; j < g.members.size(); ++j) {
      const Collective& c = *s.op(g.members[j]).collective();
      if (c.out.count % t) {
        why = "the " + seed_name + "'s " + std::to_string(c.out.count) + " elements do not split " +
              std::to_string(t) + " ways";
        return false;
      }
      regions.emplace_back(df, g.members[j], cands[k].via[j], t, tp.index_of(g.members[j].rank));
      if (!regions.back().build(why)) return false;
    }
  }
  // Every collective in a region has all its members inside the component's regions.
  std::set<OpRef> inside;
  for (const Region& r : regions) inside.insert(r.ops().begin(), r.ops().end());
  for (const Region& r : regions)
    for (const OpRef& o : r.ops()) {
      if (r.role(o) != Role::AllToAll && r.role(o) != Role::LocalSum) continue;
      const MatchGroup* g = df.group(o);
      if (!g) {
        why = describe(s, o) + " has no match";
        return false;
      }
      for (const OpRef& m : g->members)
        if (!inside.count(m)) {
          why = describe(s, m) + " belongs to " + op_name(s.op(o)) + " but is outside the rewrite";
          return false;
        }
    }
  return true;
}

}  // namespace braid::fusion::passes::moe

#include "fusion/passes/moe_block.h"

#include <map>
#include <optional>
#include <set>

#include "fusion/passes/chimera_util.h"
#include "fusion/passes/replicas.h"

namespace braid::fusion::passes {
namespace {

enum class Role : uint8_t { Seed, Positional, Rows, Sum, AllToAll, LocalSum };
enum class Order : uint8_t { Token, Dest };

bool has(const std::vector<OpRef>& v, OpRef r) {
  return std::find(v.begin(), v.end(), r) != v.end();
}

// The region of one rank (moe_block.h): every op the rewrite shards, found from the seed.
class Region {
 public:
  Region(const Dataflow& df, OpRef seed, std::vector<OpRef> pre, int t, int index)
      : df_(df), s_(df.schedule()), seed_(seed), pre_(std::move(pre)), t_(t), index_(index) {}

  // False with `why` when the region has a shape the rewrite cannot shard.
  bool build(std::string& why) {
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

  const std::vector<OpRef>& ops() const { return ops_; }
  Role role(OpRef r) const { return role_.at(r); }
  const std::vector<std::pair<OpRef, Slice>>& exits() const { return exits_; }
  int64_t n() const { return n_; }
  int ep() const { return ep_; }
  // Order of the rows `r` writes (row-wise compute).
  Order write_order(OpRef r) const { return write_order_.at(r); }

 private:
  enum class Kind : uint8_t { Token, Row, Exit };
  struct Value {
    OpRef writer;
    Slice slice;
    Kind kind;
  };
  struct Outside {
    size_t value;
    std::optional<Uses::Use> use;  // nullopt: live at the end of the step
  };

  // A positional compute whose every slice has the seed's element count: element j of the
  // output depends on element j of the inputs, so it splits by rows.
  bool positional_token_op(const Compute& c) const {
    if (c.writes.empty()) return false;
    for (const auto* v : {&c.reads, &c.writes})
      for (const Slice& sl : *v)
        if (sl.count != n_) return false;
    return true;
  }
  void add(OpRef r, Role role) {
    ops_.push_back(r);
    role_[r] = role;
  }
  void add_exit(OpRef w, const Slice& sl) {
    for (const auto& [x, y] : exits_)
      if (x == w && y == sl) return;
    exits_.push_back({w, sl});
  }
  static bool fail(std::string& why, std::string w) {
    why = std::move(w);
    return false;
  }

  // The order of the rows a region slice holds where `at` reads it: that of the region op that
  // wrote it last before `at`, token order for values from outside (activations).
  std::optional<Order> read_order(OpRef at, const Slice& sl) const {
    std::optional<Order> o;
    for (const OpRef& w : ops_) {
      if (!(w < at)) break;
      for (const auto& [x, ord] : written_[w])
        if (x.overlaps(sl)) o = ord;
    }
    return o ? o : Order::Token;
  }
  Order order_of(const Value& v) const {
    for (const auto& [x, ord] : written_.at(v.writer))
      if (x == v.slice) return ord;
    return Order::Token;
  }

  // Which order (tokens, or the experts' destinations) each region op's rows are in: seed and
  // positional compute hold tokens, all-to-alls destinations, row-wise compute the order of its
  // reads, flipped by a transpose. Inconsistent orders cannot be sharded.
  bool orders(std::string& why) {
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

  const Dataflow& df_;
  const Schedule& s_;
  OpRef seed_;
  std::vector<OpRef> pre_;
  int t_ = 0, index_ = 0;
  int64_t n_ = 0;
  std::string tp_comm_;
  int ep_ = 0;
  std::vector<OpRef> ops_;
  std::map<OpRef, Role> role_;
  std::vector<Value> values_;
  std::vector<Outside> outside_;
  std::vector<std::pair<OpRef, Slice>> exits_;
  mutable std::map<OpRef, std::vector<std::pair<Slice, Order>>> written_;
  std::map<OpRef, Order> write_order_;
};

// One rank's part of the rewrite, by op id (ids survive other findings' rewrites).
struct RankPlan {
  int32_t rank = -1;
  int index = 0;  // position in the TP communicator: which 1/t of the tokens
  std::string tp_comm;
  struct Item {
    int64_t id = -1;
    Role role = Role::Positional;
  };
  std::vector<Item> ops;                         // stream order
  std::vector<std::pair<int64_t, Slice>> exits;  // values all-gathered after their writer
  std::vector<std::pair<Slice, Slice>>
      redirects;              // a sharded read of a gathered value -> its input
  std::vector<int64_t> drop;  // all-gathers no longer read
  bool keep_seed = false;     // an all-gather seed still read in full
};

struct Plan {
  CollOp seed = CollOp::AllReduce;
  int t = 0;
  std::vector<RankPlan> ranks;
  std::string delta_stem;
  Ns add_ns = 0;        // one gradient add per accumulated weight
  Ns local_sum_ns = 0;  // t local additions replacing a reduce-scatter
};

struct Cand {
  const MatchGroup* seed;
  std::vector<const MatchGroup*> a2a;   // per member, the nearest all-to-all
  std::vector<std::vector<OpRef>> via;  // per member, the compute on the way
  bool routed = false;                  // a routing transpose on the way
};

class Finder {
 public:
  Finder(const Dataflow& df, const analysis::CostModel& cm, CollOp seed, std::string pass,
         bool direct)
      : df_(df), s_(df.schedule()), cm_(cm), seed_(seed), pass_(std::move(pass)), direct_(direct) {}

  void run(const Focus* focus, std::vector<Finding>& out) {
    std::vector<Cand> cands;
    std::map<const MatchGroup*, std::vector<size_t>> by_a2a;
    for (const MatchGroup& g : df_.matching().groups) {
      if (g.op != seed_) continue;
      // A focused search (the pipeline's look-ahead) only from seeds it names: the reach to the
      // all-to-all is the costly part of the search.
      if (focus && !focus->hits(s_, g.members)) continue;
      const Comm* tp = s_.find_comm(s_.op(g.members[0]).collective()->comm);
      if (!tp || tp->ranks.size() < 2) continue;
      Cand c{&g, {}, {}, true};
      bool ok = true;
      for (const OpRef& m : g.members) {
        auto r = reach(df_, m, s_.op(m).collective()->out, CollOp::AllToAll, 4);
        if (r.empty()) {
          ok = false;
          break;
        }
        // Row-wise compute on the way without the routing transpose: the TP ranks already
        // route different tokens (a block rewritten before) or route in a layout this rule is
        // not about.
        bool rows = false, routed = false;
        for (const OpRef& v : r[0].via) {
          rows = rows || s_.op(v).compute()->row_wise();
          routed = routed || !s_.op(v).compute()->transpose.empty();
        }
        ok = ok && (routed || !rows);
        c.routed = c.routed && routed;
        c.a2a.push_back(r[0].group);
        c.via.push_back(r[0].via);
      }
      if (!ok) continue;
      bool all_direct = true;
      for (const auto& v : c.via) all_direct = all_direct && v.empty();
      if (all_direct && !direct_) continue;
      for (const MatchGroup* a : c.a2a) by_a2a[a].push_back(cands.size());
      cands.push_back(std::move(c));
    }
    // Components: seeds sharing an all-to-all are rewritten together (every TP group whose
    // ranks dispatch to each other), in schedule order.
    std::vector<bool> done(cands.size(), false);
    for (size_t ci = 0; ci < cands.size(); ++ci) {
      if (done[ci]) continue;
      std::vector<size_t> comp{ci};
      done[ci] = true;
      for (size_t k = 0; k < comp.size(); ++k)
        for (const MatchGroup* a : cands[comp[k]].a2a)
          for (size_t o : by_a2a[a])
            if (!done[o]) {
              done[o] = true;
              comp.push_back(o);
            }
      bool in_focus = !focus;
      for (size_t k : comp) in_focus = in_focus || focus->hits(s_, cands[k].seed->members);
      if (in_focus) component(cands, comp, out);
    }
  }

 private:
  void component(const std::vector<Cand>& cands, const std::vector<size_t>& comp,
                 std::vector<Finding>& out) {
    const MatchGroup& g0 = *cands[comp[0]].seed;
    const Comm& tp = *s_.find_comm(s_.op(g0.members[0]).collective()->comm);
    const int t = static_cast<int>(tp.ranks.size());
    std::vector<const MatchGroup*> a2as;
    bool routed = true;
    for (size_t k : comp) {
      routed = routed && cands[k].routed;
      for (const MatchGroup* a : cands[k].a2a)
        if (std::find(a2as.begin(), a2as.end(), a) == a2as.end()) a2as.push_back(a);
    }
    Finding f;
    f.pass = pass_;
    f.summary = summary(g0, *a2as[0], t);
    std::string why;
    std::vector<Region> regions;
    std::optional<Plan> plan;
    if (!routed) {
      why = "no row-wise routing (permute) between the " + seed_name() +
            " and the all-to-all shows which tokens each rank dispatches";
    } else {
      const bool built = build(cands, comp, t, regions, why);
      // A region overlapping one found before (the backward's collective reaching the same
      // block's backward) is part of that finding.
      for (const Region& r : regions)
        for (const OpRef& o : r.ops())
          if (claimed_.count(s_.op(o).id)) return;
      if (built) plan = make_plan(cands, comp, regions, t, why);
    }
    for (size_t k : comp)
      for (int64_t id : member_ids(s_, *cands[k].seed)) f.ops.push_back(id);
    for (const MatchGroup* a : a2as)
      for (int64_t id : member_ids(s_, *a)) f.ops.push_back(id);
    for (const Region& r : regions)
      for (const OpRef& o : r.ops()) f.ops.push_back(s_.op(o).id);
    if (plan)
      for (const RankPlan& rp : plan->ranks)
        f.ops.insert(f.ops.end(), rp.drop.begin(), rp.drop.end());
    sort_unique(f.ops);
    // One finding per block: later candidates reaching into this region (the backward's
    // collective reaching the block's backward) are part of it, applied or advice.
    for (const Region& r : regions)
      for (const OpRef& o : r.ops()) claimed_.insert(s_.op(o).id);
    for (size_t k : comp)
      for (int32_t r : member_ranks(*cands[k].seed)) f.ranks.push_back(r);
    for (const MatchGroup* a : a2as)
      for (int32_t r : member_ranks(*a)) f.ranks.push_back(r);
    sort_unique(f.ranks);
    if (plan) {
      saving(*plan, regions[0], f);
      f.legal = true;
      f.rewrite = [p = *plan](Schedule& x) { apply_plan(x, p); };
    } else {
      closed_form(cands, comp, a2as, t, f);
      f.legal = false;
      f.assumption = assumption(t) + (why.empty() ? std::string() : " (not applied: " + why + ")");
    }
    out.push_back(std::move(f));
  }

  std::string seed_name() const { return seed_ == CollOp::AllReduce ? "all-reduce" : "all-gather"; }

  std::string summary(const MatchGroup& g, const MatchGroup& a, int t) const {
    const std::string frac = "1/" + std::to_string(t);
    std::string head = op_name(s_.op(g.members[0])) + " + " + op_name(s_.op(a.members[0]));
    if (seed_ == CollOp::AllReduce)
      return head + " -> reduce-scatter, the MoE block on " + frac +
             " of the tokens per TP rank (all-to-alls of " + frac + "), all-gather after it";
    return head + " -> the MoE block on the rank's own sequence shard (all-to-alls of " + frac +
           ", no all-gather)";
  }

  std::string assumption(int t) const {
    const std::string n = std::to_string(t);
    if (seed_ == CollOp::AllReduce)
      return "assumes the " + n + " tensor-parallel ranks may each dispatch and process 1/" + n +
             " of the tokens (identical expert work on every TP rank; the all-gather moves after "
             "the combine)";
    return "assumes the routing / permutation can work on the rank's own sequence shard, so each "
           "rank dispatches only its own tokens";
  }

  // Advice: the all-to-alls' (t-1)/t, plus the all-gather for sp-ep (Chimera's closed forms).
  void closed_form(const std::vector<Cand>& cands, const std::vector<size_t>& comp,
                   const std::vector<const MatchGroup*>& a2as, int t, Finding& f) const {
    int64_t wire = 0;
    Ns ns = 0;
    for (const MatchGroup* a : a2as) {
      wire = std::max(wire, group_wire_bytes(s_, *a));
      const Collective& c = *s_.op(a->members[0]).collective();
      const Comm* comm = s_.find_comm(c.comm);
      ns = std::max(
          ns, group_ns(s_, *a, cm_) -
                  cm_.collective_ns(CollOp::AllToAll, collective_bytes(s_, c) / t,
                                    static_cast<int>(comm->ranks.size()), c.comm, comm->ranks));
    }
    f.saving_bytes = wire - wire / t;
    f.saving_ns = ns;
    if (seed_ == CollOp::AllGather) {
      f.saving_bytes += group_wire_bytes(s_, *cands[comp[0]].seed);
      f.saving_ns += group_ns(s_, *cands[comp[0]].seed, cm_);
    }
  }

  bool build(const std::vector<Cand>& cands, const std::vector<size_t>& comp, int t,
             std::vector<Region>& regions, std::string& why) const {
    for (size_t k : comp) {
      const MatchGroup& g = *cands[k].seed;
      const Comm& tp = *s_.find_comm(s_.op(g.members[0]).collective()->comm);
      if (static_cast<int>(tp.ranks.size()) != t) {
        why = "the " + seed_name() + "s are over groups of different sizes";
        return false;
      }
      for (size_t j = 0; j < g.members.size(); ++j) {
        const Collective& c = *s_.op(g.members[j]).collective();
        if (c.out.count % t) {
          why = "the " + seed_name() + "'s " + std::to_string(c.out.count) +
                " elements do not split " + std::to_string(t) + " ways";
          return false;
        }
        regions.emplace_back(df_, g.members[j], cands[k].via[j], t, tp.index_of(g.members[j].rank));
        if (!regions.back().build(why)) return false;
      }
    }
    // Every collective in a region has all its members inside the component's regions.
    std::set<OpRef> inside;
    for (const Region& r : regions) inside.insert(r.ops().begin(), r.ops().end());
    for (const Region& r : regions)
      for (const OpRef& o : r.ops()) {
        if (r.role(o) != Role::AllToAll && r.role(o) != Role::LocalSum) continue;
        const MatchGroup* g = df_.group(o);
        if (!g) {
          why = describe(s_, o) + " has no match";
          return false;
        }
        for (const OpRef& m : g->members)
          if (!inside.count(m)) {
            why = describe(s_, m) + " belongs to " + op_name(s_.op(o)) +
                  " but is outside the rewrite";
            return false;
          }
      }
    return true;
  }

  std::optional<Plan> make_plan(const std::vector<Cand>& cands, const std::vector<size_t>& comp,
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
          plan.add_ns = std::max(plan.add_ns,
                                 cm_.compute_ns(double(w.count), 3.0 * double(w.count) * db, db));
        } else if (r.role(o) == Role::LocalSum) {
          const Collective& k = *s_.op(o).collective();
          const double n = double(k.count), db = double(dtype_bytes_of(k.dtype));
          plan.local_sum_ns =
              std::max(plan.local_sum_ns,
                       cm_.compute_ns(n * (t - 1), n * (t + 1) * db, static_cast<int>(db)));
        }
      }
    return plan;
  }

  // All-gathers over the rank's TP group whose output a region op reads: the rank's own shard
  // of it is the all-gather's input, which the sharded read takes instead; an all-gather no one
  // else reads (and not a result) goes. The seed all-gather included.
  void gathers(const Region& r, OpRef seed, RankPlan& rp) const {
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

  // Can compute `c` (role in the region) run on 1/t of its rows?
  bool shardable(const Compute& c, Role role, int t, const Region& r, OpRef o,
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

  // Reads of region op `o` whose values come from outside the region (sum accumulators
  // excluded: the rewrite adds into them after the All-Reduce of the partial sums).
  std::vector<Slice> external_reads(const Region& r, OpRef o) const {
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

  // Predicted saving on the first rank of the component.
  void saving(const Plan& plan, const Region& r, Finding& f) const {
    const int t = plan.t;
    const RankPlan& rp = plan.ranks[0];
    const Comm& tp = *s_.find_comm(rp.tp_comm);
    auto hypothetical = [&](CollOp op, const std::string& dtype, int64_t count, Ns& ns) {
      Collective c;
      c.op = op;
      c.comm = rp.tp_comm;
      c.dtype = dtype;
      c.count = count;
      ns = cm_.collective_ns(op, collective_bytes(s_, c), t, rp.tp_comm, tp.ranks);
      return wire_bytes(s_, c, rp.rank);
    };
    int64_t bytes = 0, delta = 0;
    Ns ns = 0;
    std::string delta_dtype;
    for (const OpRef& o : r.ops()) {
      const Op& op = s_.op(o);
      if (const Compute* c = op.compute()) {
        ns += c->duration_ns - c->duration_ns / t;
        if (c->sum_rows) {
          delta += c->writes[0].count;
          delta_dtype = s_.ranks[o.rank].find_buffer(c->writes[0].buffer)->dtype;
          ns -= plan.add_ns;
        }
        continue;
      }
      const Collective& c = *op.collective();
      const MatchGroup* g = df_.group(o);
      const int64_t w = wire_bytes(s_, c, o.rank);
      switch (r.role(o)) {
        case Role::Seed:
          if (seed_ == CollOp::AllReduce) {
            Ns rs = 0;
            bytes += w - hypothetical(CollOp::ReduceScatter, c.dtype, c.count / t, rs);
            ns += group_ns(s_, *g, cm_) - rs;
          } else if (!rp.keep_seed) {
            bytes += w;
            ns += group_ns(s_, *g, cm_);
          }
          break;
        case Role::LocalSum:
          bytes += w;
          ns += group_ns(s_, *g, cm_) - plan.local_sum_ns;
          break;
        default: {
          const Comm* comm = s_.find_comm(c.comm);
          bytes += w - w / t;
          ns += group_ns(s_, *g, cm_) -
                cm_.collective_ns(CollOp::AllToAll, collective_bytes(s_, c) / t,
                                  static_cast<int>(comm->ranks.size()), c.comm, comm->ranks);
        }
      }
    }
    for (int64_t id : rp.drop) {
      const OpRef at = must_find(s_, id);
      bytes += wire_bytes(s_, *s_.op(at).collective(), at.rank);
      ns += group_ns(s_, *df_.group(at), cm_);
    }
    for (const auto& [w, sl] : rp.exits) {
      Ns ag = 0;
      const Buffer* b = s_.ranks[rp.rank].find_buffer(sl.buffer);
      bytes -= hypothetical(CollOp::AllGather, b->dtype, sl.count / t, ag);
      ns -= ag;
    }
    if (delta > 0) {
      Ns ar = 0;
      bytes -= hypothetical(CollOp::AllReduce, delta_dtype, delta, ar);
      ns -= ar;
    }
    f.saving_bytes = bytes;
    f.saving_ns = ns;
  }

  static void apply_plan(Schedule& x, const Plan& p) {
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

  const Dataflow& df_;
  const Schedule& s_;
  const analysis::CostModel& cm_;
  CollOp seed_;
  std::string pass_;
  bool direct_ = true;
  std::set<int64_t> claimed_;
};

}  // namespace

void find_moe_rewrites(const Dataflow& df, const analysis::CostModel& cm, const Focus* focus,
                       CollOp seed, const std::string& pass, bool direct,
                       std::vector<Finding>& out) {
  Finder(df, cm, seed, pass, direct).run(focus, out);
}

}  // namespace braid::fusion::passes

// tp-ep (Chimera TP+EP): an All-Reduce over the tensor-parallel group whose result reaches the
// MoE dispatch All-to-All on every member. The MoE block is not split by TP, so every TP rank
// routes, dispatches, runs the experts on and combines the same tokens. Reduce-scatter instead,
// run the block (the residual and norm before it, the router, permute, experts, un-permute and
// the residual after it, and their backward) on the rank's 1/t of the tokens, so the All-to-Alls
// carry 1/t, and all-gather the values the rest of the step reads in full (the layer's output,
// the input gradient). The weight gradients of the block (router, experts) become partial sums
// over the rank's tokens, added up by one All-Reduce over the TP group into the gradients.
//
// The region the rewrite touches is found from data flow on each rank (RegionBuilder below);
// it is legal when every region op is declared compute replicated
// over the TP group (positional with one slice size, or row-wise: Compute::read_rows), every
// value it reads from outside is provably the same on the TP ranks (fusion/passes/replicas.h),
// the routing transposes exactly the TP x EP grid of token segments, and every All-to-All in it
// has all its members inside the rewrite. Otherwise advice, with the reason.
#include <map>
#include <numeric>
#include <set>

#include "fusion/passes/chimera_util.h"
#include "fusion/passes/replicas.h"

namespace braid::fusion::passes {
namespace {

enum class Role : uint8_t { Seed, Positional, Rows, Sum, AllToAll };

// One rank's part of the rewrite, by op id (the ids survive other findings' rewrites).
struct RankPlan {
  int32_t rank = -1;
  int index = 0;  // position in the TP communicator: which 1/t of the tokens
  std::string tp_comm;
  struct Item {
    int64_t id = -1;
    Role role = Role::Positional;
  };
  std::vector<Item> ops;                       // stream order
  std::vector<std::pair<int64_t, Slice>> exits;  // values to all-gather after their writer
};

struct Plan {
  std::string tp_comm;
  int t = 0;
  std::vector<RankPlan> ranks;
  std::string delta_stem;
  Ns add_ns = 0;  // one gradient add per accumulated weight
};

bool has(const std::vector<OpRef>& v, OpRef r) { return std::find(v.begin(), v.end(), r) != v.end(); }

// The region of one rank: every op the rewrite shards, found from the seed All-Reduce.
class RegionBuilder {
 public:
  RegionBuilder(const Dataflow& df, OpRef seed, const std::vector<OpRef>& pre)
      : df_(df), s_(df.schedule()), seed_(seed), pre_(pre) {}

  // False with `why` when the region has a shape the rewrite cannot shard.
  bool build(std::string& why) {
    const Collective& ar = *s_.op(seed_).collective();
    n_ = ar.count;
    ops_.push_back(seed_);
    role_[seed_] = Role::Seed;
    std::vector<Item> work{{seed_, ar.out, Kind::Token}};
    std::vector<std::pair<Item, OpRef>> pending;  // positional readers of token values
    while (!work.empty()) {
      Item it = work.back();
      work.pop_back();
      Uses u = df_.uses_after(it.writer, it.value);
      if (!u.known()) return fail(why, "the uses of '" + it.value.buffer + "' after " +
                                           describe(s_, it.writer) + " cannot be known");
      if (!u.live_at_end.empty()) {
        if (it.kind == Kind::Row) return fail(why, "'" + it.value.buffer + "' is a result of the step");
        add_exit(it);
      }
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
        } else if (k && k->op == CollOp::AllToAll && it.kind == Kind::Row) {
          feeds_a2a_.insert(it.writer);
          const Comm* comm = s_.find_comm(k->comm);
          ep_ = comm ? static_cast<int>(comm->ranks.size()) : 0;
          add(rd, Role::AllToAll);
          work.push_back({rd, k->out, Kind::Row});
        } else if (c && !c->opaque && positional_token_op(*c)) {
          if (has(pre_, rd) && it.kind == Kind::Token) {
            add(rd, Role::Positional);
            for (const Slice& w : c->writes) work.push_back({rd, w, Kind::Token});
          } else if (it.kind == Kind::Row) {
            // After the MoE block (the residual add, the norm's backward): its outputs go back
            // to the full tensor through an all-gather.
            add(rd, Role::Positional);
            for (const Slice& w : c->writes) work.push_back({rd, w, Kind::Exit});
          } else {
            pending.push_back({it, rd});
          }
        } else if (it.kind != Kind::Row) {
          add_exit(it);
        } else {
          return fail(why, "'" + it.value.buffer + "' (token rows in the experts' order) is also "
                           "read by " + describe(s_, rd));
        }
      }
    }
    // Positional readers of token values that did not join the region need the full value.
    for (const auto& [it, rd] : pending)
      if (!has(ops_, rd)) add_exit(it);
    std::sort(ops_.begin(), ops_.end());
    for (const OpRef& r : ops_)
      if (r.stream != seed_.stream)
        return fail(why, describe(s_, r) + " is on another stream than " + describe(s_, seed_));
    return true;
  }

  const std::vector<OpRef>& ops() const { return ops_; }
  Role role(OpRef r) const { return role_.at(r); }
  const std::vector<std::pair<OpRef, Slice>>& exits() const { return exits_; }
  int64_t n() const { return n_; }
  // True when an output of `r` is dispatched (destination order).
  bool feeds_all_to_all(OpRef r) const { return feeds_a2a_.count(r) > 0; }
  int ep() const { return ep_; }  // the all-to-alls' group size

 private:
  enum class Kind : uint8_t { Token, Row, Exit };
  struct Item {
    OpRef writer;
    Slice value;
    Kind kind;
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
  void add_exit(const Item& it) {
    for (const auto& [w, sl] : exits_)
      if (w == it.writer && sl == it.value) return;
    exits_.push_back({it.writer, it.value});
  }
  static bool fail(std::string& why, std::string w) {
    why = std::move(w);
    return false;
  }

  const Dataflow& df_;
  const Schedule& s_;
  OpRef seed_;
  std::vector<OpRef> pre_;
  int64_t n_ = 0;
  std::vector<OpRef> ops_;
  std::map<OpRef, Role> role_;
  std::vector<std::pair<OpRef, Slice>> exits_;
  std::set<OpRef> feeds_a2a_;
  int ep_ = 0;
};

class TpEp : public Pass {
 public:
  std::string_view name() const override { return "tp-ep"; }
  std::string_view description() const override {
    return "All-Reduce + All-to-All -> Reduce-Scatter, the MoE block on 1/t of the tokens "
           "(All-to-Alls of 1/t), All-Gather after it";
  }

  std::vector<Finding> find_in(const Schedule& s, const analysis::CostModel& cm,
                               const Focus* focus) const override {
    std::vector<Finding> out;
    std::optional<Dataflow> own_df;
    const Dataflow& df = dataflow_of(s, focus, own_df);
    const auto& groups = df.matching().groups;
    // Candidates: all-reduces over a group of t >= 2 whose every member reaches an all-to-all
    // (the nearest), through compute, with a routing transpose on the way.
    struct Cand {
      const MatchGroup* ar;
      std::vector<const MatchGroup*> a2a;      // per member
      std::vector<std::vector<OpRef>> via;     // per member
      bool routed = false;  // a routing transpose on the way (else advice only)
    };
    std::vector<Cand> cands;
    std::map<const MatchGroup*, std::vector<size_t>> by_a2a;
    for (const MatchGroup& g : groups) {
      if (g.op != CollOp::AllReduce) continue;
      const Collective& c0 = *s.op(g.members[0]).collective();
      const Comm* tp = s.find_comm(c0.comm);
      if (!tp || tp->ranks.size() < 2) continue;
      Cand c{&g, {}, {}};
      bool ok = true;
      for (const OpRef& m : g.members) {
        auto r = reach(df, m, s.op(m).collective()->out, CollOp::AllToAll, 4);
        if (r.empty()) {
          ok = false;
          break;
        }
        // Row-wise compute on the way without the TP x EP routing transpose: the TP ranks
        // already route different tokens (a block this pass rewrote) or route in a layout this
        // rule is not about.
        bool rows = false, routed = false;
        for (const OpRef& v : r[0].via) {
          rows = rows || s.op(v).compute()->row_wise();
          routed = routed || !s.op(v).compute()->transpose.empty();
        }
        ok = ok && (routed || !rows);
        c.routed = c.routed || routed;
        c.a2a.push_back(r[0].group);
        c.via.push_back(r[0].via);
      }
      if (!ok) continue;
      for (const MatchGroup* a : c.a2a) by_a2a[a].push_back(cands.size());
      cands.push_back(std::move(c));
    }
    // Components: candidates sharing an all-to-all are rewritten together (every TP group
    // whose ranks dispatch to each other), in schedule order.
    std::vector<bool> done(cands.size(), false);
    std::set<int64_t> claimed;
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
      for (size_t k : comp) in_focus = in_focus || focus->hits(s, cands[k].ar->members);
      if (!in_focus) continue;
      std::vector<const MatchGroup*> ars;
      for (size_t k : comp) ars.push_back(cands[k].ar);
      component(df, cm, ars, cands, comp, claimed, out);
    }
    return out;
  }

 private:
  template <typename C>
  void component(const Dataflow& df, const analysis::CostModel& cm,
                 const std::vector<const MatchGroup*>& ars, const std::vector<C>& cands,
                 const std::vector<size_t>& comp, std::set<int64_t>& claimed,
                 std::vector<Finding>& out) const {
    const Schedule& s = df.schedule();
    const Collective& c0 = *s.op(ars[0]->members[0]).collective();
    const Comm& tp = *s.find_comm(c0.comm);
    const int t = static_cast<int>(tp.ranks.size());
    Finding f;
    f.pass = std::string(name());
    std::vector<MatchGroup> all;
    for (const MatchGroup* g : ars) all.push_back(*g);
    std::vector<const MatchGroup*> a2as;
    for (size_t k : comp)
      for (const MatchGroup* a : cands[k].a2a)
        if (std::find(a2as.begin(), a2as.end(), a) == a2as.end()) a2as.push_back(a);
    f.summary = op_name(s.op(ars[0]->members[0])) + " + " + op_name(s.op(a2as[0]->members[0])) +
                " -> reduce-scatter, the MoE block on 1/" + std::to_string(t) +
                " of the tokens per TP rank (all-to-alls of 1/" + std::to_string(t) +
                "), all-gather after it";
    f.legal = false;
    std::string why;
    std::optional<Plan> plan;
    std::vector<RegionBuilder> regions;
    bool routed = true;
    for (size_t k : comp) routed = routed && cands[k].routed;
    if (!routed) {
      why = "no row-wise routing (permute) between the all-reduce and the all-to-all shows which "
            "tokens each rank dispatches";
    } else if (build(df, ars, cands, comp, t, regions, why)) {
      // A region overlapping one already found (the backward's all-reduce reaching the same
      // MoE block's backward) is part of that finding.
      for (const RegionBuilder& r : regions)
        for (const OpRef& o : r.ops())
          if (claimed.count(s.op(o).id)) return;
      plan = make_plan(df, cm, ars, regions, t, why);
    }
    if (plan || !regions.empty()) {
      for (const RegionBuilder& r : regions)
        for (const OpRef& o : r.ops()) f.ops.push_back(s.op(o).id);
    } else {
      for (const MatchGroup* a : a2as) all.push_back(*a);
    }
    for (const MatchGroup& g : all)
      for (int64_t id : member_ids(s, g)) f.ops.push_back(id);
    sort_unique(f.ops);
    for (const MatchGroup& g : all)
      for (int32_t r : member_ranks(g)) f.ranks.push_back(r);
    for (const MatchGroup* a : a2as)
      for (int32_t r : member_ranks(*a)) f.ranks.push_back(r);
    sort_unique(f.ranks);
    if (plan) {
      saving(df, cm, *plan, regions, f);
    } else {
      closed_form(s, cm, a2as, t, f);
    }
    if (plan) {
      f.legal = true;
      f.rewrite = [p = *plan](Schedule& x) { apply_plan(x, p); };
      for (int64_t id : f.ops) claimed.insert(id);
    } else {
      f.assumption = "assumes the " + std::to_string(t) +
                     " tensor-parallel ranks may each dispatch and process 1/" +
                     std::to_string(t) + " of the tokens (identical expert work on every TP rank;"
                     " the all-gather moves after the combine)" +
                     (why.empty() ? std::string() : " (not applied: " + why + ")");
    }
    out.push_back(std::move(f));
  }

  // Advice without a region: the all-to-alls' (t-1)/t.
  static void closed_form(const Schedule& s, const analysis::CostModel& cm,
                          const std::vector<const MatchGroup*>& a2as, int t, Finding& f) {
    int64_t wire = 0;
    Ns ns = 0;
    for (const MatchGroup* a : a2as) {
      wire = std::max(wire, group_wire_bytes(s, *a));
      const Collective& c = *s.op(a->members[0]).collective();
      const Comm* comm = s.find_comm(c.comm);
      ns = std::max(ns, group_ns(s, *a, cm) -
                            cm.collective_ns(CollOp::AllToAll, nccl_bytes(s, c) / t,
                                             static_cast<int>(comm->ranks.size()), c.comm,
                                             comm->ranks));
    }
    f.saving_bytes = wire - wire / t;
    f.saving_ns = ns;
  }

  template <typename C>
  static bool build(const Dataflow& df, const std::vector<const MatchGroup*>& ars,
                    const std::vector<C>& cands, const std::vector<size_t>& comp, int t,
                    std::vector<RegionBuilder>& regions, std::string& why) {
    const Schedule& s = df.schedule();
    for (size_t k = 0; k < comp.size(); ++k) {
      const MatchGroup& g = *ars[k];
      for (size_t j = 0; j < g.members.size(); ++j) {
        const Collective& c = *s.op(g.members[j]).collective();
        if (c.count % t) {
          why = "the all-reduce's " + std::to_string(c.count) + " elements do not split " +
                std::to_string(t) + " ways";
          return false;
        }
        regions.emplace_back(df, g.members[j], cands[comp[k]].via[j]);
        if (!regions.back().build(why)) return false;
      }
    }
    // Every all-to-all in a region has all its members in the component's regions.
    std::set<OpRef> inside;
    for (const RegionBuilder& r : regions) inside.insert(r.ops().begin(), r.ops().end());
    for (const RegionBuilder& r : regions)
      for (const OpRef& o : r.ops()) {
        if (r.role(o) != Role::AllToAll) continue;
        const MatchGroup* g = df.group(o);
        if (!g) {
          why = describe(s, o) + " has no match";
          return false;
        }
        for (const OpRef& m : g->members)
          if (!inside.count(m)) {
            why = describe(s, m) + " is a member of the all-to-all but outside the rewrite";
            return false;
          }
      }
    return true;
  }

  std::optional<Plan> make_plan(const Dataflow& df, const analysis::CostModel& cm,
                                const std::vector<const MatchGroup*>& ars,
                                std::vector<RegionBuilder>& regions, int t,
                                std::string& why) const {
    const Schedule& s = df.schedule();
    const std::string tp_id = s.op(ars[0]->members[0]).collective()->comm;
    Plan plan;
    plan.tp_comm = tp_id;
    plan.t = t;
    plan.delta_stem = "tp-ep." + std::to_string(s.op(ars[0]->members[0]).id) + ".wgrad";
    Replicas replicas(df);
    size_t base = 0;
    for (const MatchGroup* g : ars) {
      const Comm& tp = *s.find_comm(s.op(g->members[0]).collective()->comm);
      if (tp.ranks.size() != static_cast<size_t>(t)) {
        why = "the all-reduces are over groups of different sizes";
        return std::nullopt;
      }
      // The members' regions correspond op by op: the same labels and shapes.
      const RegionBuilder& r0 = regions[base];
      for (size_t j = 0; j < g->members.size(); ++j) {
        const RegionBuilder& rj = regions[base + j];
        if (rj.ops().size() != r0.ops().size()) {
          why = "the TP ranks' MoE blocks differ (" + std::to_string(r0.ops().size()) + " vs " +
                std::to_string(rj.ops().size()) + " ops)";
          return std::nullopt;
        }
      }
      for (size_t k = 0; k < r0.ops().size(); ++k) {
        std::vector<std::pair<OpRef, Slice>> ext_reads;
        std::vector<std::vector<std::pair<OpRef, Slice>>> per_read;
        for (size_t j = 0; j < g->members.size(); ++j) {
          const RegionBuilder& rj = regions[base + j];
          const OpRef o = rj.ops()[k];
          const Op& op = s.op(o);
          if (const Compute* c = op.compute()) {
            if (c->label != s.op(r0.ops()[k]).compute()->label) {
              why = "the TP ranks' MoE blocks differ at " + describe(s, o);
              return std::nullopt;
            }
            if (c->replicated != tp.id) {
              why = describe(s, o) + " is not declared the same function on every rank of '" +
                    tp.id + "' (replicated)";
              return std::nullopt;
            }
            if (!shardable(*c, rj.role(o), t, rj, o, s, why)) return std::nullopt;
            // Reads from outside the region must hold the same values on every TP rank.
            auto ext = external_reads(s, rj, o);
            if (per_read.empty()) per_read.resize(ext.size());
            if (ext.size() != per_read.size()) {
              why = "the TP ranks' MoE blocks differ at " + describe(s, o);
              return std::nullopt;
            }
            for (size_t q = 0; q < ext.size(); ++q) per_read[q].push_back({o, ext[q]});
          } else if (const Collective* kc = op.collective()) {
            if (kc->count % t) {
              why = describe(s, o) + " does not split " + std::to_string(t) + " ways";
              return std::nullopt;
            }
          }
        }
        for (const auto& reads : per_read)
          if (!replicas.same(reads)) {
            why = "'" + reads[0].second.buffer + "' read by " + describe(s, reads[0].first) +
                  " is not provably the same on every rank of '" + tp.id + "'";
            return std::nullopt;
          }
      }
      for (size_t j = 0; j < g->members.size(); ++j) {
        const RegionBuilder& rj = regions[base + j];
        RankPlan rp;
        rp.rank = g->members[j].rank;
        rp.index = tp.index_of(rp.rank);
        rp.tp_comm = tp.id;
        for (const OpRef& o : rj.ops()) rp.ops.push_back({s.op(o).id, rj.role(o)});
        for (const auto& [w, sl] : rj.exits()) {
          if (sl.count != rj.n()) {
            why = "'" + sl.buffer + "' is read whole after the MoE block but is not a token "
                  "activation an all-gather can restore";
            return std::nullopt;
          }
          rp.exits.push_back({s.op(w).id, sl});
        }
        plan.ranks.push_back(std::move(rp));
      }
      base += g->members.size();
    }
    // One elementwise add per accumulated gradient: reads two slices, writes one.
    for (const RegionBuilder& r : regions)
      for (const OpRef& o : r.ops())
        if (r.role(o) == Role::Sum) {
          const Slice& w = s.op(o).compute()->writes[0];
          const Buffer* b = s.ranks[o.rank].find_buffer(w.buffer);
          const int db = b ? static_cast<int>(dtype_bytes_of(b->dtype)) : 2;
          plan.add_ns = std::max(plan.add_ns, cm.compute_ns(double(w.count),
                                                             3.0 * double(w.count) * db, db));
        }
    return plan;
  }

  // Can compute `c` (role in the region) run on 1/t of its rows?
  static bool shardable(const Compute& c, Role role, int t, const RegionBuilder& r, OpRef o,
                        const Schedule& s, std::string& why) {
    auto no = [&](const std::string& w) {
      why = describe(s, o) + ": " + w;
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
      // The routing must transpose exactly the TP x EP grid: token segment i * ep + e <->
      // destination block e * t + i. Then TP rank i's 1/t of the tokens, permuted without the
      // transpose, lands in the same destinations (block e of its part goes to EP rank e).
      // Writing destination order: {ep, t}; back to token order: {t, ep}.
      const int64_t a = c.transpose[0], b = c.transpose[1], ep = r.ep();
      const bool to_dest = r.feeds_all_to_all(o);
      if (to_dest ? (a != ep || b != t) : (a != t || b != ep))
        return no("its routing transposes a " + std::to_string(a) + " x " + std::to_string(b) +
                  " grid, not the " + std::to_string(t) + " TP ranks' token segments x " +
                  std::to_string(ep) + " EP ranks");
    }
    return true;
  }

  // The reads of region op `o` whose values come from outside the region (sum accumulators
  // excluded: the rewrite adds into them after the All-Reduce of the partial sums).
  static std::vector<Slice> external_reads(const Schedule& s, const RegionBuilder& r, OpRef o) {
    const Compute& c = *s.op(o).compute();
    std::vector<Slice> out;
    for (size_t k = 0; k < c.reads.size(); ++k) {
      const Slice& rd = c.reads[k];
      if (c.sum_rows && c.read_rows[k] == 0) continue;
      bool inside = false;
      for (const OpRef& w : r.ops()) {
        if (!(w < o)) break;
        Access a = access_of(s, w.rank, s.op(w));
        for (const Slice& x : a.writes) inside = inside || x.overlaps(rd);
      }
      if (!inside) out.push_back(rd);
    }
    return out;
  }

  // Predicted saving on the first rank of the component: the all-to-alls' (t-1)/t, the
  // all-reduce minus its reduce-scatter, the added all-gathers and gradient all-reduce, and
  // (t-1)/t of the region's compute.
  void saving(const Dataflow& df, const analysis::CostModel& cm, const Plan& plan,
              const std::vector<RegionBuilder>& regions, Finding& f) const {
    const Schedule& s = df.schedule();
    const RegionBuilder& r = regions[0];
    const Comm& tp = *s.find_comm(plan.tp_comm);
    const int t = plan.t;
    auto hypothetical = [&](CollOp op, const std::string& dtype, int64_t count, Ns& ns) {
      Collective c;
      c.op = op;
      c.comm = plan.tp_comm;
      c.dtype = dtype;
      c.count = count;
      ns = cm.collective_ns(op, nccl_bytes(s, c), t, plan.tp_comm, tp.ranks);
      return wire_bytes(s, c, r.ops()[0].rank);
    };
    int64_t bytes = 0;
    Ns ns = 0;
    int64_t delta = 0;
    std::string delta_dtype;
    for (const OpRef& o : r.ops()) {
      const Op& op = s.op(o);
      if (const Compute* c = op.compute()) {
        ns += c->duration_ns - c->duration_ns / t;
        if (c->sum_rows) {
          delta += c->writes[0].count;
          delta_dtype = s.ranks[o.rank].find_buffer(c->writes[0].buffer)->dtype;
          ns -= plan.add_ns;
        }
        continue;
      }
      const Collective& c = *op.collective();
      const MatchGroup* g = df.group(o);
      if (r.role(o) == Role::Seed) {
        Ns rs = 0;
        const int64_t rs_wire = hypothetical(CollOp::ReduceScatter, c.dtype, c.count / t, rs);
        bytes += wire_bytes(s, c, o.rank) - rs_wire;
        ns += group_ns(s, *g, cm) - rs;
      } else {
        const Comm* comm = s.find_comm(c.comm);
        const int64_t w = wire_bytes(s, c, o.rank);
        bytes += w - w / t;
        ns += group_ns(s, *g, cm) - cm.collective_ns(CollOp::AllToAll, nccl_bytes(s, c) / t,
                                                     static_cast<int>(comm->ranks.size()),
                                                     c.comm, comm->ranks);
      }
    }
    for (const auto& [w, sl] : r.exits()) {
      Ns ag = 0;
      const Buffer* b = s.ranks[w.rank].find_buffer(sl.buffer);
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
    int64_t next = x.next_op_id();
    const int t = p.t;
    for (const RankPlan& rp : p.ranks) {
      const int i = rp.index;
      auto shard = [&](const Slice& sl) { return sl.sub(i * (sl.count / t), sl.count / t); };
      std::vector<std::pair<Slice, Slice>> sums;  // (accumulator, its partial sum in delta)
      int64_t delta_size = 0;
      std::string delta_dtype;
      int64_t last_sum = -1;
      std::vector<int64_t> sum_ids;
      for (const RankPlan::Item& it : rp.ops) {
        Op& op = x.op(must_find(x, it.id));
        switch (it.role) {
          case Role::Seed: {
            Collective& c = *op.collective();
            c.op = CollOp::ReduceScatter;
            c.count /= t;
            c.out = shard(c.out);
            break;
          }
          case Role::AllToAll: {
            Collective& c = *op.collective();
            c.count /= t;
            c.in = shard(c.in);
            c.out = shard(c.out);
            break;
          }
          case Role::Positional: {
            Compute& c = *op.compute();
            for (auto* v : {&c.reads, &c.writes})
              for (Slice& sl : *v) sl = shard(sl);
            c.duration_ns /= t;
            break;
          }
          case Role::Rows: {
            Compute& c = *op.compute();
            for (size_t k = 0; k < c.reads.size(); ++k)
              if (c.read_rows[k] > 0) {
                c.reads[k] = shard(c.reads[k]);
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
                reads.push_back(shard(c.reads[k]));
                rows.push_back(c.read_rows[k] / t);
              }
            c.reads = std::move(reads);
            c.read_rows = std::move(rows);
            for (Slice& w : c.writes) {
              if (delta_dtype.empty()) {
                const Buffer* b = x.ranks[rp.rank].find_buffer(w.buffer);
                delta_dtype = b ? b->dtype : "float32";
              }
              Slice part{"", delta_size, w.count};
              sums.push_back({w, part});
              delta_size += w.count;
              w = part;  // buffer named below
            }
            c.duration_ns /= t;
            last_sum = it.id;
            sum_ids.push_back(it.id);
            break;
          }
        }
      }
      // The layer's output and the input gradient go back to every TP rank in full.
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
      if (sums.empty()) continue;
      // The partial weight gradients: one All-Reduce over the TP group, then added into the
      // gradients they accumulated into before.
      std::string delta = p.delta_stem;
      for (int n = 2; x.ranks[rp.rank].find_buffer(delta); ++n) delta = p.delta_stem + "." + std::to_string(n);
      x.add_buffer(rp.rank, delta, delta_dtype, delta_size);
      for (int64_t id : sum_ids) {
        Compute& c = *x.op(must_find(x, id)).compute();
        for (Slice& w : c.writes)
          if (w.buffer.empty()) w.buffer = delta;
      }
      OpRef at = must_find(x, last_sum);
      Collective ar;
      ar.op = CollOp::AllReduce;
      ar.comm = rp.tp_comm;
      ar.dtype = delta_dtype;
      ar.count = delta_size;
      ar.in = ar.out = Slice{delta, 0, delta_size};
      ar.label = p.delta_stem + ".allreduce";
      insert_op(x, at.rank, at.stream, ++at.index, make_op(next, ar, sum_ids));
      for (const auto& [acc, part] : sums) {
        Compute add;
        add.label = p.delta_stem + ".add";
        add.duration_ns = p.add_ns;
        add.fn = "add";
        add.reads = {acc, Slice{delta, part.offset, part.count}};
        add.writes = {acc};
        insert_op(x, at.rank, at.stream, ++at.index, make_op(next, add, sum_ids));
      }
    }
  }
};

}  // namespace

std::unique_ptr<Pass> make_tp_ep() { return std::make_unique<TpEp>(); }

}  // namespace braid::fusion::passes

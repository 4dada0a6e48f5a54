// fusion::lift: a run's ops become the schedule's (fusion/lift.h says what each becomes). One
// Lifter per call: which matched groups become IR collectives, the communicators, then per rank
// the execution-trace plan (buffers, data-flow dependencies, outputs), the waits, and the ops of
// each stream; last the provenance and the report.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "fusion/labels.h"
#include "fusion/lift.h"
#include "trace/error.h"

namespace braid::fusion {

using analysis::CollGroup;
using analysis::CollRef;
using analysis::GpuOp;
using analysis::MatchMethod;
using analysis::OpPos;
using analysis::OpType;
using analysis::RankTimeline;
using analysis::RankTrace;

namespace {

bool expressible(CollOp op) {
  switch (op) {
    case CollOp::AllReduce:
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::Broadcast:
    case CollOp::Reduce:
    case CollOp::AllToAll:
    case CollOp::Send:
    case CollOp::Recv:
      return true;
    default:
      return false;
  }
}

// A collective's input and output element counts on rank `sr` (-1: the side it does not have).
std::pair<int64_t, int64_t> coll_sides(CollOp op, int64_t n, int64_t count, int32_t sr,
                                       int32_t root) {
  switch (op) {
    case CollOp::AllGather:
      return {count, n * count};
    case CollOp::ReduceScatter:
      return {n * count, count};
    case CollOp::AllToAll:
      return {n * count, n * count};
    case CollOp::Send:
      return {count, -1};
    case CollOp::Recv:
      return {-1, count};
    case CollOp::Broadcast:
      return {root == sr ? count : -1, count};
    case CollOp::Reduce:
      return {count, root == sr ? count : -1};
    default:
      return {count, count};
  }
}

// Counts of opaque ops by (short name, reason), for the report.
struct OpaqueCounts {
  std::map<std::pair<std::string, std::string>, int64_t> by;
  void add(std::string_view label, const std::string& why) { ++by[{short_label(label), why}]; }
  std::vector<LiftReport::Opaque> sorted() const {
    std::vector<LiftReport::Opaque> v;
    for (auto& [k, n] : by) v.push_back({k.first, k.second, n});
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.count > b.count; });
    return v;
  }
};

constexpr const char* kNoEt = "the run has no execution trace";
constexpr const char* kNoEtRank = "the rank has no execution trace";
constexpr const char* kNoEtOp =
    "no execution-trace op launched it (outside the execution trace's window)";
constexpr const char* kNoTensors = "its execution-trace op has no tensors";
constexpr const char* kNoEtComm = "no execution-trace op for it: what it writes is unknown";

using Waits = std::map<OpPos, std::vector<OpPos>>;  // consumer -> producers

class Lifter {
 public:
  Lifter(const analysis::RunData& run, const analysis::MatchResult& match, const LiftOptions& opt)
      : run_(run), match_(match), opt_(opt), et_(opt.et && !opt.et->empty() ? opt.et : nullptr) {}

  Schedule build(LiftReport* report) {
    start();
    prepare_ranks();
    choose_groups();
    order_groups();
    communicators();
    for (int32_t r : ids_) lift_rank(r);
    provenance();
    for (size_t i = 0; i < s_.ranks.size(); ++i)
      if (s_.ranks[i].streams.empty()) s_.add_stream(static_cast<int32_t>(i), "idle");
    rep_.ops = static_cast<int64_t>(s_.op_count());
    rep_.timing_deps = deps_;
    rep_.opaque = opaque_.sorted();
    if (report) *report = std::move(rep_);
    return std::move(s_);
  }

 private:
  // The schedule's name and first provenance line; the renumbering of ranks.
  void start() {
    s_.name = "lifted run " + std::to_string(run_.run_id);
    // The file's name, not its path: the schedule is stored in that file, which may be moved.
    if (run_.reader)
      s_.name += " of " + std::filesystem::path(run_.reader->path()).filename().string();
    if (opt_.step >= 0) s_.name += " step " + std::to_string(opt_.step);
    s_.provenance.push_back(lift_provenance_line(run_.run_id, opt_.step));
    s_.lifted = {run_.run_id, opt_.step};
    rep_.execution_trace = et_ != nullptr;
    rep_.step = opt_.step;
    ids_ = run_.rank_ids();
    bool renumbered = false;
    for (size_t i = 0; i < ids_.size(); ++i) {
      srank_[ids_[i]] = static_cast<int32_t>(i);
      renumbered = renumbered || ids_[i] != static_cast<int32_t>(i);
    }
    if (renumbered) {
      std::string m = "schedule ranks 0.." + std::to_string(ids_.size() - 1) + " are trace ranks";
      for (int32_t r : ids_) m += " " + std::to_string(r);
      s_.provenance.push_back(m);
    }
  }

  const RankEtFlow* et_of(int32_t r) const {
    if (!et_) return nullptr;
    auto it = et_->ranks.find(r);
    return it == et_->ranks.end() ? nullptr : &it->second;
  }
  const RankTrace& trace_of(int32_t r) const {
    auto it = with_host_.find(r);
    return it != with_host_.end() ? it->second : run_.ranks.at(r);
  }
  bool in_step(int32_t r, const GpuOp& op) const {
    return opt_.step < 0 || analysis::op_step(trace_of(r), op) == opt_.step;
  }
  bool in_step(const CollRef& m) const {
    const RankTrace& t = run_.ranks.at(m.rank);
    return opt_.step < 0 || t.collective_step(t.collectives[m.index]) == opt_.step;
  }
  int lifted_group(int32_t r, const GpuOp& op) const {
    int g = op.coll >= 0 ? match_.group({r, op.coll}) : -1;
    return g >= 0 && liftable_[g] ? g : -1;
  }

  // A CPU job's compute from its execution traces (on a copy of its rank's trace), the
  // timelines, the step check, and where each rank starts (lifted_spans).
  void prepare_ranks() {
    for (int32_t r : ids_) {
      const RankTrace& t = run_.ranks.at(r);
      if (!et_of(r) || !t.kernels.empty() || !t.memcpys.empty()) continue;
      with_host_[r] = with_host_compute(t, et_, r);
      ++host_ranks_;
    }
    for (int32_t r : ids_) {
      const RankTrace& t = trace_of(r);
      timelines_[r] = analysis::build_timeline(t, opt_.timeline);
      if (opt_.step < 0 || std::any_of(t.steps.begin(), t.steps.end(),
                                       [&](const Step& st) { return st.step == opt_.step; }))
        continue;
      std::set<int64_t> have;
      for (const Step& st : t.steps) have.insert(st.step);
      std::string list;
      for (int64_t h : have) list += (list.empty() ? "" : ", ") + std::to_string(h);
      throw Error(ErrorCode::Usage,
                  (run_.reader ? run_.reader->path() + ": " : std::string()) + "rank " +
                      std::to_string(r) + " of run " + std::to_string(run_.run_id) +
                      " has no step " + std::to_string(opt_.step) +
                      (list.empty() ? " (the trace has no steps)" : " (steps: " + list + ")"));
    }
    spans_ = lifted_spans(run_, match_, opt_.step, et_);
  }

  // The size of a group: its first member's that the trace sizes (a rank whose trace lost the
  // dtype of a call another rank recorded takes the other's: the members agree, matching
  // checked what both know); the first member's reason when none is sized.
  analysis::CollSize group_size(const CollGroup& grp, int64_t n) const {
    analysis::CollSize first;
    for (size_t k = 0; k < grp.members.size(); ++k) {
      const CollRef& m = grp.members[k];
      analysis::CollSize sz =
          analysis::collective_size(run_, run_.ranks.at(m.rank).collectives[m.index], n);
      if (sz.known()) return sz;
      if (k == 0) first = sz;
    }
    return first;
  }

  // Which groups become IR collectives; all members take one member's size (group_size).
  void choose_groups() {
    liftable_.assign(match_.groups.size(), false);
    shape_.assign(match_.groups.size(), {});
    for (size_t g = 0; g < match_.groups.size(); ++g) {
      const CollGroup& grp = match_.groups[g];
      const CollRef& m0 = grp.members[0];
      const braid::Collective& c0 = run_.ranks.at(m0.rank).collectives[m0.index];
      const int64_t n = grp.method == MatchMethod::PointToPoint
                            ? 2
                            : static_cast<int64_t>(analysis::comm_members(run_, grp.comm).size());
      std::string why;
      if (!grp.complete())
        why = "unmatched on some member rank";
      else if (grp.mismatched)
        why = "members disagree (" + grp.problem + ")";
      else if (!expressible(grp.op))
        why = std::string(to_string(grp.op)) + " has no IR form";
      else if (shape_[g] = group_size(grp, n); !shape_[g].known())
        why = shape_[g].why;
      else if ((grp.op == CollOp::Broadcast || grp.op == CollOp::Reduce) &&
               (c0.peer_or_root < 0 || !srank_.count(c0.peer_or_root)))
        why = "root not in the run";
      if (why.empty() && !std::all_of(grp.members.begin(), grp.members.end(),
                                      [&](const CollRef& m) { return in_step(m); }))
        why = "partly outside the step";
      if (why.empty() && grp.op == CollOp::AllToAll)
        for (const CollRef& m : grp.members)
          if (analysis::collective_size(run_, run_.ranks.at(m.rank).collectives[m.index], n)
                  .count != shape_[g].count) {
            ++uneven_;
            break;
          }
      if (why.empty()) {
        liftable_[g] = true;
        continue;
      }
      // Only the parts the lifted step holds are left as opaque compute in it.
      const int64_t here = std::count_if(grp.members.begin(), grp.members.end(),
                                         [&](const CollRef& m) { return in_step(m); });
      if (here > 0) left_opaque_[why] += here;
    }
  }

  // Per communicator, every rank must meet its groups in the same order; drop groups out of
  // order until the orders agree.
  void order_groups() {
    std::map<int32_t, std::vector<int>> local;  // rank -> liftable groups in start order
    for (int32_t r : ids_) {
      const RankTrace& t = run_.ranks.at(r);
      for (int32_t i = 0; i < static_cast<int32_t>(t.collectives.size()); ++i) {
        int g = match_.group({r, i});
        if (g >= 0 && liftable_[g]) local[r].push_back(g);
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (auto& [r, gs] : local) {
        std::map<std::string, int> last;  // comm/channel -> last kept group
        for (int g : gs) {
          if (!liftable_[g]) continue;
          const CollGroup& grp = match_.groups[g];
          std::string key = grp.comm;
          if (grp.method == MatchMethod::PointToPoint) {
            const braid::Collective& c0 =
                run_.ranks.at(grp.members[0].rank).collectives[grp.members[0].index];
            key += "|p2p|" + std::to_string(grp.members[0].rank) + ">" +
                   std::to_string(c0.peer_or_root);
          }
          auto it = last.find(key);
          if (it != last.end() && match_.groups[it->second].seq >= grp.seq) {
            liftable_[g] = false;
            left_opaque_["out of order with other ranks"] +=
                static_cast<int64_t>(grp.members.size());
            changed = true;
            continue;
          }
          last[key] = g;
        }
      }
    }
  }

  // Communicators: members mapped to schedule ranks.
  void communicators() {
    for (size_t g = 0; g < match_.groups.size(); ++g) {
      if (!liftable_[g]) continue;
      const CollGroup& grp = match_.groups[g];
      auto& set = comm_ranks_[lifted_comm_id(grp.comm)];
      if (grp.method == MatchMethod::PointToPoint) {
        for (const CollRef& m : grp.members) set.insert(srank_.at(m.rank));
      } else {
        for (int32_t r : analysis::comm_members(run_, grp.comm)) set.insert(srank_.at(r));
      }
    }
    for (auto& [id, set] : comm_ranks_) s_.comms.push_back({id, {set.begin(), set.end()}});
    for (const Communicator& c : run_.comms) {
      auto it = comm_ranks_.find(lifted_comm_id(c.comm));
      if (it != comm_ranks_.end() && c.nranks > static_cast<int32_t>(it->second.size()))
        s_.provenance.push_back("communicator '" + it->first + "' has " + std::to_string(c.nranks) +
                                " ranks in the trace but " + std::to_string(it->second.size()) +
                                " in this run: lifted with the ranks present");
    }
  }

  // The ET op behind a compute op, and the communication op behind a collective.
  const EtFlowOp* et_op_of(const RankEtFlow& ef, const RankTrace& t, const GpuOp& op) const {
    switch (op.type) {
      case OpType::Kernel:
        return ef.launched_by(t.kernels[op.index].correlation);
      case OpType::Memcpy:
        return ef.launched_by(t.memcpys[op.index].correlation);
      case OpType::HostCompute:
        return &ef.ops[t.host_compute[op.index].ref];
      default:
        return nullptr;
    }
  }
  const EtFlowOp* et_comm_of(const RankEtFlow& ef, const RankTrace& t, const GpuOp& op) const {
    const braid::Collective& c = t.collectives[op.coll];
    if (op.type == OpType::HostCollective) return ef.comm_at(c.start, run_.str(c.name));
    return ef.comm_of(
        ef.launched_by(c.kernel_ref ? c.kernel_ref : t.kernels[op.index].correlation));
  }

  // What the execution trace says of each op of rank `r`: planned before anything is emitted,
  // since the buffers and the dependencies are the whole rank's.
  std::optional<EtRankPlan> plan_rank(int32_t r, int32_t sr) {
    const RankEtFlow* ef = et_of(r);
    if (!ef) return std::nullopt;
    const RankTrace& t = trace_of(r);
    const RankTimeline& tl = timelines_.at(r);
    EtRankPlan plan;
    for (int32_t si = 0; si < static_cast<int32_t>(tl.streams.size()); ++si)
      for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[si].ops.size()); ++i) {
        const GpuOp& op = tl.streams[si].ops[i];
        if (!in_step(r, op)) continue;
        if (int g = lifted_group(r, op); g >= 0) {
          const braid::Collective& c = t.collectives[op.coll];
          const int64_t n =
              static_cast<int64_t>(comm_ranks_.at(lifted_comm_id(match_.groups[g].comm)).size());
          const int32_t root =
              c.peer_or_root >= 0 && srank_.count(c.peer_or_root) ? srank_.at(c.peer_or_root) : -1;
          auto [in_n, out_n] = coll_sides(c.op, n, shape_[g].count, sr, root);
          plan.add_collective({si, i}, et_comm_of(*ef, t, op), c.op, shape_[g].dtype, in_n, out_n,
                              op.start, op.end);
        } else if (op.type != OpType::HostCollective) {
          plan.add_compute({si, i}, et_op_of(*ef, t, op), op.start, op.end);
        }
      }
    plan.finish();
    for (const Buffer& b : plan.buffers()) s_.add_buffer(sr, b.name, b.dtype, b.size);
    s_.ranks[sr].outputs = plan.outputs();
    rep_.dataflow_deps += plan.dataflow_deps();
    return plan;
  }

  // Waits each op needs: from the storages for the ops the execution trace covers, inferred
  // from timing for the others; consecutive collectives of one communicator on different
  // streams are ordered too (NCCL runs a communicator's operations in issue order).
  Waits rank_waits(int32_t r, const std::optional<EtRankPlan>& plan) {
    const RankTimeline& tl = timelines_.at(r);
    Waits waits;
    if (plan)
      for (int32_t si = 0; si < static_cast<int32_t>(tl.streams.size()); ++si)
        for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[si].ops.size()); ++i)
          for (const OpPos& f : plan->deps({si, i})) waits[{si, i}].push_back(f);
    if (opt_.infer_dependencies)
      for (const analysis::DepEdge& d : tl.deps) {
        if (!in_step(r, tl.op(d.from)) || !in_step(r, tl.op(d.to))) continue;
        if (plan && plan->has_flow(d.to)) continue;
        waits[d.to].push_back(d.from);
        ++deps_;
        any_unknown_launch_ = any_unknown_launch_ || !d.launch_known;
      }
    std::map<std::string, OpPos> last;
    std::vector<std::pair<Ns, OpPos>> colls;
    for (auto& [ci, pos] : tl.coll_pos) {
      int g = match_.group({r, ci});
      if (g >= 0 && liftable_[g] && in_step(r, tl.op(pos)))
        colls.emplace_back(tl.op(pos).start, pos);
    }
    std::sort(colls.begin(), colls.end());
    for (auto& [start, pos] : colls) {
      const CollGroup& grp = match_.groups[match_.group({r, tl.op(pos).coll})];
      const std::string key = lifted_comm_id(grp.comm);
      auto it = last.find(key);
      if (it != last.end() && it->second.stream != pos.stream) {
        auto& w = waits[pos];
        if (std::find(w.begin(), w.end(), it->second) == w.end()) {
          w.push_back(it->second);
          ++comm_order_events_;
        }
      }
      last[key] = pos;
    }
    return waits;
  }

  void lift_rank(int32_t r) {
    const RankTrace& t = trace_of(r);
    const int32_t sr = srank_.at(r);
    s_.add_rank(sr);
    const RankTimeline& tl = timelines_.at(r);
    any_wait_calls_ = any_wait_calls_ ||
                      std::any_of(t.syncs.begin(), t.syncs.end(), [](const analysis::SyncCall& c) {
                        return c.kind == analysis::SyncKind::StreamWaitEvent;
                      });
    const std::optional<EtRankPlan> plan = plan_rank(r, sr);
    const Waits waits = rank_waits(r, plan);
    std::map<OpPos, std::string> event_of;
    for (auto& [to, froms] : waits)
      for (const OpPos& f : froms)
        if (!event_of.count(f))
          event_of[f] = "r" + std::to_string(sr) + "_s" +
                        std::to_string(tl.streams[f.stream].stream) + "_" + std::to_string(f.index);
    const LiftedSpan& sp = spans_.ranks.at(r);
    const Ns rank_start = sp.first - sp.lead;  // the job's step start in the rank's clock
    for (int32_t si = 0; si < static_cast<int32_t>(tl.streams.size()); ++si)
      lift_stream(r, sr, si, rank_start, waits, event_of, plan ? &*plan : nullptr);
  }

  // One stream of rank `r`: its ops in order, each after the waits it needs and the delay that
  // kept it from starting (gaps shorter than min_gap_ns are carried into the next delay, so the
  // stream keeps their time), and the record others wait on.
  void lift_stream(int32_t r, int32_t sr, int32_t si, Ns rank_start, const Waits& waits,
                   const std::map<OpPos, std::string>& event_of, const EtRankPlan* plan) {
    const RankTimeline& tl = timelines_.at(r);
    const auto& st = tl.streams[si];
    int stream = -1;
    Ns prev_end = INT64_MIN, carried = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(st.ops.size()); ++i) {
      const GpuOp& op = st.ops[i];
      if (!in_step(r, op)) continue;
      if (stream < 0)
        stream = s_.add_stream(sr, st.stream == -1  ? "host"
                                   : st.stream < -1 ? "host " + std::to_string(-1 - st.stream)
                                                    : "stream " + std::to_string(st.stream));
      const OpPos pos{si, i};
      Ns ready = prev_end;
      if (auto w = waits.find(pos); w != waits.end())
        for (const OpPos& f : w->second) {
          s_.append(sr, stream, Wait{event_of.at(f)});
          ready = std::max(ready, tl.op(f).end);
        }
      if (ready == INT64_MIN) ready = rank_start;
      if (op.start > ready && opt_.min_gap_ns >= 0) {
        carried += op.start - ready;
        if (carried >= opt_.min_gap_ns) {
          s_.append(sr, stream, Delay{carried});
          ++delays_;
          carried = 0;
        }
      }
      if (int g = lifted_group(r, op); g >= 0)
        lift_collective(r, sr, stream, g, op, plan ? plan->collective(pos) : nullptr, plan);
      else
        lift_compute(r, sr, stream, op, pos, plan);
      if (auto e = event_of.find(pos); e != event_of.end())
        s_.append(sr, stream, Record{e->second});
      prev_end = op.end;
    }
  }

  void lift_collective(int32_t r, int32_t sr, int stream, int g, const GpuOp& op,
                       const EtRankPlan::Coll* ec, const EtRankPlan* plan) {
    const CollGroup& grp = match_.groups[g];
    const braid::Collective& c = trace_of(r).collectives[op.coll];
    const analysis::CollSize& sh = shape_[g];
    Collective fc;
    fc.op = c.op;
    fc.comm = lifted_comm_id(grp.comm);
    fc.dtype = sh.dtype;
    fc.count = sh.count;
    if (c.op == CollOp::Broadcast || c.op == CollOp::Reduce) fc.root = srank_.at(c.peer_or_root);
    if (c.op == CollOp::Send || c.op == CollOp::Recv) fc.peer = srank_.at(c.peer_or_root);
    const int64_t n = static_cast<int64_t>(s_.find_comm(fc.comm)->ranks.size());
    auto [in_n, out_n] = coll_sides(c.op, n, sh.count, sr, fc.root);
    const std::string base = "c" + std::to_string(g);
    auto own = [&](const char* side, int64_t count) -> Slice {
      s_.add_buffer(sr, base + side, sh.dtype, count);
      return {base + side, 0, count};
    };
    if (in_n >= 0) fc.in = ec && ec->in ? *ec->in : own(".in", in_n);
    if (out_n >= 0) fc.out = ec && ec->out ? *ec->out : own(".out", out_n);
    fc.label = std::string(to_string(c.op)) + " #" + std::to_string(grp.seq) + " (" +
               std::to_string(std::max<Ns>(0, op.end - op.start)) + " ns in the trace)";
    if (ec && ec->stage_in) {
      Compute cp;
      cp.label = "staging into " + fc.label;
      cp.reads = ec->stage_reads;
      cp.writes = {fc.in};
      s_.append(sr, stream, std::move(cp));
    }
    if (ec) ++(ec->stage_in || ec->stage_out ? staged_ : on_et_tensors_);
    s_.append(sr, stream, fc);
    if (ec && ec->stage_out) {
      Compute cp;
      cp.label = "staging out of " + fc.label;
      cp.reads = {fc.out};
      cp.writes = ec->stage_writes;
      s_.append(sr, stream, std::move(cp));
    } else if (plan && !ec) {
      // The execution trace has no op for this collective: what it writes is unknown.
      Compute cp;
      cp.label = "unknown effect of " + fc.label;
      cp.opaque = true;
      opaque_.add(cp.label, kNoEtComm);
      ++unknown_effect_;
      s_.append(sr, stream, std::move(cp));
    }
    ++rep_.collectives;
  }

  void lift_compute(int32_t r, int32_t sr, int stream, const GpuOp& op, const OpPos& pos,
                    const EtRankPlan* plan) {
    const RankTrace& t = trace_of(r);
    const RankEtFlow* ef = et_of(r);
    Compute cp;
    cp.duration_ns = std::max<Ns>(0, op.end - op.start);
    cp.opaque = true;
    const EtFlowOp* eo = ef ? et_op_of(*ef, t, op) : nullptr;
    if (op.coll >= 0) {
      const braid::Collective& c = t.collectives[op.coll];
      cp.label = "opaque " + std::string(to_string(c.op)) + " on '" + run_.str(c.comm) + "'";
      ++rep_.opaque_collectives;
      s_.append(sr, stream, std::move(cp));
      return;
    }
    if (op.type == OpType::HostCompute) {
      cp.label = eo->name;
    } else if (op.type == OpType::Memcpy) {
      const Memcpy& mc = t.memcpys[op.index];
      cp.label = std::string(to_string(mc.kind)) + " " + std::to_string(mc.bytes) + " B";
      if (eo) cp.label = eo->name + ": " + cp.label;
    } else {
      cp.label = run_.str(t.kernels[op.index].name);
      if (eo && eo->computes()) cp.label = eo->name + ": " + cp.label;
    }
    ++rep_.compute;
    if (plan && plan->compute(pos, cp.reads, cp.writes)) {
      cp.opaque = false;
      ++rep_.compute_with_dataflow;
    } else {
      opaque_.add(cp.label, !et_ ? kNoEt : !ef ? kNoEtRank : !eo ? kNoEtOp : kNoTensors);
    }
    s_.append(sr, stream, std::move(cp));
  }

  void provenance() {
    auto& prov = s_.provenance;
    if (deps_ > 0)
      prov.push_back(std::to_string(deps_) +
                     " cross-stream dependencies inferred from timing (an op that started when "
                     "another stream's op ended, later than its own stream and launch allowed" +
                     std::string(any_wait_calls_ ? "; the ranks issued cudaStreamWaitEvent"
                                                 : "; no cudaStreamWaitEvent call was seen") +
                     (any_unknown_launch_ ? "; some launch times unknown" : "") +
                     (et_ ? "; only for ops the execution trace does not cover" : "") + ")");
    else if (!et_)
      prov.push_back(opt_.infer_dependencies ? "no cross-stream dependency found in the trace"
                                             : "cross-stream dependencies not inferred (option)");
    int64_t aligned = 0;
    Ns max_lead = 0;
    for (auto& [r, sp] : spans_.ranks) {
      aligned += sp.aligned;
      max_lead = std::max(max_lead, sp.lead);
    }
    char lead[64];
    std::snprintf(lead, sizeof lead, "%.3f ms", static_cast<double>(max_lead) * 1e-6);
    prov.push_back("every rank starts at the job's step start on clocks aligned on " +
                   std::to_string(spans_.anchors) + " matched collectives (" +
                   std::to_string(aligned) + " of " + std::to_string(spans_.ranks.size()) +
                   " ranks aligned): a rank that started later in the trace waits that long "
                   "first (at most " +
                   lead + ")");
    if (comm_order_events_ > 0)
      prov.push_back(std::to_string(comm_order_events_) +
                     " events order consecutive collectives of one communicator on different "
                     "streams (NCCL runs a communicator's operations in issue order)");
    const std::string gaps = std::to_string(delays_) + " host gaps of at least " +
                             std::to_string(opt_.min_gap_ns) +
                             " ns written as delays (shorter ones carried into the next)";
    if (et_) {
      prov.push_back(std::to_string(rep_.compute_with_dataflow) + " of " +
                     std::to_string(rep_.compute) +
                     " compute ops read and write the storage ranges of their execution-trace "
                     "op (data flow); the rest are opaque; durations from the trace; " +
                     gaps);
      if (host_ranks_ > 0)
        prov.push_back(std::to_string(host_ranks_) +
                       " host-only ranks: their compute is the execution trace's innermost "
                       "computing ops, with the host times of the CPU ops they were joined to");
      prov.push_back(std::to_string(rep_.dataflow_deps) +
                     " cross-stream dependencies from the storages ops share (the execution "
                     "trace)");
      prov.push_back("collective parts: " + std::to_string(on_et_tensors_) +
                     " on their execution-trace tensors, " + std::to_string(staged_) +
                     " staged through their own buffers by zero-time copies, " +
                     std::to_string(unknown_effect_) +
                     " with no execution-trace op (an opaque op after each)");
      prov.push_back(
          "outputs: per rank, the storages the step reads before it writes them "
          "(parameters, optimizer state), else those it writes last");
    } else {
      prov.push_back("compute is opaque, durations from the trace; " + gaps);
      prov.push_back("each collective has its own in/out buffers, sized from the trace");
    }
    if (uneven_ > 0)
      prov.push_back(std::to_string(uneven_) +
                     " all-to-alls move different amounts per rank in the trace (uneven "
                     "splits): lifted as even, each rank with the lowest rank's per-peer size");
    for (auto& [why, n] : left_opaque_) {
      prov.push_back(std::to_string(n) + " collective parts left as opaque compute: " + why);
      opaque_.by[{"collective", why}] += n;
    }
  }

  const analysis::RunData& run_;
  const analysis::MatchResult& match_;
  const LiftOptions& opt_;
  const EtFlow* et_;
  Schedule s_;
  LiftReport rep_;
  OpaqueCounts opaque_;
  std::vector<int32_t> ids_;
  std::map<int32_t, int32_t> srank_;
  std::map<int32_t, RankTrace> with_host_;
  std::map<int32_t, RankTimeline> timelines_;
  LiftedSpans spans_;
  std::vector<bool> liftable_;
  std::vector<analysis::CollSize> shape_;
  std::map<std::string, int64_t> left_opaque_;  // reason -> count of rank ops
  std::map<std::string, std::set<int32_t>> comm_ranks_;
  int64_t uneven_ = 0, host_ranks_ = 0, deps_ = 0, comm_order_events_ = 0, delays_ = 0;
  int64_t staged_ = 0, unknown_effect_ = 0, on_et_tensors_ = 0;
  bool any_wait_calls_ = false, any_unknown_launch_ = false;
};

}  // namespace

Schedule lift(const analysis::RunData& run, const analysis::MatchResult& match,
              const LiftOptions& opt, LiftReport* report) {
  return Lifter(run, match, opt).build(report);
}

}  // namespace braid::fusion

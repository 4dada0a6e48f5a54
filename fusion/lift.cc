#include "fusion/lift.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "analysis/clock.h"
#include "fusion/labels.h"
#include "fusion/schedule_store.h"
#include "fusion/validate.h"
#include "trace/error.h"
#include "trace/json.h"
#include "trace/summary.h"

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

std::string comm_id_of(const std::string& comm) { return lifted_comm_id(comm); }

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

constexpr std::string_view kLiftedFrom = "lifted from trace run ";

std::string lift_provenance(int64_t run, int64_t step) {
  return std::string(kLiftedFrom) + std::to_string(run) +
         (step >= 0 ? ", step " + std::to_string(step) : std::string(", whole run")) +
         " by fusion::lift";
}

}  // namespace

std::string lifted_comm_id(std::string_view trace_comm) {
  return trace_comm.empty() ? "default" : std::string(trace_comm);
}

LiftSource lifted_from(const Schedule& s) {
  LiftSource src;
  for (const std::string& p : s.provenance) {
    if (p.rfind(kLiftedFrom, 0) != 0) continue;
    const char* c = p.c_str() + kLiftedFrom.size();
    char* end = nullptr;
    src.run = std::strtoll(c, &end, 10);
    const std::string rest(end);
    if (rest.rfind(", step ", 0) == 0) src.step = std::strtoll(rest.c_str() + 7, nullptr, 10);
    return src;
  }
  return src;
}

namespace {

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

// The short name of a lifted op's label for reports ("aten::addmm", a kernel's base name).
std::string report_name(std::string_view label) { return short_label(label); }

// Counts of opaque ops by (name, reason), for the report.
struct OpaqueCounts {
  std::map<std::pair<std::string, std::string>, int64_t> by;
  void add(std::string_view label, const std::string& why) { ++by[{report_name(label), why}]; }
  std::vector<LiftReport::Opaque> sorted() const {
    std::vector<LiftReport::Opaque> v;
    for (auto& [k, n] : by) v.push_back({k.first, k.second, n});
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.count > b.count; });
    return v;
  }
};

constexpr const char* kNoEtRank = "the rank has no execution trace";
constexpr const char* kNoEtOp =
    "no execution-trace op launched it (outside the execution trace's window)";
constexpr const char* kNoTensors = "its execution-trace op has no tensors";
constexpr const char* kNoEtComm = "no execution-trace op for it: what it writes is unknown";

}  // namespace

namespace {

// The rank's trace as the lift sees it: a CPU job's compute from its execution traces added.
RankTrace lift_trace(const RankTrace& t, const EtFlow* et, int32_t rank) {
  RankTrace copy = t;
  if (!et || !t.kernels.empty() || !t.memcpys.empty()) return copy;
  if (auto it = et->ranks.find(rank); it != et->ranks.end())
    copy.host_compute = et_host_compute(it->second);
  return copy;
}

}  // namespace

LiftedSpans lifted_spans(const analysis::RunData& run, const analysis::MatchResult& match,
                         int64_t step, const EtFlow* et) {
  LiftedSpans out;
  const analysis::ClockFit clocks = analysis::align_clocks(run, match);
  out.residual_rms_ns = clocks.residual_rms_ns;
  out.anchors = clocks.anchors_used;
  Ns job_start = INT64_MAX;
  for (int32_t r : run.rank_ids()) {
    const RankTrace t = lift_trace(run.ranks.at(r), et, r);
    const RankTimeline tl = analysis::build_timeline(t);
    LiftedSpan sp;
    sp.first = INT64_MAX, sp.last = INT64_MIN;
    for (const analysis::StreamOps& so : tl.streams)
      for (const GpuOp& op : so.ops)
        if (step < 0 || analysis::op_step(t, op) == step)
          sp.first = std::min(sp.first, op.start), sp.last = std::max(sp.last, op.end);
    sp.has_ops = sp.first <= sp.last;
    const analysis::RankClock* c = clocks.rank(r);
    sp.aligned = c && c->aligned;
    sp.offset = sp.aligned ? c->offset : 0;
    if (sp.has_ops && sp.aligned) job_start = std::min(job_start, sp.first + sp.offset);
    out.ranks[r] = sp;
  }
  out.job_start = job_start == INT64_MAX ? 0 : job_start;
  for (auto& [r, sp] : out.ranks) {
    if (!sp.has_ops) continue;
    sp.lead = sp.aligned ? sp.first + sp.offset - out.job_start : 0;
    sp.step_ns = sp.aligned ? sp.last + sp.offset - out.job_start : sp.last - sp.first;
  }
  return out;
}

Schedule lift(const analysis::RunData& run, const analysis::MatchResult& match,
              const LiftOptions& opt, LiftReport* report) {
  Schedule s;
  s.name = "lifted run " + std::to_string(run.run_id);
  // The file's name, not its path: the schedule is stored in that file, which may be moved.
  if (run.reader) s.name += " of " + std::filesystem::path(run.reader->path()).filename().string();
  if (opt.step >= 0) s.name += " step " + std::to_string(opt.step);
  auto& prov = s.provenance;
  prov.push_back(lift_provenance(run.run_id, opt.step));
  const EtFlow* et = opt.et && !opt.et->empty() ? opt.et : nullptr;
  LiftReport rep;
  rep.execution_trace = et != nullptr;
  rep.step = opt.step;
  OpaqueCounts opaque_ops;

  // Rank renumbering.
  std::vector<int32_t> ids = run.rank_ids();
  std::map<int32_t, int32_t> srank;
  for (size_t i = 0; i < ids.size(); ++i) srank[ids[i]] = static_cast<int32_t>(i);
  bool renumbered = false;
  for (size_t i = 0; i < ids.size(); ++i) renumbered = renumbered || ids[i] != static_cast<int32_t>(i);
  if (renumbered) {
    std::string m = "schedule ranks 0.." + std::to_string(ids.size() - 1) + " are trace ranks";
    for (int32_t r : ids) m += " " + std::to_string(r);
    prov.push_back(m);
  }

  // A CPU job's compute comes from its execution trace (RankTrace::host_compute), on a copy of
  // its rank's trace.
  std::map<int32_t, RankTrace> with_host;
  auto et_of = [&](int32_t r) -> const RankEtFlow* {
    if (!et) return nullptr;
    auto it = et->ranks.find(r);
    return it == et->ranks.end() ? nullptr : &it->second;
  };
  int64_t host_ranks = 0;
  for (int32_t r : ids) {
    const RankTrace& t = run.ranks.at(r);
    if (!et_of(r) || !t.kernels.empty() || !t.memcpys.empty()) continue;
    with_host[r] = lift_trace(t, et, r);
    ++host_ranks;
  }
  auto trace_of = [&](int32_t r) -> const RankTrace& {
    auto it = with_host.find(r);
    return it != with_host.end() ? it->second : run.ranks.at(r);
  };

  // Per rank (own clock): the step's ops are those it launched (analysis::op_step, as the
  // analysis attributes them). Each rank starts at the job's step start (lifted_spans).
  std::map<int32_t, RankTimeline> timelines;
  for (int32_t r : ids) {
    const RankTrace& t = trace_of(r);
    timelines[r] = analysis::build_timeline(t, opt.timeline);
    if (opt.step >= 0) {
      if (std::none_of(t.steps.begin(), t.steps.end(),
                       [&](const Step& st) { return st.step == opt.step; })) {
        std::set<int64_t> have;
        for (const Step& st : t.steps) have.insert(st.step);
        std::string list;
        for (int64_t h : have) list += (list.empty() ? "" : ", ") + std::to_string(h);
        throw Error(ErrorCode::Usage,
                    (run.reader ? run.reader->path() + ": " : std::string()) + "rank " +
                        std::to_string(r) + " of run " + std::to_string(run.run_id) +
                        " has no step " + std::to_string(opt.step) +
                        (list.empty() ? " (the trace has no steps)" : " (steps: " + list + ")"));
      }
    }
  }
  const LiftedSpans spans = lifted_spans(run, match, opt.step, et);
  // Where each rank's streams start, in its own clock: the job's step start.
  auto rank_start = [&](int32_t r) {
    const LiftedSpan& sp = spans.ranks.at(r);
    return sp.first - sp.lead;
  };
  auto in_step = [&](int32_t r, const GpuOp& op) {
    return opt.step < 0 || analysis::op_step(trace_of(r), op) == opt.step;
  };

  // Which groups become IR collectives.
  std::vector<bool> liftable(match.groups.size(), false);
  // All members take the size of the group's first member, so they agree.
  std::vector<analysis::CollSize> shape(match.groups.size());
  std::map<std::string, int64_t> left_opaque;  // reason -> count of rank ops
  int64_t uneven = 0;
  for (size_t g = 0; g < match.groups.size(); ++g) {
    const CollGroup& grp = match.groups[g];
    const CollRef& m0 = grp.members[0];
    const braid::Collective& c0 = run.ranks.at(m0.rank).collectives[m0.index];
    const int64_t n = grp.method == MatchMethod::PointToPoint
                          ? 2
                          : static_cast<int64_t>(analysis::comm_members(run, grp.comm).size());
    std::string why;
    if (!grp.complete()) why = "unmatched on some member rank";
    else if (grp.mismatched) why = "members disagree (" + grp.problem + ")";
    else if (!expressible(grp.op)) why = std::string(to_string(grp.op)) + " has no IR form";
    else if (shape[g] = analysis::collective_size(run, c0, n); !shape[g].known())
      why = shape[g].why;
    else if ((grp.op == CollOp::Broadcast || grp.op == CollOp::Reduce) &&
             (c0.peer_or_root < 0 || !srank.count(c0.peer_or_root)))
      why = "root not in the run";
    if (why.empty() && opt.step >= 0)
      for (const CollRef& m : grp.members)
        if (run.ranks.at(m.rank).collective_step(run.ranks.at(m.rank).collectives[m.index]) !=
            opt.step)
          why = "partly outside the step";
    if (why.empty() && grp.op == CollOp::AllToAll)
      for (const CollRef& m : grp.members)
        if (analysis::collective_size(run, run.ranks.at(m.rank).collectives[m.index], n).count !=
            shape[g].count) {
          ++uneven;
          break;
        }
    if (why.empty()) {
      liftable[g] = true;
      continue;
    }
    // Only the parts the lifted step holds are left as opaque compute in it.
    int64_t here = 0;
    for (const CollRef& m : grp.members)
      here += opt.step < 0 || run.ranks.at(m.rank).collective_step(
                                  run.ranks.at(m.rank).collectives[m.index]) == opt.step;
    if (here > 0) left_opaque[why] += here;
  }

  // Per communicator, every rank must meet its groups in the same order; drop groups out of
  // order until the orders agree.
  std::map<int32_t, std::vector<int>> local_groups;  // rank -> liftable groups in start order
  for (int32_t r : ids) {
    const RankTrace& t = run.ranks.at(r);
    for (int32_t i = 0; i < static_cast<int32_t>(t.collectives.size()); ++i) {
      int g = match.group({r, i});
      if (g >= 0 && liftable[g]) local_groups[r].push_back(g);
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& [r, gs] : local_groups) {
      std::map<std::string, int> last;  // comm/channel -> last kept group
      for (int g : gs) {
        if (!liftable[g]) continue;
        const CollGroup& grp = match.groups[g];
        std::string key = grp.comm;
        if (grp.method == MatchMethod::PointToPoint) {
          const braid::Collective& c0 =
              run.ranks.at(grp.members[0].rank).collectives[grp.members[0].index];
          key += "|p2p|" + std::to_string(grp.members[0].rank) + ">" +
                 std::to_string(c0.peer_or_root);
        }
        auto it = last.find(key);
        if (it != last.end() && match.groups[it->second].seq >= grp.seq) {
          liftable[g] = false;
          left_opaque["out of order with other ranks"] += static_cast<int64_t>(grp.members.size());
          changed = true;
          continue;
        }
        last[key] = g;
      }
    }
  }

  // Communicators: members mapped to schedule ranks.
  std::map<std::string, std::set<int32_t>> comm_ranks;
  for (size_t g = 0; g < match.groups.size(); ++g) {
    if (!liftable[g]) continue;
    const CollGroup& grp = match.groups[g];
    auto& set = comm_ranks[comm_id_of(grp.comm)];
    if (grp.method == MatchMethod::PointToPoint) {
      for (const CollRef& m : grp.members) set.insert(srank[m.rank]);
    } else {
      for (int32_t r : analysis::comm_members(run, grp.comm)) set.insert(srank[r]);
    }
  }
  for (auto& [id, set] : comm_ranks) s.comms.push_back({id, {set.begin(), set.end()}});
  for (const Communicator& c : run.comms) {
    auto it = comm_ranks.find(comm_id_of(c.comm));
    if (it != comm_ranks.end() && c.nranks > static_cast<int32_t>(it->second.size()))
      prov.push_back("communicator '" + it->first + "' has " + std::to_string(c.nranks) +
                     " ranks in the trace but " + std::to_string(it->second.size()) +
                     " in this run: lifted with the ranks present");
  }

  int64_t deps = 0, comm_order_events = 0, delays = 0;
  int64_t staged = 0, unknown_effect = 0, on_et_tensors = 0;
  bool any_wait_calls = false, any_unknown_launch = false;
  for (int32_t r : ids) {
    const RankTrace& t = trace_of(r);
    const int32_t sr = srank[r];
    s.add_rank(sr);
    const RankTimeline& tl = timelines.at(r);
    any_wait_calls = any_wait_calls || std::any_of(t.syncs.begin(), t.syncs.end(),
        [](const analysis::SyncCall& c) { return c.kind == analysis::SyncKind::StreamWaitEvent; });

    // What the execution trace says of each op: planned before anything is emitted, since the
    // buffers and the dependencies are the whole rank's.
    const RankEtFlow* ef = et_of(r);
    std::optional<EtRankPlan> plan;
    auto lifted_group = [&](const GpuOp& op) {
      int g = op.coll >= 0 ? match.group({r, op.coll}) : -1;
      return g >= 0 && liftable[g] ? g : -1;
    };
    auto et_op_of = [&](const GpuOp& op) -> const EtFlowOp* {
      switch (op.type) {
        case OpType::Kernel:
          return ef->launched_by(t.kernels[op.index].correlation);
        case OpType::Memcpy:
          return ef->launched_by(t.memcpys[op.index].correlation);
        case OpType::HostCompute:
          return &ef->ops[t.host_compute[op.index].ref];
        default:
          return nullptr;
      }
    };
    auto et_comm_of = [&](const GpuOp& op) -> const EtFlowOp* {
      const braid::Collective& c = t.collectives[op.coll];
      if (op.type == OpType::HostCollective) return ef->comm_at(c.start, run.str(c.name));
      return ef->comm_of(
          ef->launched_by(c.kernel_ref ? c.kernel_ref : t.kernels[op.index].correlation));
    };
    if (ef) {
      plan.emplace();
      for (int32_t si = 0; si < static_cast<int32_t>(tl.streams.size()); ++si)
        for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[si].ops.size()); ++i) {
          const GpuOp& op = tl.streams[si].ops[i];
          if (!in_step(r, op)) continue;
          if (int g = lifted_group(op); g >= 0) {
            const braid::Collective& c = t.collectives[op.coll];
            const int64_t n =
                static_cast<int64_t>(comm_ranks[comm_id_of(match.groups[g].comm)].size());
            const int32_t root =
                c.peer_or_root >= 0 && srank.count(c.peer_or_root) ? srank[c.peer_or_root] : -1;
            auto [in_n, out_n] = coll_sides(c.op, n, shape[g].count, sr, root);
            plan->add_collective({si, i}, et_comm_of(op), c.op, shape[g].dtype, in_n, out_n,
                                 op.start, op.end);
          } else if (op.type != OpType::HostCollective) {
            plan->add_compute({si, i}, et_op_of(op), op.start, op.end);
          }
        }
      plan->finish();
      for (const Buffer& b : plan->buffers()) s.add_buffer(sr, b.name, b.dtype, b.size);
      s.ranks[sr].outputs = plan->outputs();
    }

    // Waits each op needs, and records each op must be followed by: from the storages for the
    // ops the execution trace covers, inferred from timing for the others.
    std::map<OpPos, std::vector<OpPos>> waits;  // consumer -> producers
    if (plan)
      for (int32_t si = 0; si < static_cast<int32_t>(tl.streams.size()); ++si)
        for (int32_t i = 0; i < static_cast<int32_t>(tl.streams[si].ops.size()); ++i)
          for (const OpPos& f : plan->deps({si, i})) waits[{si, i}].push_back(f);
    if (plan) rep.dataflow_deps += plan->dataflow_deps();
    if (opt.infer_dependencies)
      for (const analysis::DepEdge& d : tl.deps) {
        if (!in_step(r, tl.op(d.from)) || !in_step(r, tl.op(d.to))) continue;
        if (plan && plan->has_flow(d.to)) continue;
        waits[d.to].push_back(d.from);
        ++deps;
        any_unknown_launch = any_unknown_launch || !d.launch_known;
      }
    // Consecutive lifted collectives of one communicator on different streams.
    {
      std::map<std::string, OpPos> last;
      std::vector<std::pair<Ns, OpPos>> colls;
      for (auto& [ci, pos] : tl.coll_pos) {
        int g = match.group({r, ci});
        if (g >= 0 && liftable[g] && in_step(r, tl.op(pos)))
          colls.emplace_back(tl.op(pos).start, pos);
      }
      std::sort(colls.begin(), colls.end());
      for (auto& [start, pos] : colls) {
        const CollGroup& grp = match.groups[match.group({r, tl.op(pos).coll})];
        std::string key = comm_id_of(grp.comm);
        auto it = last.find(key);
        if (it != last.end() && it->second.stream != pos.stream) {
          auto& w = waits[pos];
          if (std::find(w.begin(), w.end(), it->second) == w.end()) {
            w.push_back(it->second);
            ++comm_order_events;
          }
        }
        last[key] = pos;
      }
    }
    std::map<OpPos, std::string> event_of;
    for (auto& [to, froms] : waits)
      for (const OpPos& f : froms)
        if (!event_of.count(f))
          event_of[f] = "r" + std::to_string(sr) + "_s" + std::to_string(tl.streams[f.stream].stream) +
                        "_" + std::to_string(f.index);

    for (int32_t si = 0; si < static_cast<int32_t>(tl.streams.size()); ++si) {
      const auto& st = tl.streams[si];
      int stream = -1;
      Ns prev_end = INT64_MIN, carried = 0;
      for (int32_t i = 0; i < static_cast<int32_t>(st.ops.size()); ++i) {
        const GpuOp& op = st.ops[i];
        if (!in_step(r, op)) continue;
        if (stream < 0)
          stream = s.add_stream(sr, st.stream == -1  ? "host"
                                    : st.stream < -1 ? "host " + std::to_string(-1 - st.stream)
                                                     : "stream " + std::to_string(st.stream));
        OpPos pos{si, i};
        Ns ready = prev_end;
        if (auto w = waits.find(pos); w != waits.end())
          for (const OpPos& f : w->second) {
            s.append(sr, stream, Wait{event_of[f]});
            ready = std::max(ready, tl.op(f).end);
          }
        if (ready == INT64_MIN) ready = rank_start(r);
        // Gaps shorter than min_gap_ns are carried over to the next delay written, so the
        // stream keeps their time (thousands of sub-microsecond launch gaps add up).
        if (ready != INT64_MIN && op.start > ready && opt.min_gap_ns >= 0) {
          carried += op.start - ready;
          if (carried >= opt.min_gap_ns) {
            s.append(sr, stream, Delay{carried});
            ++delays;
            carried = 0;
          }
        }
        const Ns dur = std::max<Ns>(0, op.end - op.start);
        if (int g = lifted_group(op); g >= 0) {
          const CollGroup& grp = match.groups[g];
          const braid::Collective& c = t.collectives[op.coll];
          const std::string comm = comm_id_of(grp.comm);
          const int64_t n = static_cast<int64_t>(s.find_comm(comm)->ranks.size());
          const analysis::CollSize& sh = shape[g];
          fusion::Collective fc;
          fc.op = c.op;
          fc.comm = comm;
          fc.dtype = sh.dtype;
          fc.count = sh.count;
          if (c.op == CollOp::Broadcast || c.op == CollOp::Reduce) fc.root = srank[c.peer_or_root];
          if (c.op == CollOp::Send || c.op == CollOp::Recv) fc.peer = srank[c.peer_or_root];
          auto [in_n, out_n] = coll_sides(c.op, n, sh.count, sr, fc.root);
          const std::string base = "c" + std::to_string(g);
          const EtRankPlan::Coll* ec = plan ? plan->collective(pos) : nullptr;
          auto own = [&](const char* side, int64_t count) -> Slice {
            s.add_buffer(sr, base + side, sh.dtype, count);
            return {base + side, 0, count};
          };
          if (in_n >= 0) fc.in = ec && ec->in ? *ec->in : own(".in", in_n);
          if (out_n >= 0) fc.out = ec && ec->out ? *ec->out : own(".out", out_n);
          fc.label = std::string(to_string(c.op)) + " #" + std::to_string(grp.seq) + " (" +
                     std::to_string(dur) + " ns in the trace)";
          if (ec && ec->stage_in) {
            Compute cp;
            cp.label = "staging into " + fc.label;
            cp.reads = ec->stage_reads;
            cp.writes = {fc.in};
            s.append(sr, stream, std::move(cp));
          }
          const bool staged_out = ec && ec->stage_out;
          if (ec) {
            if (ec->stage_in || ec->stage_out)
              ++staged;
            else
              ++on_et_tensors;
          }
          s.append(sr, stream, fc);
          if (staged_out) {
            Compute cp;
            cp.label = "staging out of " + fc.label;
            cp.reads = {fc.out};
            cp.writes = ec->stage_writes;
            s.append(sr, stream, std::move(cp));
          } else if (plan && !ec) {
            // The execution trace has no op for this collective: what it writes is unknown.
            Compute cp;
            cp.label = "unknown effect of " + fc.label;
            cp.opaque = true;
            opaque_ops.add(cp.label, kNoEtComm);
            ++unknown_effect;
            s.append(sr, stream, std::move(cp));
          }
          ++rep.collectives;
        } else {
          Compute cp;
          cp.duration_ns = dur;
          cp.opaque = true;
          const EtFlowOp* eo = ef ? et_op_of(op) : nullptr;
          if (op.coll >= 0) {
            const braid::Collective& c = t.collectives[op.coll];
            cp.label = "opaque " + std::string(to_string(c.op)) + " on '" + run.str(c.comm) + "'";
            ++rep.opaque_collectives;
          } else if (op.type == OpType::HostCompute) {
            cp.label = eo->name;
          } else if (op.type == OpType::Memcpy) {
            const Memcpy& mc = t.memcpys[op.index];
            cp.label = std::string(to_string(mc.kind)) + " " + std::to_string(mc.bytes) + " B";
            if (eo) cp.label = eo->name + ": " + cp.label;
          } else {
            cp.label = run.str(t.kernels[op.index].name);
            if (eo && eo->computes()) cp.label = eo->name + ": " + cp.label;
          }
          if (op.coll < 0) {
            ++rep.compute;
            if (plan && plan->compute(pos, cp.reads, cp.writes)) {
              cp.opaque = false;
              ++rep.compute_with_dataflow;
            } else {
              opaque_ops.add(cp.label, !ef ? (et ? kNoEtRank : "") : !eo ? kNoEtOp : kNoTensors);
            }
          }
          s.append(sr, stream, std::move(cp));
        }
        if (auto e = event_of.find(pos); e != event_of.end()) s.append(sr, stream, Record{e->second});
        prev_end = op.end;
      }
    }
  }
  rep.timing_deps = deps;

  if (deps > 0)
    prov.push_back(std::to_string(deps) +
                   " cross-stream dependencies inferred from timing (an op "
                   "that started when another stream's op ended, later than its own stream and "
                   "launch allowed" +
                   std::string(any_wait_calls ? "; the ranks issued cudaStreamWaitEvent"
                                              : "; no cudaStreamWaitEvent call was seen") +
                   (any_unknown_launch ? "; some launch times unknown" : "") +
                   (et ? "; only for ops the execution trace does not cover" : "") + ")");
  else if (!et)
    prov.push_back(opt.infer_dependencies ? "no cross-stream dependency found in the trace"
                                          : "cross-stream dependencies not inferred (option)");
  {
    int64_t aligned = 0;
    Ns max_lead = 0;
    for (auto& [r, sp] : spans.ranks) {
      aligned += sp.aligned;
      max_lead = std::max(max_lead, sp.lead);
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(max_lead) * 1e-6);
    prov.push_back("every rank starts at the job's step start on clocks aligned on " +
                   std::to_string(spans.anchors) + " matched collectives (" +
                   std::to_string(aligned) + " of " + std::to_string(spans.ranks.size()) +
                   " ranks aligned): a rank that started later in the trace waits that long "
                   "first (at most " +
                   buf + ")");
  }
  if (comm_order_events > 0)
    prov.push_back(std::to_string(comm_order_events) +
                   " events order consecutive collectives of one communicator on different "
                   "streams (NCCL runs a communicator's operations in issue order)");
  if (et) {
    prov.push_back(
        std::to_string(rep.compute_with_dataflow) + " of " + std::to_string(rep.compute) +
        " compute ops read and write the storage ranges of their execution-trace op "
        "(data flow); the rest are opaque; durations from the trace; " +
        std::to_string(delays) + " host gaps of at least " + std::to_string(opt.min_gap_ns) +
        " ns written as delays (shorter ones carried into the next)");
    if (host_ranks > 0)
      prov.push_back(std::to_string(host_ranks) +
                     " host-only ranks: their compute is the execution trace's innermost "
                     "computing ops, with the host times of the CPU ops they were joined to");
    prov.push_back(std::to_string(rep.dataflow_deps) +
                   " cross-stream dependencies from the storages ops share (the execution "
                   "trace)");
    prov.push_back("collective parts: " + std::to_string(on_et_tensors) +
                   " on their execution-trace tensors, " + std::to_string(staged) +
                   " staged through their own buffers by zero-time copies, " +
                   std::to_string(unknown_effect) +
                   " with no execution-trace op (an opaque op after each)");
    prov.push_back(
        "outputs: per rank, the storages the step reads before it writes them "
        "(parameters, optimizer state), else those it writes last");
  } else {
    prov.push_back("compute is opaque, durations from the trace; " + std::to_string(delays) +
                   " host gaps of at least " + std::to_string(opt.min_gap_ns) +
                   " ns written as delays (shorter ones carried into the next)");
    prov.push_back("each collective has its own in/out buffers, sized from the trace");
  }
  if (uneven > 0)
    prov.push_back(std::to_string(uneven) +
                   " all-to-alls move different amounts per rank in the trace (uneven splits): "
                   "lifted as even, each rank with the lowest rank's per-peer size");
  for (auto& [why, n] : left_opaque) {
    prov.push_back(std::to_string(n) + " collective parts left as opaque compute: " + why);
    opaque_ops.by[{"collective", why}] += n;
  }
  for (size_t i = 0; i < s.ranks.size(); ++i)
    if (s.ranks[i].streams.empty()) s.add_stream(static_cast<int32_t>(i), "idle");
  rep.ops = static_cast<int64_t>(s.op_count());
  rep.opaque = opaque_ops.sorted();
  if (!et)  // without an execution trace every compute op is opaque for one reason
    for (auto& o : rep.opaque)
      if (o.reason.empty()) o.reason = "the run has no execution trace";
  if (report) *report = std::move(rep);
  return s;
}

namespace {
constexpr size_t kLiftPhases = 4;  // load, match, lift, store
void lift_phase(const LiftOptions& opt, size_t phase, const std::string& where) {
  if (opt.cancel && opt.cancel->load()) throw Error(ErrorCode::Usage, where + ": lift cancelled");
  if (opt.progress) opt.progress(phase, kLiftPhases);
}
}  // namespace

Schedule lift_run(const TraceReader& reader, int64_t run_id, const LiftOptions& given,
                  LiftReport* report) {
  lift_phase(given, 0, reader.path());
  LiftOptions opt = given;
  // Execution-trace data flow, and the step it covers when none is asked for.
  EtFlow et;
  if (!opt.et) {
    et = load_et_flow(reader, run_id);
    if (!et.empty()) opt.et = &et;
  }
  std::string step_reason;
  if (opt.et && opt.step < 0 && opt.et->steps.size() == 1) {
    opt.step = *opt.et->steps.begin();
    step_reason = "step " + std::to_string(opt.step) + ": the step the execution traces cover";
  }
  analysis::RunData run;
  try {
    run = analysis::load_run(reader, run_id,
                             [&](int64_t) { return !(opt.cancel && opt.cancel->load()); });
  } catch (const Error&) {
    lift_phase(opt, 0, reader.path());  // says "cancelled" when that is why the load stopped
    throw;
  }
  if (run.ranks.empty())
    throw Error(ErrorCode::Empty, reader.path() + ": run " + std::to_string(run_id) + " has no ranks");
  const std::string where = reader.path() + ": run " + std::to_string(run_id);
  if (run.ranks.size() < 2)
    throw Error(ErrorCode::Usage,
                where + " has one rank (" + std::to_string(run.ranks.begin()->first) +
                    "): lifting needs the job's ranks in one run (import the ranks' files "
                    "together with `braid import`, or join runs with `braid merge`)");
  lift_phase(opt, 1, where);
  analysis::MatchResult match = analysis::match_trace_collectives(run);
  int64_t colls = 0;
  for (const auto& [r, t] : run.ranks) colls += static_cast<int64_t>(t.collectives.size());
  if (std::none_of(match.groups.begin(), match.groups.end(),
                   [](const analysis::CollGroup& g) { return g.complete() && !g.mismatched; }))
    throw Error(ErrorCode::BadFormat,
                where +
                    (colls == 0 ? " has no collectives"
                                : ": none of its " + std::to_string(colls) +
                                      " collectives matches across ranks on any "
                                      "communicator (are the ranks from one job?)") +
                    ": nothing to lift");
  lift_phase(opt, 2, where);
  LiftReport rep;
  Schedule s = lift(run, match, opt, &rep);
  if (!step_reason.empty()) {
    s.provenance.insert(s.provenance.begin() + 1, step_reason);
    rep.step_reason = step_reason;
  }
  auto problems = validate(s);
  if (!problems.empty() && opt.infer_dependencies) {
    // Inferred edges can be wrong (e.g. a coincidence of timing); retry without them.
    LiftOptions plain = opt;
    plain.infer_dependencies = false;
    Schedule s2 = lift(run, match, plain, &rep);
    if (validate(s2).empty()) {
      if (!step_reason.empty()) {
        s2.provenance.insert(s2.provenance.begin() + 1, step_reason);
        rep.step_reason = step_reason;
      }
      s2.provenance.push_back("the inferred dependencies made the schedule invalid (" +
                              problems[0] + "); lifted without them");
      if (report) *report = std::move(rep);
      return s2;
    }
  }
  if (!problems.empty())
    throw Error(ErrorCode::Internal, reader.path() + ": the lifted schedule of run " +
                                         std::to_string(run_id) + " is invalid: " + problems[0]);
  if (report) *report = std::move(rep);
  return s;
}

std::vector<std::string> lift_summary(const Schedule& s) {
  struct ByOp {
    int64_t parts = 0, bytes = 0;
  };
  std::map<std::string, ByOp> by_op;
  std::map<std::string, int64_t> opaque;  // label prefix -> count
  int64_t ops = 0, computes = 0, delays = 0, syncs = 0;
  for (const RankSchedule& r : s.ranks)
    for (const Stream& st : r.streams)
      for (const Op& op : st.ops) {
        ++ops;
        if (const Collective* c = op.collective()) {
          ByOp& b = by_op[std::string(to_string(c->op))];
          ++b.parts;
          const int64_t in = c->in.buffer.empty() ? 0 : c->in.count;
          const int64_t out = c->out.buffer.empty() ? 0 : c->out.count;
          b.bytes += std::max(in, out) * std::max(1, dtype_size(c->dtype));
        } else if (const Compute* cp = op.compute()) {
          ++computes;
          if (cp->label.rfind("opaque ", 0) == 0) ++opaque[cp->label];
        } else if (op.delay()) {
          ++delays;
        } else {
          ++syncs;
        }
      }
  std::vector<std::string> v;
  v.push_back(std::to_string(s.ranks.size()) + " ranks, " + std::to_string(s.comms.size()) +
              " communicators, " + std::to_string(ops) + " ops (" + std::to_string(computes) +
              " compute, " + std::to_string(ops - computes - delays - syncs) +
              " collective parts, " + std::to_string(delays) + " delays, " + std::to_string(syncs) +
              " record/wait)");
  if (by_op.empty()) v.push_back("collectives: none lifted");
  for (const auto& [name, b] : by_op)
    v.push_back("  " + name + ": " + std::to_string(b.parts) + " parts over the ranks, " +
                format_bytes(b.bytes) + " in all (the larger buffer of each part)");
  for (const auto& [label, n] : opaque)
    v.push_back("  left opaque: " + std::to_string(n) + "x " + label);
  v.push_back("provenance:");
  for (const std::string& p : s.provenance) v.push_back("  " + p);
  return v;
}

std::vector<std::string> lift_summary(const Schedule& s, const LiftReport& r) {
  std::vector<std::string> v = lift_summary(s);
  std::vector<std::string> extra;
  if (r.execution_trace)
    extra.push_back("data flow: " + std::to_string(r.compute_with_dataflow) + " of " +
                    std::to_string(r.compute) + " compute ops from the execution trace, " +
                    std::to_string(r.collectives) + " collective parts lifted, " +
                    std::to_string(r.opaque_collectives) + " left opaque");
  // At most three opaque groups by name, then a count of the rest.
  int64_t rest = 0, shown = 0;
  for (const auto& o : r.opaque) {
    if (o.reason.empty()) continue;
    if (shown < 3) {
      extra.push_back("  opaque: " + std::to_string(o.count) + "x " + o.op + ": " + o.reason);
      ++shown;
    } else {
      rest += o.count;
    }
  }
  if (rest > 0) extra.push_back("  opaque: " + std::to_string(rest) + " more (braid lift --json)");
  v.insert(v.begin() + 1, extra.begin(), extra.end());
  return v;
}

std::string LiftReport::json() const {
  json::Writer w(json::Writer::Style::Spaced);
  w.begin_object(true);
  write_fields(w);
  w.end_object();
  return w.str();
}

void LiftReport::write_fields(json::Writer& w) const {
  w.field("ops", ops)
      .field("compute", compute)
      .field("compute_with_dataflow", compute_with_dataflow);
  w.field("collectives", collectives).field("opaque_collectives", opaque_collectives);
  w.field("execution_trace", execution_trace).field("step", step);
  if (!step_reason.empty()) w.field("step_reason", step_reason);
  w.field("dataflow_deps", dataflow_deps).field("timing_deps", timing_deps);
  w.key("opaque").begin_array(true);
  for (const Opaque& o : opaque) {
    w.begin_object();
    w.field("op", o.op).field("count", o.count).field("reason", o.reason);
    w.end_object();
  }
  w.end_array();
}

LiftedRun lift_into_file(const std::string& path, int64_t run, int64_t step) {
  LiftOptions opt;
  opt.step = step;
  return lift_into_file(path, run, opt);
}

LiftedRun lift_into_file(const std::string& path, int64_t run, const LiftOptions& opt) {
  LiftedRun out;
  {
    TraceReader reader(path);
    out.run_id = run >= 0 ? run : analysis::default_run(reader);
    out.schedule = lift_run(reader, out.run_id, opt, &out.report);
  }
  lift_phase(opt, 3, path);  // the last moment a cancel leaves the file as it was
  out.schedule_id = store_schedule(path, out.schedule, -1, "[]", false, opt.cancel);
  return out;
}

}  // namespace braid::fusion

#include "fusion/lift.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "fusion/schedule_store.h"
#include "fusion/validate.h"
#include "trace/error.h"
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

Schedule lift(const analysis::RunData& run, const analysis::MatchResult& match,
              const LiftOptions& opt) {
  Schedule s;
  s.name = "lifted run " + std::to_string(run.run_id);
  // The file's name, not its path: the schedule is stored in that file, which may be moved.
  if (run.reader) s.name += " of " + std::filesystem::path(run.reader->path()).filename().string();
  if (opt.step >= 0) s.name += " step " + std::to_string(opt.step);
  auto& prov = s.provenance;
  prov.push_back(lift_provenance(run.run_id, opt.step));

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

  // Per rank (own clock): the step's ops are those it launched (analysis::op_step, as the
  // analysis attributes them); `window` is where they start and end.
  std::map<int32_t, RankTimeline> timelines;
  std::map<int32_t, std::pair<Ns, Ns>> window;
  for (int32_t r : ids) {
    const RankTrace& t = run.ranks.at(r);
    RankTimeline& tl = timelines[r] = analysis::build_timeline(t, opt.timeline);
    Ns lo = INT64_MIN, hi = INT64_MAX;
    if (opt.step >= 0) {
      if (std::none_of(t.steps.begin(), t.steps.end(),
                       [&](const Step& st) { return st.step == opt.step; })) {
        std::set<int64_t> have;
        for (const Step& st : run.ranks.at(r).steps) have.insert(st.step);
        std::string list;
        for (int64_t h : have) list += (list.empty() ? "" : ", ") + std::to_string(h);
        throw Error(ErrorCode::Usage,
                    (run.reader ? run.reader->path() + ": " : std::string()) + "rank " +
                        std::to_string(r) + " of run " + std::to_string(run.run_id) +
                        " has no step " + std::to_string(opt.step) +
                        (list.empty() ? " (the trace has no steps)" : " (steps: " + list + ")"));
      }
      lo = INT64_MAX, hi = INT64_MIN;
      for (const analysis::StreamOps& so : tl.streams)
        for (const GpuOp& op : so.ops)
          if (analysis::op_step(t, op) == opt.step)
            lo = std::min(lo, op.start), hi = std::max(hi, op.end);
    }
    window[r] = {lo, hi};
  }
  auto in_step = [&](int32_t r, const GpuOp& op) {
    return opt.step < 0 || analysis::op_step(run.ranks.at(r), op) == opt.step;
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
    if (why.empty()) liftable[g] = true;
    else left_opaque[why] += static_cast<int64_t>(grp.members.size());
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
  bool any_wait_calls = false, any_unknown_launch = false;
  for (int32_t r : ids) {
    const RankTrace& t = run.ranks.at(r);
    const int32_t sr = srank[r];
    s.add_rank(sr);
    const RankTimeline& tl = timelines.at(r);
    any_wait_calls = any_wait_calls || std::any_of(t.syncs.begin(), t.syncs.end(),
        [](const analysis::SyncCall& c) { return c.kind == analysis::SyncKind::StreamWaitEvent; });

    // Waits each op needs, and records each op must be followed by.
    std::map<OpPos, std::vector<OpPos>> waits;  // consumer -> producers
    if (opt.infer_dependencies)
      for (const analysis::DepEdge& d : tl.deps) {
        if (!in_step(r, tl.op(d.from)) || !in_step(r, tl.op(d.to))) continue;
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
      Ns prev_end = INT64_MIN;
      for (int32_t i = 0; i < static_cast<int32_t>(st.ops.size()); ++i) {
        const GpuOp& op = st.ops[i];
        if (!in_step(r, op)) continue;
        if (stream < 0)
          stream = s.add_stream(sr, st.stream < 0 ? "host" : "stream " + std::to_string(st.stream));
        OpPos pos{si, i};
        Ns ready = prev_end;
        if (auto w = waits.find(pos); w != waits.end())
          for (const OpPos& f : w->second) {
            s.append(sr, stream, Wait{event_of[f]});
            ready = std::max(ready, tl.op(f).end);
          }
        if (ready == INT64_MIN && opt.step >= 0) ready = window[r].first;
        if (ready != INT64_MIN && op.start - ready >= opt.min_gap_ns && opt.min_gap_ns >= 0) {
          s.append(sr, stream, Delay{op.start - ready});
          ++delays;
        }
        const Ns dur = std::max<Ns>(0, op.end - op.start);
        int g = op.coll >= 0 ? match.group({r, op.coll}) : -1;
        if (g >= 0 && liftable[g]) {
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
          std::string base = "c" + std::to_string(g);
          int64_t in_n = 0, out_n = 0;
          switch (c.op) {
            case CollOp::AllGather: in_n = sh.count, out_n = n * sh.count; break;
            case CollOp::ReduceScatter: in_n = n * sh.count, out_n = sh.count; break;
            case CollOp::AllToAll: in_n = out_n = n * sh.count; break;
            case CollOp::Send: in_n = sh.count, out_n = -1; break;
            case CollOp::Recv: in_n = -1, out_n = sh.count; break;
            case CollOp::Broadcast:
              fc.root = srank[c.peer_or_root];
              in_n = fc.root == sr ? sh.count : -1, out_n = sh.count;
              break;
            case CollOp::Reduce:
              fc.root = srank[c.peer_or_root];
              in_n = sh.count, out_n = fc.root == sr ? sh.count : -1;
              break;
            default: in_n = out_n = sh.count; break;
          }
          if (c.op == CollOp::Send || c.op == CollOp::Recv) fc.peer = srank[c.peer_or_root];
          if (in_n >= 0) {
            s.add_buffer(sr, base + ".in", sh.dtype, in_n);
            fc.in = {base + ".in", 0, in_n};
          }
          if (out_n >= 0) {
            s.add_buffer(sr, base + ".out", sh.dtype, out_n);
            fc.out = {base + ".out", 0, out_n};
          }
          fc.label = std::string(to_string(c.op)) + " #" + std::to_string(grp.seq) + " (" +
                     std::to_string(dur) + " ns in the trace)";
          s.append(sr, stream, std::move(fc));
        } else {
          Compute cp;
          cp.duration_ns = dur;
          cp.opaque = true;
          if (op.coll >= 0) {
            const braid::Collective& c = t.collectives[op.coll];
            cp.label = "opaque " + std::string(to_string(c.op)) + " on '" + run.str(c.comm) + "'";
          } else if (op.type == OpType::Memcpy) {
            const Memcpy& mc = t.memcpys[op.index];
            cp.label = std::string(to_string(mc.kind)) + " " + std::to_string(mc.bytes) + " B";
          } else {
            cp.label = run.str(t.kernels[op.index].name);
          }
          s.append(sr, stream, std::move(cp));
        }
        if (auto e = event_of.find(pos); e != event_of.end()) s.append(sr, stream, Record{e->second});
        prev_end = op.end;
      }
    }
  }

  if (deps > 0)
    prov.push_back(std::to_string(deps) + " cross-stream dependencies inferred from timing (an op "
                   "that started when another stream's op ended, later than its own stream and "
                   "launch allowed" +
                   std::string(any_wait_calls ? "; the ranks issued cudaStreamWaitEvent"
                                              : "; no cudaStreamWaitEvent call was seen") +
                   (any_unknown_launch ? "; some launch times unknown" : "") + ")");
  else
    prov.push_back(opt.infer_dependencies ? "no cross-stream dependency found in the trace"
                                          : "cross-stream dependencies not inferred (option)");
  if (comm_order_events > 0)
    prov.push_back(std::to_string(comm_order_events) +
                   " events order consecutive collectives of one communicator on different "
                   "streams (NCCL runs a communicator's operations in issue order)");
  prov.push_back("compute is opaque, durations from the trace; " + std::to_string(delays) +
                 " host gaps of at least " + std::to_string(opt.min_gap_ns) +
                 " ns written as delays");
  prov.push_back("each collective has its own in/out buffers, sized from the trace");
  if (uneven > 0)
    prov.push_back(std::to_string(uneven) +
                   " all-to-alls move different amounts per rank in the trace (uneven splits): "
                   "lifted as even, each rank with the lowest rank's per-peer size");
  for (auto& [why, n] : left_opaque)
    prov.push_back(std::to_string(n) + " collective parts left as opaque compute: " + why);
  for (size_t i = 0; i < s.ranks.size(); ++i)
    if (s.ranks[i].streams.empty()) s.add_stream(static_cast<int32_t>(i), "idle");
  return s;
}

namespace {
constexpr size_t kLiftPhases = 4;  // load, match, lift, store
void lift_phase(const LiftOptions& opt, size_t phase, const std::string& where) {
  if (opt.cancel && opt.cancel->load()) throw Error(ErrorCode::Usage, where + ": lift cancelled");
  if (opt.progress) opt.progress(phase, kLiftPhases);
}
}  // namespace

Schedule lift_run(const TraceReader& reader, int64_t run_id, const LiftOptions& opt) {
  lift_phase(opt, 0, reader.path());
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
  Schedule s = lift(run, match, opt);
  auto problems = validate(s);
  if (!problems.empty() && opt.infer_dependencies) {
    // Inferred edges can be wrong (e.g. a coincidence of timing); retry without them.
    LiftOptions plain = opt;
    plain.infer_dependencies = false;
    Schedule s2 = lift(run, match, plain);
    if (validate(s2).empty()) {
      s2.provenance.push_back("the inferred dependencies made the schedule invalid (" +
                              problems[0] + "); lifted without them");
      return s2;
    }
  }
  if (!problems.empty())
    throw Error(ErrorCode::Internal, reader.path() + ": the lifted schedule of run " +
                                         std::to_string(run_id) + " is invalid: " + problems[0]);
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
    out.schedule = lift_run(reader, out.run_id, opt);
  }
  lift_phase(opt, 3, path);  // the last moment a cancel leaves the file as it was
  out.schedule_id = store_schedule(path, out.schedule, -1, "[]", false, opt.cancel);
  return out;
}

}  // namespace braid::fusion

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
#include "trace/format.h"
#include "trace/json.h"

namespace braid::fusion {

std::string lift_provenance_line(int64_t run, int64_t step) {
  return "lifted from trace run " + std::to_string(run) +
         (step >= 0 ? ", step " + std::to_string(step) : std::string(", whole run")) +
         " by fusion::lift";
}

std::string lifted_comm_id(std::string_view trace_comm) {
  return trace_comm.empty() ? "default" : std::string(trace_comm);
}

LiftedSpans lifted_spans(const analysis::RunData& run, const analysis::MatchResult& match,
                         int64_t step, const EtFlow* et) {
  LiftedSpans out;
  const analysis::ClockFit clocks = analysis::align_clocks(run, match);
  out.residual_rms_ns = clocks.residual_rms_ns;
  out.anchors = clocks.anchors_used;
  Ns job_start = INT64_MAX;
  for (int32_t r : run.rank_ids()) {
    const analysis::RankTrace t = with_host_compute(run.ranks.at(r), et, r);
    const analysis::RankTimeline tl = analysis::build_timeline(t);
    LiftedSpan sp;
    sp.first = INT64_MAX, sp.last = INT64_MIN;
    for (const analysis::StreamOps& so : tl.streams)
      for (const analysis::GpuOp& op : so.ops)
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

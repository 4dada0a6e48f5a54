#include "replay/store_run.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "fusion/validate.h"
#include "replay/common.h"
#include "trace/categories.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/json.h"

namespace braid::replay {

namespace {
constexpr Ns kStepGapNs = 1000;  // between consecutive steps on the stored time axis
}

int64_t write_run(TraceWriter& w, const fusion::Schedule& s, const ReplayResult& r,
                  const RunDescription& d) {
  const fusion::Matching m = fusion::match_schedule_collectives(s);
  const int64_t run = w.begin_run(r.kind, d.source, r.backend, d.label, d.schedule_id);
  const int32_t world = static_cast<int32_t>(s.ranks.size());

  for (const RankInfo& info : r.ranks) w.add_rank(run, info);
  for (const auto& rs : s.ranks)
    for (size_t st = 0; st < rs.streams.size(); ++st)
      w.add_stream(run, StreamInfo{rs.rank, static_cast<int64_t>(st), true, rs.streams[st].name});
  for (const fusion::Comm& c : s.comms) {
    const std::string ranks = json::int_array(c.ranks);
    w.add_communicator(run, Communicator{c.id, static_cast<int32_t>(c.ranks.size()), ranks, c.id,
                                         r.backend});
  }
  for (const std::string& note : r.notes)
    w.add_diagnostic(run, diag::make(diag::Code::replay_note, 1, note));

  // Where each op id lives, and each collective's per-communicator sequence number; steps after
  // the first continue the numbering as a real job's later steps would.
  std::unordered_map<int64_t, fusion::OpRef> where;
  for (int32_t rk = 0; rk < world; ++rk)
    for (int32_t st = 0; st < static_cast<int32_t>(s.ranks[rk].streams.size()); ++st)
      for (int32_t i = 0; i < static_cast<int32_t>(s.ranks[rk].streams[st].ops.size()); ++i)
        where[s.ranks[rk].streams[st].ops[i].id] = {rk, st, i};
  std::map<std::string, int64_t> seqs_per_step;
  for (const fusion::MatchGroup& g : m.groups)
    seqs_per_step[g.comm] = std::max(seqs_per_step[g.comm], g.seq + 1);

  const StrId gap_name = w.intern("host gap");
  const StrId domain = w.intern("braid.replay");
  int64_t correlation = 0;
  Ns offset = 0;
  for (size_t k = 0; k < r.steps.size(); ++k) {
    const StepRecord& step = r.steps[k];
    for (int32_t rk = 0; rk < static_cast<int32_t>(step.ranks.size()); ++rk) {
      w.add_step(run, Step{rk, static_cast<int64_t>(k), offset, offset + step.rank_ns(rk)});
      for (const OpTime& t : step.ranks[rk]) {
        auto it = where.find(t.op_id);
        if (it == where.end()) continue;
        const fusion::OpRef ref = it->second;
        const fusion::Op& op = s.op(ref);
        const Ns start = offset + t.start, end = offset + t.end;
        if (const auto* c = op.compute()) {
          Kernel kr;
          kr.rank = rk;
          kr.stream = t.stream;
          kr.start = start;
          kr.end = end;
          kr.name = w.intern(c->label.empty() ? "compute" : c->label);
          kr.category = classify_kernel(c->label);
          if (is_comm(kr.category)) kr.category = Category::Other;  // compute, whatever its name
          kr.correlation = ++correlation;
          w.add(run, kr);
        } else if (op.delay()) {
          Range rg;
          rg.rank = rk;
          rg.stream = t.stream;
          rg.on_gpu = true;
          rg.start = start;
          rg.end = end;
          rg.name = gap_name;
          rg.domain = domain;
          w.add(run, rg);
        } else if (const auto* c = op.collective()) {
          const std::string name = c->label.empty() ? std::string(to_string(c->op)) : c->label;
          Kernel kr;
          kr.rank = rk;
          kr.stream = t.stream;
          kr.start = start;
          kr.end = end;
          kr.name = w.intern(name);
          kr.category = comm_category(c->op);
          kr.correlation = ++correlation;
          w.add(run, kr);
          Collective cr;
          cr.rank = rk;
          cr.comm = w.intern(c->comm);
          const int g = m.group_of(ref);
          cr.seq = g >= 0 ? m.groups[g].seq + static_cast<int64_t>(k) * seqs_per_step[c->comm] : -1;
          cr.op = c->op;
          cr.dtype = w.intern(c->dtype);
          cr.in_count = c->in.empty() ? -1 : c->in.count;
          cr.out_count = c->out.empty() ? -1 : c->out.count;
          cr.bytes = fusion::collective_bytes(s, *c);
          cr.peer_or_root = c->op == CollOp::Broadcast || c->op == CollOp::Reduce ? c->root : c->peer;
          cr.stream = t.stream;
          cr.start = start;
          cr.end = end;
          cr.name = kr.name;
          cr.kernel_ref = kr.correlation;
          w.add(run, cr);
        }
      }
    }
    offset += step.step_ns() + kStepGapNs;
  }
  return run;
}

std::vector<int64_t> store_runs(const std::string& path,
                                const std::vector<const fusion::Schedule*>& schedules,
                                const std::vector<const ReplayResult*>& results,
                                const std::vector<RunDescription>& descriptions) {
  if (schedules.size() != results.size() || results.size() != descriptions.size())
    throw Error(ErrorCode::Internal, "store_runs: mismatched argument lengths");
  TraceWriter w(path, TraceWriter::Mode::Append);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < results.size(); ++i)
    ids.push_back(write_run(w, *schedules[i], *results[i], descriptions[i]));
  w.commit();
  return ids;
}

}  // namespace braid::replay

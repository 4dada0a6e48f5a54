#include "app/view/core/extras.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "analysis/store.h"
#include "trace/reader.h"

namespace braid::view {
namespace {

void place(const ViewRun& d, OpportunityView& v) {
  for (int32_t c : v.colls) {
    const Collective& x = d.colls[c].c;
    v.t0 = v.t0 < 0 ? x.start : std::min(v.t0, x.start);
    v.t1 = std::max(v.t1, x.end);
  }
}

}  // namespace

namespace {

// Where op `op_id` sits among its rank's collectives on its communicator, and how many
// collectives one repetition of the schedule runs there; order -1 when it is no collective.
struct OpPlace {
  int32_t rank = -1;
  std::string comm;
  int64_t order = -1, per_step = 0;
};

OpPlace place_of_op(const fusion::Schedule& s, int64_t op_id) {
  OpPlace p;
  auto ref = s.find_op(op_id);
  if (!ref) return p;
  const fusion::Collective* target = s.op(*ref).collective();
  if (!target) return p;
  p.rank = ref->rank;
  p.comm = target->comm;
  const fusion::RankSchedule& rs = s.ranks[ref->rank];
  for (size_t si = 0; si < rs.streams.size(); ++si)
    for (size_t oi = 0; oi < rs.streams[si].ops.size(); ++oi) {
      if (static_cast<int>(si) == ref->stream && static_cast<int>(oi) == ref->index)
        p.order = p.per_step;
      if (auto* c = rs.streams[si].ops[oi].collective(); c && c->comm == target->comm) ++p.per_step;
    }
  return p;
}

}  // namespace

std::vector<std::vector<int32_t>> colls_of_op_per_step(const ViewRun& d, const fusion::Schedule& s,
                                                       int64_t op_id, size_t max_steps) {
  std::vector<std::vector<int32_t>> out;
  OpPlace p = place_of_op(s, op_id);
  if (p.order < 0) return out;
  std::vector<int32_t> mine;
  for (size_t i = 0; i < d.colls.size(); ++i)
    if (d.colls[i].c.rank == p.rank && d.str(d.colls[i].c.comm) == p.comm)
      mine.push_back(static_cast<int32_t>(i));
  std::sort(mine.begin(), mine.end(),
            [&](int32_t a, int32_t b) { return d.colls[a].c.start < d.colls[b].c.start; });
  for (int64_t k = p.order; k < static_cast<int64_t>(mine.size()) && out.size() < max_steps;
       k += p.per_step) {
    int32_t c = mine[k];
    if (d.colls.match(c) >= 0)
      out.push_back(d.matches[d.colls.match(c)].members);
    else
      out.push_back({c});
  }
  return out;
}

std::vector<int32_t> colls_of_op(const ViewRun& d, const fusion::Schedule& s, int64_t op_id) {
  auto steps = colls_of_op_per_step(d, s, op_id, 1);
  return steps.empty() ? std::vector<int32_t>{} : steps[0];
}

Extras load_extras(const ViewRun& run, size_t max_rows) {
  Extras x;
  try {
    TraceReader reader(run.path);
    x.has_schedules = fusion::has_schedules(reader);
    if (reader.has_table("opportunities")) {
      std::map<int64_t, std::unique_ptr<fusion::Schedule>> schedules;
      for (auto& o : fusion::list_opportunities(run.path)) {
        OpportunityView v;
        v.o = std::move(o);
        auto& s = schedules[v.o.schedule_id];
        if (!s) {
          try {
            s = std::make_unique<fusion::Schedule>(
                fusion::load_stored_schedule(run.path, v.o.schedule_id));
          } catch (const std::exception& e) {
            x.error = e.what();
            s = std::make_unique<fusion::Schedule>();
          }
        }
        std::set<int32_t> seen;
        for (int64_t op : v.o.ops)
          for (int32_t c : colls_of_op(run, *s, op))
            if (seen.insert(c).second) v.colls.push_back(c);
        place(run, v);
        x.opportunities.push_back(std::move(v));
      }
    }
    for (TraceReader::TableText& t : reader.extra_tables(run.run.run_id, max_rows)) {
      if (!t.rows.empty() && t.name.starts_with("analysis_")) x.analyzed = true;
      x.analysis.push_back(std::move(t));
    }
    for (analysis::StoredPathSegment& p : analysis::load_critical_path(reader, run.run.run_id))
      x.critical_path.push_back(
          {p.step, std::move(p.kind), p.rank, p.stream, p.start, p.end, std::move(p.name)});
    for (const analysis::StoredCommLabel& l : analysis::load_comm_labels(reader, run.run.run_id)) {
      x.comm_dim[l.comm] = l.dim;
      x.comm_evidence[l.comm] = l.evidence;
    }
  } catch (const std::exception& e) {
    x.error = e.what();
  }
  return x;
}

std::vector<FusedLink> fused_links(const ViewRun& baseline, const ViewRun& fused) {
  std::vector<FusedLink> out;
  if (fused.run.schedule_id < 0) return out;
  fusion::Schedule s = fusion::load_stored_schedule(fused.path, fused.run.schedule_id);
  int64_t parent_id = -1;
  for (const auto& st : fusion::list_schedules(fused.path))
    if (st.id == fused.run.schedule_id) parent_id = st.parent_id;
  if (parent_id < 0) return out;
  fusion::Schedule parent = fusion::load_stored_schedule(fused.path, parent_id);
  for (const auto& rs : s.ranks)
    for (const auto& st : rs.streams)
      for (const auto& op : st.ops) {
        if (op.replaces.empty()) continue;
        FusedLink l;
        l.op_id = op.id;
        l.rank = rs.rank;
        l.replaces = op.replaces;
        l.what = op.collective() ? std::string(to_string(op.collective()->op)) + " on '" +
                                       op.collective()->comm + "'"
                                 : std::string(fusion::to_string(op.kind()));
        l.order = place_of_op(s, op.id).order;
        auto fused_steps = colls_of_op_per_step(fused, s, op.id);
        // What it replaces, step by step: the k-th repetition of each replaced op.
        std::vector<std::vector<std::vector<int32_t>>> replaced;
        for (int64_t r : op.replaces) replaced.push_back(colls_of_op_per_step(baseline, parent, r));
        for (size_t k = 0; k < fused_steps.size(); ++k) {
          FusedLink::Step step;
          step.fused = fused_steps[k];
          std::set<int32_t> seen;
          for (const auto& r : replaced)
            if (k < r.size())
              for (int32_t c : r[k])
                if (seen.insert(c).second) step.replaced.push_back(c);
          l.steps.push_back(std::move(step));
        }
        out.push_back(std::move(l));
      }
  return out;
}

std::vector<FusedOpSummary> summarize_links(const std::vector<FusedLink>& links) {
  std::vector<FusedOpSummary> out;
  std::map<std::tuple<std::string, int64_t, size_t>, size_t> index;
  for (size_t i = 0; i < links.size(); ++i) {
    const FusedLink& l = links[i];
    auto [it, fresh] =
        index.emplace(std::make_tuple(l.what, l.order, l.replaces.size()), out.size());
    if (fresh) {
      FusedOpSummary s;
      s.what = l.what + (l.order >= 0 ? " #" + std::to_string(l.order + 1) : "");
      s.replaces = l.replaces.size();
      out.push_back(std::move(s));
    }
    FusedOpSummary& s = out[it->second];
    s.links.push_back(i);
    s.ranks.push_back(l.rank);
    s.steps = std::max(s.steps, l.steps.size());
  }
  return out;
}

}  // namespace braid::view

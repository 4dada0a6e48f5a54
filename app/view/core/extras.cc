#include "app/view/core/extras.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "trace/reader.h"
#include "trace/sqlite_util.h"

namespace braid::view {
namespace {

const std::set<std::string>& core_tables() {
  static const std::set<std::string> t{
      "meta",          "strings",     "categories", "runs",         "ranks", "streams",
      "kernels",       "memcpys",     "api_calls",  "nvtx_ranges",  "steps", "collectives",
      "communicators", "diagnostics", "schedules",  "opportunities"};
  return t;
}

bool has_table(sqlite3* db, const std::string& name) {
  sql::Stmt s(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?");
  s.bind(1, name);
  return s.step();
}

std::string quoted(const std::string& id) {
  std::string q = "\"";
  for (char c : id) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string cell(sqlite3_stmt* s, int c) {
  switch (sqlite3_column_type(s, c)) {
    case SQLITE_NULL:
      return "";
    case SQLITE_INTEGER:
      return std::to_string(sqlite3_column_int64(s, c));
    case SQLITE_FLOAT: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", sqlite3_column_double(s, c));
      return buf;
    }
    default: {
      auto p = sqlite3_column_text(s, c);
      return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s, c)) : "";
    }
  }
}

void place(const RunData& d, OpportunityView& v) {
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

std::vector<std::vector<int32_t>> colls_of_op_per_step(const RunData& d, const fusion::Schedule& s,
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
    if (d.colls[c].match >= 0)
      out.push_back(d.matches[d.colls[c].match].members);
    else
      out.push_back({c});
  }
  return out;
}

std::vector<int32_t> colls_of_op(const RunData& d, const fusion::Schedule& s, int64_t op_id) {
  auto steps = colls_of_op_per_step(d, s, op_id, 1);
  return steps.empty() ? std::vector<int32_t>{} : steps[0];
}

Extras load_extras(const RunData& run, size_t max_rows) {
  Extras x;
  try {
    TraceReader reader(run.path);
    sqlite3* db = reader.db();
    x.has_schedules =
        has_table(db, "schedules") && sql::scalar(db, "SELECT COUNT(*) FROM schedules") > 0;
    if (has_table(db, "opportunities")) {
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
    std::vector<std::string> names;
    {
      sql::Stmt s(db, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name");
      while (s.step()) names.push_back(s.text(0));
    }
    for (const std::string& name : names) {
      if (core_tables().count(name) || name.starts_with("sqlite_")) continue;
      std::vector<std::string> cols;
      bool has_run = false;
      {
        sql::Stmt s(db, "SELECT name FROM pragma_table_info(?)");
        s.bind(1, name);
        while (s.step()) {
          std::string c = s.text(0);
          if (c == "run_id")
            has_run = true;
          else
            cols.push_back(c);
        }
      }
      if (!has_run) continue;
      AnalysisTable t;
      t.name = name;
      t.columns = cols;
      std::string q = "SELECT ";
      for (size_t i = 0; i < cols.size(); ++i) q += (i ? ", " : "") + quoted(cols[i]);
      q += " FROM " + quoted(name) + " WHERE run_id=? LIMIT " + std::to_string(max_rows + 1);
      sql::Stmt s(db, q);
      s.bind(1, run.run.run_id);
      while (s.step()) {
        if (t.rows.size() == max_rows) {
          t.truncated = true;
          break;
        }
        std::vector<std::string> row;
        for (size_t i = 0; i < cols.size(); ++i) row.push_back(cell(s.get(), static_cast<int>(i)));
        t.rows.push_back(std::move(row));
      }
      if (!t.rows.empty() && name.starts_with("analysis_")) x.analyzed = true;
      x.analysis.push_back(std::move(t));
    }
    if (has_table(db, "analysis_critical_path")) {
      sql::Stmt s(
          db,
          "SELECT step, kind, rank, stream, start_ns, end_ns, name FROM analysis_critical_path"
          " WHERE run_id=? ORDER BY step, position");
      s.bind(1, run.run.run_id);
      while (s.step())
        x.critical_path.push_back({s.i64(0), s.text(1), static_cast<int32_t>(s.i64(2)), s.i64(3),
                                   s.i64(4), s.i64(5), s.text(6)});
    }
    if (has_table(db, "analysis_communicators")) {
      sql::Stmt s(db,
                  "SELECT comm, parallel_dim, evidence FROM analysis_communicators WHERE run_id=?");
      s.bind(1, run.run.run_id);
      while (s.step()) {
        x.comm_dim[s.text(0)] = s.text(1);
        x.comm_evidence[s.text(0)] = s.text(2);
      }
    }
  } catch (const std::exception& e) {
    x.error = e.what();
  }
  return x;
}

std::vector<FusedLink> fused_links(const RunData& baseline, const RunData& fused) {
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

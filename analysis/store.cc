#include "analysis/store.h"

#include <tuple>

#include "trace/json.h"
#include "trace/reader.h"
#include "trace/rows.h"
#include "trace/sqlite_util.h"
#include "trace/store_update.h"

namespace braid::analysis {

namespace {
// Analysis results (schema 1.1, docs/schema.md); registered with the schema as the family of this
// module (schema::owned_families). IF NOT EXISTS: files get them with their first analysis.
const char* const kTables = R"SQL(
CREATE TABLE IF NOT EXISTS analysis_ranks(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, busy_ns INTEGER NOT NULL,
  idle_ns INTEGER NOT NULL, compute_ns INTEGER NOT NULL, comm_ns INTEGER NOT NULL,
  memory_ns INTEGER NOT NULL, non_compute_ns INTEGER NOT NULL, overlap_ns INTEGER NOT NULL,
  exposed_comm_ns INTEGER NOT NULL, overlap_pct REAL NOT NULL,
  PRIMARY KEY (run_id, rank, step));
CREATE TABLE IF NOT EXISTS analysis_collectives(
  run_id INTEGER NOT NULL, group_id INTEGER NOT NULL, comm TEXT NOT NULL, seq INTEGER NOT NULL,
  match_method TEXT NOT NULL, op TEXT NOT NULL, bytes INTEGER NOT NULL, nranks INTEGER NOT NULL,
  step INTEGER NOT NULL, complete INTEGER NOT NULL, problem TEXT,
  first_arrival_ns INTEGER NOT NULL, last_arrival_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  wait_ns INTEGER NOT NULL, transfer_ns INTEGER NOT NULL, late_rank INTEGER NOT NULL,
  algbw_gbps REAL NOT NULL, busbw_gbps REAL NOT NULL, predicted_ns INTEGER NOT NULL,
  PRIMARY KEY (run_id, group_id));
CREATE TABLE IF NOT EXISTS analysis_collective_members(
  run_id INTEGER NOT NULL, group_id INTEGER NOT NULL, rank INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, wait_ns INTEGER NOT NULL,
  PRIMARY KEY (run_id, group_id, rank, start_ns));
CREATE TABLE IF NOT EXISTS analysis_critical_path(
  run_id INTEGER NOT NULL, step INTEGER NOT NULL, position INTEGER NOT NULL,
  kind TEXT NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, name TEXT, category TEXT, comm TEXT,
  group_id INTEGER NOT NULL, late_rank INTEGER NOT NULL,
  PRIMARY KEY (run_id, step, position));
CREATE TABLE IF NOT EXISTS analysis_communicators(
  run_id INTEGER NOT NULL, comm TEXT NOT NULL, parallel_dim TEXT NOT NULL, evidence TEXT,
  nranks INTEGER, ranks TEXT, alpha_ns REAL, ns_per_byte REAL, cost_source TEXT,
  cv_error REAL, samples INTEGER,
  PRIMARY KEY (run_id, comm));
CREATE TABLE IF NOT EXISTS analysis_clocks(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, offset_ns INTEGER NOT NULL,
  error_ns INTEGER NOT NULL, residual_rms_ns REAL NOT NULL, anchors INTEGER NOT NULL,
  aligned INTEGER NOT NULL, flagged INTEGER NOT NULL, reference_rank INTEGER NOT NULL,
  PRIMARY KEY (run_id, rank));
CREATE TABLE IF NOT EXISTS analysis_reports(
  run_id INTEGER NOT NULL, step INTEGER NOT NULL, profile TEXT, created_at TEXT NOT NULL,
  report TEXT NOT NULL,
  PRIMARY KEY (run_id, step));
)SQL";
}  // namespace

void ensure_tables(sqlite3* db) { sql::exec(db, kTables); }

void store_analysis(const std::string& path, const Analysis& a) {
  StoreUpdate u(path);
  sqlite3* db = u.db();
  ensure_tables(db);
  const int64_t run = a.run_id;
  auto clear = [&](const char* table, bool by_step) {
    sql::Stmt s(db, std::string("DELETE FROM ") + table + " WHERE run_id=?" +
                        (by_step && a.step >= 0 ? " AND step=?" : ""));
    s.bind(1, run);
    if (by_step && a.step >= 0) s.bind(2, a.step);
    s.run();
  };
  clear("analysis_ranks", true);
  clear("analysis_critical_path", true);
  clear("analysis_reports", true);
  // Group ids are those of this analysis's matching: all group rows are replaced together.
  clear("analysis_collectives", false);
  clear("analysis_collective_members", false);
  clear("analysis_communicators", false);
  clear("analysis_clocks", false);

  {
    sql::Stmt s(db, "INSERT INTO analysis_ranks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (const RankMetrics& m : a.metrics.ranks) {
      int i = 1;
      s.bind(i++, run);
      s.bind(i++, m.rank);
      s.bind(i++, m.step);
      for (Ns v : {m.start, m.end, m.busy_ns, m.idle_ns, m.compute_ns, m.comm_ns, m.memory_ns,
                   m.non_compute_ns, m.overlap_ns, m.exposed_comm_ns})
        s.bind(i++, static_cast<int64_t>(v));
      s.bind(i++, m.overlap_pct);
      s.run();
    }
  }
  {
    std::map<std::tuple<std::string, CollOp, int64_t>, Ns> predicted;
    for (const CollectiveSummary& cs : a.summary) predicted[{cs.comm, cs.op, cs.bytes}] = cs.predicted_ns;
    sql::Stmt s(db, "INSERT INTO analysis_collectives VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    sql::Stmt m(db, "INSERT OR REPLACE INTO analysis_collective_members VALUES (?,?,?,?,?,?)");
    for (const CollectiveMetrics& c : a.metrics.collectives) {
      const CollGroup& g = a.match.groups[c.group];
      int i = 1;
      s.bind(i++, run);
      s.bind(i++, c.group);
      s.bind(i++, c.comm);
      s.bind(i++, c.seq);
      s.bind(i++, to_string(g.method));
      s.bind(i++, to_string(c.op));
      s.bind(i++, c.bytes);
      s.bind(i++, c.nranks);
      s.bind(i++, c.step);
      s.bind(i++, c.complete ? 1 : 0);
      if (g.problem.empty()) s.bind_null(i++);
      else s.bind(i++, g.problem);
      for (Ns v : {c.first_arrival, c.last_arrival, c.end, c.wait_ns, c.transfer_ns})
        s.bind(i++, static_cast<int64_t>(v));
      s.bind(i++, c.late_rank);
      s.bind(i++, c.algbw_gbps);
      s.bind(i++, c.busbw_gbps);
      auto p = predicted.find({c.comm, c.op, c.bytes});
      s.bind(i++, static_cast<int64_t>(p == predicted.end() ? -1 : p->second));
      s.run();
      for (const MemberTiming& mt : c.members) {
        m.bind(1, run);
        m.bind(2, c.group);
        m.bind(3, mt.rank);
        m.bind(4, static_cast<int64_t>(mt.arrival));
        m.bind(5, static_cast<int64_t>(mt.end));
        m.bind(6, static_cast<int64_t>(mt.wait_ns));
        m.run();
      }
    }
  }
  {
    sql::Stmt s(db, "INSERT INTO analysis_critical_path VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (const CriticalPath& p : a.paths)
      for (size_t k = 0; k < p.chain.size(); ++k) {
        const PathSegment& g = p.chain[k];
        int i = 1;
        s.bind(i++, run);
        s.bind(i++, p.step);
        s.bind(i++, static_cast<int64_t>(k));
        s.bind(i++, to_string(g.kind));
        s.bind(i++, g.rank);
        s.bind(i++, g.stream);
        s.bind(i++, static_cast<int64_t>(g.start));
        s.bind(i++, static_cast<int64_t>(g.end));
        s.bind(i++, g.name);
        s.bind(i++, g.category);
        s.bind(i++, g.comm);
        s.bind(i++, g.group);
        s.bind(i++, g.late_rank);
        s.run();
      }
  }
  {
    sql::Stmt s(db, "INSERT INTO analysis_communicators VALUES (?,?,?,?,?,?,?,?,?,?,?)");
    for (const CommLabel& l : a.labels) {
      const std::string ranks = json::int_array(l.members, json::Writer::Style::Spaced);
      int i = 1;
      s.bind(i++, run);
      s.bind(i++, l.comm);
      s.bind(i++, l.dim);
      s.bind(i++, l.evidence);
      s.bind(i++, l.nranks);
      s.bind(i++, ranks);
      auto c = a.costs.find(l.comm);
      if (c == a.costs.end()) {
        for (int k = 0; k < 5; ++k) s.bind_null(i++);
      } else {
        s.bind(i++, c->second.link.alpha_ns);
        s.bind(i++, c->second.link.ns_per_byte);
        s.bind(i++, c->second.source);
        s.bind(i++, c->second.cv_error);
        s.bind(i++, c->second.samples);
      }
      s.run();
    }
  }
  {
    sql::Stmt s(db, "INSERT INTO analysis_clocks VALUES (?,?,?,?,?,?,?,?,?)");
    rows::SmallTables ranks(db);
    for (const RankClock& c : a.clocks.ranks) {
      int i = 1;
      s.bind(i++, run);
      s.bind(i++, c.rank);
      s.bind(i++, static_cast<int64_t>(c.offset));
      s.bind(i++, static_cast<int64_t>(c.error));
      s.bind(i++, c.residual_rms_ns);
      s.bind(i++, c.anchors);
      s.bind(i++, c.aligned ? 1 : 0);
      s.bind(i++, c.flagged ? 1 : 0);
      s.bind(i++, a.clocks.reference);
      s.run();
      if (c.aligned) ranks.clock_offset(run, c.rank, c.offset, c.error);
    }
  }
  {
    sql::Stmt s(db, "INSERT INTO analysis_reports VALUES (?,?,?,?,?)");
    s.bind(1, run);
    s.bind(2, a.step);
    s.bind(3, a.profile.name);
    s.bind(4, rows::now_iso8601());
    s.bind(5, report_json(a));
    s.run();
  }
  u.commit();
}

StoredCosts load_costs(const std::string& path, int64_t run) {
  StoredCosts out;
  TraceReader reader(path);
  if (!reader.has_table("analysis_reports") || !reader.has_table("analysis_communicators"))
    return out;
  sqlite3* db = reader.db();
  {
    sql::Stmt s(db, "SELECT profile FROM analysis_reports WHERE run_id=? ORDER BY step LIMIT 1");
    s.bind(1, run);
    if (s.step()) {
      out.analysed = true;
      out.profile = s.text(0);
    }
  }
  sql::Stmt s(db,
              "SELECT comm, alpha_ns, ns_per_byte, cost_source, cv_error, samples FROM "
              "analysis_communicators WHERE run_id=? AND alpha_ns IS NOT NULL");
  s.bind(1, run);
  while (s.step()) {
    CommCost c;
    c.link.alpha_ns = s.f64(1);
    c.link.ns_per_byte = s.is_null(2) ? 0 : s.f64(2);
    c.source = s.text(3);
    c.cv_error = s.is_null(4) ? -1 : s.f64(4);
    c.samples = static_cast<int>(s.i64(5));
    out.comms[s.text(0)] = c;
  }
  return out;
}

std::vector<StoredPathSegment> load_critical_path(const TraceReader& reader, int64_t run) {
  std::vector<StoredPathSegment> out;
  if (!reader.has_table("analysis_critical_path")) return out;
  sql::Stmt s(reader.db(),
              "SELECT step, kind, rank, stream, start_ns, end_ns, name FROM analysis_critical_path"
              " WHERE run_id=? ORDER BY step, position");
  s.bind(1, run);
  while (s.step())
    out.push_back({s.i64(0), s.text(1), static_cast<int32_t>(s.i64(2)), s.i64(3), s.i64(4),
                   s.i64(5), s.text(6)});
  return out;
}

std::vector<StoredCommLabel> load_comm_labels(const TraceReader& reader, int64_t run) {
  std::vector<StoredCommLabel> out;
  if (!reader.has_table("analysis_communicators")) return out;
  sql::Stmt s(reader.db(),
              "SELECT comm, parallel_dim, evidence FROM analysis_communicators WHERE run_id=?");
  s.bind(1, run);
  while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2)});
  return out;
}

}  // namespace braid::analysis

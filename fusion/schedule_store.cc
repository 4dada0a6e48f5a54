#include "fusion/schedule_store.h"

#include <simdjson.h>

#include <cstdio>
#include <filesystem>

#include "fusion/pipeline.h"
#include "fusion/symmetry.h"
#include "trace/error.h"
#include "trace/format.h"
#include "trace/json.h"
#include "trace/reader.h"
#include "trace/rows.h"
#include "trace/sqlite_util.h"
#include "trace/store_update.h"
#include "trace/writer.h"

namespace braid::fusion {

namespace {
// Registered with the schema as the family of this module (schema::owned_families). IF NOT
// EXISTS: files get them with their first schedule.
const char* const kTables = R"SQL(
CREATE TABLE IF NOT EXISTS schedules(
  schedule_id INTEGER PRIMARY KEY, parent_id INTEGER, name TEXT NOT NULL, passes TEXT,
  body TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS opportunities(
  schedule_id INTEGER NOT NULL, pass TEXT NOT NULL, ranks TEXT, ops TEXT,
  predicted_saving_ns INTEGER, detail TEXT);
)SQL";

// Parses the "[1,2,3]" arrays json::int_array writes.
template <typename T>
std::vector<T> parse_ints(const std::string& s) {
  std::vector<T> v;
  size_t i = 0;
  while (i < s.size()) {
    if ((s[i] >= '0' && s[i] <= '9') || s[i] == '-') {
      size_t end = 0;
      v.push_back(static_cast<T>(std::stoll(s.substr(i), &end)));
      i += end;
    } else {
      ++i;
    }
  }
  return v;
}
}  // namespace

void ensure_tables(sqlite3* db) { sql::exec(db, kTables); }

int64_t insert_schedule(sqlite3* db, const Schedule& s, int64_t parent_id,
                        std::string_view passes_json) {
  ensure_tables(db);
  sql::Stmt st(db,
               "INSERT INTO schedules(parent_id, name, passes, body, created_at) "
               "VALUES (?, ?, ?, ?, ?)");
  if (parent_id >= 0)
    st.bind(1, parent_id);
  else
    st.bind_null(1);
  st.bind(2, std::string_view(s.name));
  st.bind(3, passes_json);
  std::string body = to_json(s);
  try {
    st.bind(4, std::string_view(body));
  } catch (const Error& e) {
    char size[32];
    std::snprintf(size, sizeof size, "%.2f GB", static_cast<double>(body.size()) / 1e9);
    throw Error(ErrorCode::Unsupported,
                "schedule '" + s.name + "' is " + size + " of braid-schedule/1 JSON (" +
                    std::to_string(s.ranks.size()) + " ranks, " + std::to_string(s.op_count()) +
                    " ops), more than the store holds in one value: " + e.what());
  }
  std::string now = rows::now_iso8601();
  st.bind(5, std::string_view(now));
  st.run();
  return sqlite3_last_insert_rowid(db);
}

void insert_opportunities(sqlite3* db, const std::vector<StoredOpportunity>& v) {
  ensure_tables(db);
  sql::Stmt st(db,
               "INSERT INTO opportunities(schedule_id, pass, ranks, ops, predicted_saving_ns, "
               "detail) VALUES (?, ?, ?, ?, ?, ?)");
  for (const StoredOpportunity& o : v) {
    st.bind(1, o.schedule_id);
    st.bind(2, std::string_view(o.pass));
    std::string ranks = json::int_array(o.ranks), ops = json::int_array(o.ops);
    st.bind(3, std::string_view(ranks));
    st.bind(4, std::string_view(ops));
    st.bind(5, static_cast<int64_t>(o.predicted_saving_ns));
    st.bind(6, std::string_view(o.detail));
    st.run();
  }
}

namespace {
void commit_unless_cancelled(StoreUpdate& up, const std::atomic<bool>* cancel) {
  if (cancel && cancel->load())
    throw Error(ErrorCode::Usage, up.path() + ": cancelled before the schedule was stored");
  up.commit();
}
}  // namespace

int64_t store_schedule(const std::string& path, const Schedule& s, int64_t parent_id,
                       std::string_view passes_json, bool create, const std::atomic<bool>* cancel) {
  std::error_code ec;
  if (create && !std::filesystem::exists(path, ec)) {
    TraceWriter w(path, TraceWriter::Mode::Create);
    w.commit();
  }
  StoreUpdate u(path);
  int64_t id = insert_schedule(u.db(), s, parent_id, passes_json);
  commit_unless_cancelled(u, cancel);
  return id;
}

int64_t store_fused(const std::string& path, int64_t parent_id, const Schedule& input,
                    PipelineResult& res, const std::string& profile,
                    const std::atomic<bool>* cancel) {
  auto opportunity = [](int64_t schedule_id, const Finding& f, bool applied) {
    StoredOpportunity o;
    o.schedule_id = schedule_id;
    o.pass = f.pass;
    o.ranks = f.ranks;
    o.ops = f.ops;
    o.predicted_saving_ns = f.saving_ns;
    o.detail = finding_detail_json(f, applied);
    return o;
  };
  StoreUpdate up(path);
  res.schedule.name = input.name + " (fused)";
  const int64_t fused_id = insert_schedule(up.db(), res.schedule, parent_id, res.passes_json());
  std::vector<StoredOpportunity> ops;
  for (const auto& f : res.applied) ops.push_back(opportunity(parent_id, f, true));
  for (const auto& f : res.advice) ops.push_back(opportunity(fused_id, f, false));
  for (const auto& f : res.rejected) ops.push_back(opportunity(fused_id, f, false));
  // The prediction: the simulated step saving of all applied rewrites together (what `braid
  // ab` quotes).
  StoredOpportunity pred;
  pred.schedule_id = fused_id;
  pred.pass = "pipeline";
  for (const auto& r : res.schedule.ranks) pred.ranks.push_back(r.rank);
  pred.predicted_saving_ns = res.predicted_saving_ns();
  json::Writer w;
  w.begin_object()
      .field("simulated", true)
      .field("baseline_step_ns", res.baseline_step_ns)
      .field("fused_step_ns", res.fused_step_ns)
      .field("profile", profile)
      .field("local_saving_ns", res.local_saving_ns())
      .end_object();
  pred.detail = w.take();
  ops.push_back(std::move(pred));
  insert_opportunities(up.db(), ops);
  commit_unless_cancelled(up, cancel);
  return fused_id;
}

std::optional<StoredPrediction> stored_prediction(const std::string& path, int64_t fused_id) {
  for (const StoredOpportunity& op : list_opportunities(path, fused_id)) {
    if (op.pass != "pipeline") continue;
    StoredPrediction p;
    p.saving_ns = op.predicted_saving_ns;
    simdjson::dom::parser parser;
    simdjson::dom::element d;
    if (parser.parse(op.detail).get(d) == simdjson::SUCCESS) {
      std::string_view prof;
      if (d["profile"].get_string().get(prof) == simdjson::SUCCESS) p.profile = std::string(prof);
      int64_t v;
      if (d["baseline_step_ns"].get_int64().get(v) == simdjson::SUCCESS) p.baseline_step_ns = v;
      if (d["fused_step_ns"].get_int64().get(v) == simdjson::SUCCESS) p.fused_step_ns = v;
    }
    return p;
  }
  return std::nullopt;
}

std::vector<StoredSchedule> list_schedules(const std::string& path) {
  TraceReader r(path);
  std::vector<StoredSchedule> v;
  if (!r.has_table("schedules")) return v;
  sql::Stmt st(r.db(),
               "SELECT schedule_id, COALESCE(parent_id, -1), name, COALESCE(passes, '[]'), "
               "created_at FROM schedules ORDER BY schedule_id");
  while (st.step())
    v.push_back({st.i64(0), st.i64(1), st.text(2), st.text(3), st.text(4)});
  return v;
}

bool has_schedules(const TraceReader& reader) {
  return reader.has_table("schedules") &&
         sql::scalar(reader.db(), "SELECT COUNT(*) FROM schedules") > 0;
}

Schedule load_stored_schedule(const std::string& path, int64_t id, bool classes) {
  TraceReader r(path);
  if (!r.has_table("schedules"))
    throw Error(ErrorCode::NotFound,
                path + ": no schedule " + std::to_string(id) + " (the file holds no schedules)");
  sql::Stmt st(r.db(), "SELECT body FROM schedules WHERE schedule_id = ?");
  st.bind(1, id);
  if (!st.step()) {
    std::string ids;
    sql::Stmt all(r.db(), "SELECT schedule_id FROM schedules ORDER BY schedule_id");
    while (all.step()) ids += (ids.empty() ? "" : ", ") + std::to_string(all.i64(0));
    throw Error(ErrorCode::NotFound,
                path + ": no schedule " + std::to_string(id) +
                    (ids.empty() ? " (the file holds no schedules)" : " (it holds " + ids + ")"));
  }
  Schedule s = parse_schedule(st.text(0), path + ": schedule " + std::to_string(id));
  return classes ? s : expand(s);
}

std::vector<StoredOpportunity> list_opportunities(const std::string& path, int64_t schedule_id) {
  TraceReader r(path);
  std::vector<StoredOpportunity> v;
  if (!r.has_table("opportunities")) return v;
  sql::Stmt st(r.db(),
               "SELECT schedule_id, pass, COALESCE(ranks, '[]'), COALESCE(ops, '[]'), "
               "COALESCE(predicted_saving_ns, 0), COALESCE(detail, '{}') FROM opportunities "
               "WHERE ? < 0 OR schedule_id = ? ORDER BY predicted_saving_ns DESC, rowid");
  st.bind(1, schedule_id);
  st.bind(2, schedule_id);
  while (st.step())
    v.push_back({st.i64(0), st.text(1), parse_ints<int32_t>(st.text(2)),
                 parse_ints<int64_t>(st.text(3)), st.i64(4), st.text(5)});
  return v;
}

}  // namespace braid::fusion

#include "trace/schema.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "trace/error.h"
#include "trace/model.h"
#include "trace/sqlite_util.h"

namespace braid::schema {

// Times are int64 ns in the rank's own clock; ranks.clock_offset_ns maps them onto the job axis.
// Names are ids into `strings`. Enumerations with many rows (kernel category) are integer codes
// with a lookup table; rarer ones are readable text.
static const char* kTables = R"SQL(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE strings(id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE categories(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE runs(
  run_id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL CHECK (kind IN ('captured','imported','replayed','simulated')),
  schedule_id INTEGER,
  backend TEXT,
  source TEXT,
  label TEXT,
  created_at TEXT NOT NULL);
CREATE TABLE ranks(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, world_size INTEGER,
  host TEXT, pid INTEGER, device INTEGER, device_name TEXT, backend TEXT, nccl_version TEXT,
  source TEXT, clock_offset_ns INTEGER NOT NULL DEFAULT 0, offset_error_ns INTEGER,
  PRIMARY KEY (run_id, rank));
CREATE TABLE streams(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL,
  gpu INTEGER NOT NULL, label TEXT,
  PRIMARY KEY (run_id, rank, stream, gpu));
CREATE TABLE kernels(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, name_id INTEGER NOT NULL,
  category INTEGER NOT NULL, correlation INTEGER NOT NULL, external_id INTEGER NOT NULL);
CREATE TABLE memcpys(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, kind TEXT NOT NULL,
  bytes INTEGER NOT NULL, name_id INTEGER NOT NULL, correlation INTEGER NOT NULL);
CREATE TABLE api_calls(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, tid INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, name_id INTEGER NOT NULL,
  kind TEXT NOT NULL, correlation INTEGER NOT NULL, external_id INTEGER NOT NULL);
CREATE TABLE nvtx_ranges(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL,
  on_gpu INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  name_id INTEGER NOT NULL, domain_id INTEGER NOT NULL, payload_id INTEGER NOT NULL);
CREATE TABLE steps(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  PRIMARY KEY (run_id, rank, step));
CREATE TABLE collectives(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, comm_id INTEGER NOT NULL, seq INTEGER NOT NULL,
  op TEXT NOT NULL, dtype_id INTEGER NOT NULL, in_count INTEGER NOT NULL,
  out_count INTEGER NOT NULL, bytes INTEGER NOT NULL, peer_or_root INTEGER NOT NULL,
  stream INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  enqueue_ns INTEGER NOT NULL, algo_id INTEGER NOT NULL, proto_id INTEGER NOT NULL,
  channels INTEGER NOT NULL, group_size INTEGER NOT NULL, name_id INTEGER NOT NULL,
  kernel_ref INTEGER NOT NULL);
CREATE TABLE communicators(
  run_id INTEGER NOT NULL, comm TEXT NOT NULL, nranks INTEGER, ranks TEXT, label TEXT,
  backend TEXT, PRIMARY KEY (run_id, comm));
CREATE TABLE diagnostics(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, severity TEXT NOT NULL, code TEXT NOT NULL,
  count INTEGER NOT NULL, detail TEXT);
)SQL";

// Tables capture adds (docs/schema.md, "Tables added by braid record"). Times are host times in
// the rank's own clock, like every other table's.
static const char* kCaptureTables = R"SQL(
CREATE TABLE IF NOT EXISTS nccl_calls(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, comm_id INTEGER NOT NULL, seq INTEGER NOT NULL,
  call_id INTEGER NOT NULL, group_id INTEGER NOT NULL, op TEXT NOT NULL, redop_id INTEGER NOT NULL,
  sendbuff INTEGER NOT NULL, recvbuff INTEGER NOT NULL, count INTEGER NOT NULL,
  dtype_id INTEGER NOT NULL, peer_or_root INTEGER NOT NULL, stream_handle INTEGER NOT NULL,
  tid INTEGER NOT NULL, enqueue_ns INTEGER NOT NULL, return_ns INTEGER NOT NULL,
  result INTEGER NOT NULL, comm_rank INTEGER NOT NULL, comm_size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nccl_proxy_ops(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, comm_id INTEGER NOT NULL, seq INTEGER NOT NULL,
  call_id INTEGER NOT NULL, channel INTEGER NOT NULL, peer INTEGER NOT NULL,
  is_send INTEGER NOT NULL, steps INTEGER NOT NULL, chunk_size INTEGER NOT NULL,
  tid INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS capture_windows(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL, PRIMARY KEY (run_id, rank, start_ns));
CREATE INDEX IF NOT EXISTS nccl_calls_match ON nccl_calls(run_id, comm_id, seq);
)SQL";

// Tables `braid import --et` adds (docs/schema.md, "Execution trace tables"): the operators of a
// PyTorch execution trace joined to the trace's CPU ops, and their tensor arguments.
static const char* kEtTables = R"SQL(
CREATE TABLE IF NOT EXISTS et_ops(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, node INTEGER NOT NULL, parent INTEGER NOT NULL,
  name_id INTEGER NOT NULL, et_tid INTEGER NOT NULL, rf_id INTEGER NOT NULL, seq INTEGER NOT NULL,
  schema_id INTEGER NOT NULL, tid INTEGER NOT NULL, start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL, step INTEGER NOT NULL, joined_by TEXT NOT NULL, kind TEXT NOT NULL,
  PRIMARY KEY (run_id, rank, node));
CREATE TABLE IF NOT EXISTS et_tensors(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, node INTEGER NOT NULL, arg INTEGER NOT NULL,
  item INTEGER NOT NULL, output INTEGER NOT NULL, tensor_id INTEGER NOT NULL,
  storage_id INTEGER NOT NULL, offset INTEGER NOT NULL, numel INTEGER NOT NULL,
  itemsize INTEGER NOT NULL, dtype_id INTEGER NOT NULL, device_id INTEGER NOT NULL,
  shape_id INTEGER NOT NULL, strides_id INTEGER NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL,
  extent TEXT NOT NULL, PRIMARY KEY (run_id, rank, node, output, arg, item));
)SQL";

static const char* kIndexes = R"SQL(
CREATE INDEX IF NOT EXISTS kernels_window ON kernels(run_id, rank, stream, start_ns);
CREATE INDEX IF NOT EXISTS memcpys_window ON memcpys(run_id, rank, stream, start_ns);
CREATE INDEX IF NOT EXISTS api_calls_window ON api_calls(run_id, rank, tid, start_ns);
CREATE INDEX IF NOT EXISTS nvtx_window ON nvtx_ranges(run_id, rank, stream, start_ns);
CREATE INDEX IF NOT EXISTS collectives_window ON collectives(run_id, rank, stream, start_ns);
CREATE INDEX IF NOT EXISTS collectives_match ON collectives(run_id, comm_id, seq);
)SQL";

void create_tables(sqlite3* db) {
  sql::exec(db, kTables);
  sql::Stmt cat(db, "INSERT INTO categories(id, name) VALUES (?, ?)");
  for (int i = 0; i < 32; ++i) {
    auto name = to_string(static_cast<Category>(i));
    if (name == "unknown") continue;
    cat.bind(1, i);
    cat.bind(2, name);
    cat.run();
  }
  sql::Stmt meta(db, "INSERT INTO meta(key, value) VALUES (?, ?)");
  meta.bind(1, std::string_view("schema_version"));
  meta.bind(2, std::to_string(kMajor) + "." + std::to_string(kMinor));
  meta.run();
  meta.bind(1, std::string_view("format"));
  meta.bind(2, std::string_view("braid"));
  meta.run();
}

void create_indexes(sqlite3* db) { sql::exec(db, kIndexes); }

void create_capture_tables(sqlite3* db) { sql::exec(db, kCaptureTables); }

void create_et_tables(sqlite3* db) { sql::exec(db, kEtTables); }

namespace {
using Layout = std::map<std::string, std::vector<std::string>>;

// table -> its columns, in order.
Layout layout(sqlite3* db) {
  Layout out;
  sql::Stmt t(db, "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'");
  while (t.step()) out[t.text(0)];
  for (auto& [name, cols] : out) {
    sql::Stmt c(db, "SELECT name FROM pragma_table_info(?)");
    c.bind(1, name);
    while (c.step()) cols.push_back(c.text(0));
  }
  return out;
}

// The layout `ddl` creates, read back from an in-memory database: the reference is this build's
// own DDL, so nothing here can drift from it.
Layout layout_of(void (*ddl)(sqlite3*)) {
  sqlite3* ref = nullptr;
  if (sqlite3_open(":memory:", &ref) != SQLITE_OK) {
    sqlite3_close(ref);
    throw Error(ErrorCode::Store, "cannot open an in-memory database");
  }
  Layout out;
  try {
    ddl(ref);
    out = layout(ref);
  } catch (...) {
    sqlite3_close(ref);
    throw;
  }
  sqlite3_close(ref);
  return out;
}

// Tables of the families registered below, by owner (docs/architecture.md, "Table families").
constexpr std::string_view kAnalysisFamily[] = {
    "analysis_ranks",         "analysis_collectives",   "analysis_collective_members",
    "analysis_critical_path", "analysis_communicators", "analysis_clocks",
    "analysis_reports"};
constexpr std::string_view kScheduleFamily[] = {"schedules", "opportunities"};
constexpr OwnedFamily kOwned[] = {{"analysis/store.cc", kAnalysisFamily},
                                  {"fusion/schedule_store.cc", kScheduleFamily}};
}  // namespace

std::span<const OwnedFamily> owned_families() { return kOwned; }

const OwnedFamily* owner_of(std::string_view table) {
  for (const OwnedFamily& f : kOwned)
    for (std::string_view t : f.tables)
      if (t == table) return &f;
  return nullptr;
}

bool is_core_table(std::string_view table) {
  // Computed once; never destroyed, so a reader running at exit still finds it.
  static const Layout* core = new Layout(layout_of(&create_tables));
  return core->count(std::string(table)) > 0;
}

void check_known_layout(sqlite3* db, const std::string& path) {
  const Layout known = layout_of([](sqlite3* ref) {
    create_tables(ref);
    create_capture_tables(ref);
    create_et_tables(ref);
  });
  const std::string ours = std::to_string(kMajor) + "." + std::to_string(kMinor);
  for (auto& [name, cols] : layout(db)) {
    // An owned family's rows describe the file they were derived from; a tool that copies whole
    // files leaves them out by name and says so (TraceReader::derived_tables).
    if (owner_of(name)) continue;
    auto k = known.find(name);
    if (k == known.end())
      throw Error(
          ErrorCode::Unsupported,
          path + ": table '" + name + "' is not in the .braid schema this braid knows (" + ours +
              " with the capture and execution-trace tables); it was probably written by a newer "
              "braid, and copying the file would lose it; upgrade braid");
    for (const std::string& c : cols)
      if (std::find(k->second.begin(), k->second.end(), c) == k->second.end())
        throw Error(ErrorCode::Unsupported,
                    path + ": column '" + name + "." + c +
                        "' is not in the .braid schema this "
                        "braid knows (" +
                        ours +
                        " with the capture and execution-trace tables); it was probably written "
                        "by a newer braid, and copying the file would lose it; upgrade braid");
  }
}

Version check(sqlite3* db, const std::string& path) {
  // A file that is not SQLite fails on the first read, with "file is not a database".
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &s,
                              nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(db);
    sqlite3_finalize(s);
    if (msg.find("not a database") != std::string::npos)
      throw Error(ErrorCode::BadFormat, path + ": not a .braid file (not an SQLite database)");
    if (msg.find("no such table") != std::string::npos)
      throw Error(ErrorCode::BadFormat, path + ": not a .braid file (SQLite, but no meta table)");
    throw Error(ErrorCode::Store, path + ": " + msg);
  }
  rc = sqlite3_step(s);
  if (rc != SQLITE_ROW) {
    std::string msg = rc == SQLITE_DONE ? "no schema_version in meta" : sqlite3_errmsg(db);
    sqlite3_finalize(s);
    throw Error(ErrorCode::BadFormat, path + ": not a .braid file (" + msg + ")");
  }
  std::string v = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  Version ver;
  if (std::sscanf(v.c_str(), "%d.%d", &ver.major, &ver.minor) < 1)
    throw Error(ErrorCode::BadFormat, path + ": unreadable schema_version '" + v + "'");
  if (ver.major > kMajor)
    throw Error(ErrorCode::Unsupported,
                path + ": schema version " + v + " is newer than this braid reads (" +
                    std::to_string(kMajor) + "." + std::to_string(kMinor) +
                    "); upgrade braid to open it");
  return ver;
}

// One entry per past major version: the statements that bring version N to N+1. Version 1 is the
// first released schema, so the list is empty; the loop is what every later change plugs into.
static const char* const kMigrations[] = {nullptr};

void migrate(sqlite3* db, const std::string& path) {
  Version v = check(db, path);
  if (v.major > kMajor || (v.major == kMajor && v.minor >= kMinor)) return;
  sql::exec(db, "BEGIN IMMEDIATE");
  try {
    for (int m = v.major; m < kMajor; ++m) {
      if (m < 1 || !kMigrations[m - 1])
        throw Error(ErrorCode::Unsupported,
                    path + ": no migration from schema version " + std::to_string(m));
      sql::exec(db, kMigrations[m - 1]);
    }
    // Minor versions of the current major only add tables, each created with its first rows
    // (1.1's analysis results by their owner, 1.2's execution-trace tables by the importer):
    // nothing to create here.
    sql::Stmt up(db, "UPDATE meta SET value=? WHERE key='schema_version'");
    up.bind(1, std::to_string(kMajor) + "." + std::to_string(kMinor));
    up.run();
    sql::exec(db, "COMMIT");
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

}  // namespace braid::schema

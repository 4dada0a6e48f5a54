#include "trace/reader.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <utility>

#include "trace/error.h"
#include "trace/rank_rows.h"
#include "trace/rows.h"
#include "trace/schema.h"
#include "trace/sqlite_util.h"

namespace braid {
namespace {

using per_rank::rank_rows;
using per_rank::Rows;

constexpr Rows kKernels{
    "kernels", "rank, stream, start_ns, end_ns, name_id, category, correlation, external_id",
    "rank, stream, start_ns", "rank, stream, start_ns"};
constexpr Rows kMemcpys{"memcpys",
                        "rank, stream, start_ns, end_ns, kind, bytes, name_id, correlation",
                        "rank, stream, start_ns", "rank, stream, start_ns"};
constexpr Rows kApiCalls{"api_calls",
                         "rank, tid, start_ns, end_ns, name_id, kind, correlation, external_id",
                         "rank, tid, start_ns", "rank, tid, start_ns"};
// The CUDA runtime and driver calls among the API calls.
constexpr const char* kRuntime = "kind IN ('runtime', 'driver')";
constexpr Rows kRanges{"nvtx_ranges",
                       "rank, stream, on_gpu, start_ns, end_ns, name_id, domain_id, payload_id",
                       "rank, stream, start_ns", "rank, stream, start_ns"};

Kernel kernel_of(const sql::Stmt& s) {
  Kernel k;
  k.rank = static_cast<int32_t>(s.i64(0));
  k.stream = s.i64(1);
  k.start = s.i64(2);
  k.end = s.i64(3);
  k.name = static_cast<StrId>(s.i64(4));
  k.category = static_cast<Category>(s.i64(5));
  k.correlation = s.i64(6);
  k.external_id = s.i64(7);
  return k;
}

MemKind mem_kind_of(std::string_view t) {
  for (auto k : {MemKind::HtoD, MemKind::DtoH, MemKind::DtoD, MemKind::HtoH, MemKind::PtoP,
                 MemKind::Memset})
    if (to_string(k) == t) return k;
  return MemKind::Unknown;
}

Memcpy memcpy_of(const sql::Stmt& s) {
  Memcpy m;
  m.rank = static_cast<int32_t>(s.i64(0));
  m.stream = s.i64(1);
  m.start = s.i64(2);
  m.end = s.i64(3);
  m.kind = mem_kind_of(s.view(4));
  m.bytes = s.i64(5);
  m.name = static_cast<StrId>(s.i64(6));
  m.correlation = s.i64(7);
  return m;
}

ApiCall api_call_of(const sql::Stmt& s) {
  ApiCall a;
  a.rank = static_cast<int32_t>(s.i64(0));
  a.tid = s.i64(1);
  a.start = s.i64(2);
  a.end = s.i64(3);
  a.name = static_cast<StrId>(s.i64(4));
  const std::string_view k = s.view(5);
  a.kind = k == "cpu_op"    ? ApiKind::CpuOp
           : k == "runtime" ? ApiKind::Runtime
           : k == "driver"  ? ApiKind::Driver
           : k == "python"  ? ApiKind::Python
                            : ApiKind::Other;
  a.correlation = s.i64(6);
  a.external_id = s.i64(7);
  return a;
}

Range range_of(const sql::Stmt& s) {
  Range r;
  r.rank = static_cast<int32_t>(s.i64(0));
  r.stream = s.i64(1);
  r.on_gpu = s.i64(2) != 0;
  r.start = s.i64(3);
  r.end = s.i64(4);
  r.name = static_cast<StrId>(s.i64(5));
  r.domain = static_cast<StrId>(s.i64(6));
  r.payload = static_cast<StrId>(s.i64(7));
  return r;
}

// Each row of a query with one parameter, the run, converted by `conv`, until `fn` says stop.
template <typename T, typename Conv>
void each_row(sqlite3* db, const std::string& query, int64_t run, Conv conv,
              const std::function<bool(const T&)>& fn) {
  sql::Stmt s(db, query);
  s.bind(1, run);
  while (s.step())
    if (!fn(conv(s))) return;
}

// A whole run's rows of `t`, in its order.
template <typename T, typename Conv>
void each_row(sqlite3* db, const Rows& t, int64_t run, Conv conv,
              const std::function<bool(const T&)>& fn) {
  each_row(
      db,
      std::string("SELECT ") + t.cols + " FROM " + t.table + " WHERE run_id=? ORDER BY " + t.order,
      run, conv, fn);
}

int64_t stream_of(const auto& x) { return x.stream; }
int64_t thread_of(const ApiCall& a) { return a.tid; }

// The events of one stream of a rank that overlap [t0, t1): start < t1 and end > t0. The index is
// on start, so the scan starts at `earliest` (t0 - the table's longest event): nothing that starts
// earlier can reach t0.
struct Window {
  int64_t run;
  int32_t rank;
  int64_t stream;
  Ns earliest, t0, t1;
};
template <typename T, typename Conv>
void window_rows(sqlite3* db, const Rows& t, const Window& w, Conv conv,
                 const std::function<bool(const T&)>& fn) {
  sql::Stmt s(db, std::string("SELECT ") + t.cols + " FROM " + t.table +
                      " WHERE run_id=? AND rank=? AND stream=? AND start_ns>=? AND start_ns<?"
                      " AND end_ns>? ORDER BY start_ns");
  s.bind(1, w.run);
  s.bind(2, w.rank);
  s.bind(3, w.stream);
  s.bind(4, w.earliest);
  s.bind(5, w.t1);
  s.bind(6, w.t0);
  while (s.step())
    if (!fn(conv(s))) break;
}

}  // namespace

const char* const kCollectiveColumns =
    "rank, comm_id, seq, op, dtype_id, in_count, out_count, bytes, peer_or_root, stream,"
    " start_ns, end_ns, enqueue_ns, algo_id, proto_id, channels, group_size, name_id, kernel_ref";

Collective collective_from_row(const sql::Stmt& s) {
  Collective c;
  c.rank = static_cast<int32_t>(s.i64(0));
  c.comm = static_cast<StrId>(s.i64(1));
  c.seq = s.i64(2);
  c.op = coll_op_from_string(s.view(3)).value_or(CollOp::Unknown);
  c.dtype = static_cast<StrId>(s.i64(4));
  c.in_count = s.i64(5);
  c.out_count = s.i64(6);
  c.bytes = s.i64(7);
  c.peer_or_root = static_cast<int32_t>(s.i64(8));
  c.stream = s.i64(9);
  c.start = s.i64(10);
  c.end = s.i64(11);
  c.enqueue = s.i64(12);
  c.algo = static_cast<StrId>(s.i64(13));
  c.proto = static_cast<StrId>(s.i64(14));
  c.channels = static_cast<int32_t>(s.i64(15));
  c.group_size = static_cast<int32_t>(s.i64(16));
  c.name = static_cast<StrId>(s.i64(17));
  c.kernel_ref = s.i64(18);
  return c;
}

TraceReader::TraceReader(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(ErrorCode::NotFound, path + ": no such file");
  if (std::filesystem::is_directory(path, ec))
    throw Error(ErrorCode::BadFormat, path + ": is a directory, not a .braid file");
  // A reader is used by one thread at a time (its caches are not locked either; a thread that
  // reads in parallel opens its own): no SQLite mutex on each call, which took 8% of the GUI's
  // load of a large run.
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(ErrorCode::Io, path + ": cannot open: " + msg);
  }
  // Readers opening the same WAL file at once (e.g. two runs loading in parallel) briefly
  // contend for its shared-memory index; wait instead of failing with "database is locked".
  sqlite3_busy_timeout(db_, 5000);
  try {
    auto v = schema::check(db_, path);
    if (v.major < schema::kMajor)
      throw Error(ErrorCode::Unsupported,
                  path + ": schema version " + std::to_string(v.major) +
                      " is older than this braid's; run `braid import --append` on it to migrate");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

TraceReader::~TraceReader() {
  if (db_) sqlite3_close(db_);
}

std::vector<RunRow> TraceReader::runs() const {
  std::vector<RunRow> out;
  sql::Stmt s(db_, "SELECT run_id, kind, schedule_id, backend, source, label, created_at"
                   " FROM runs ORDER BY run_id");
  while (s.step()) {
    RunRow r;
    r.run_id = s.i64(0);
    r.kind = run_kind_from_string(s.text(1)).value_or(RunKind::Imported);
    r.schedule_id = s.is_null(2) ? -1 : s.i64(2);
    r.backend = s.text(3);
    r.source = s.text(4);
    r.label = s.text(5);
    r.created_at = s.text(6);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<RankInfo> TraceReader::ranks(int64_t run) const {
  std::vector<RankInfo> out;
  sql::Stmt s(db_, "SELECT rank, world_size, host, pid, device, device_name, backend,"
                   " nccl_version, source, clock_offset_ns, offset_error_ns FROM ranks"
                   " WHERE run_id=? ORDER BY rank");
  s.bind(1, run);
  while (s.step()) {
    RankInfo r;
    r.rank = static_cast<int32_t>(s.i64(0));
    r.world_size = s.is_null(1) ? -1 : static_cast<int32_t>(s.i64(1));
    r.host = s.text(2);
    r.pid = s.is_null(3) ? -1 : s.i64(3);
    r.device = s.is_null(4) ? -1 : static_cast<int32_t>(s.i64(4));
    r.device_name = s.text(5);
    r.backend = s.text(6);
    r.nccl_version = s.text(7);
    r.source = s.text(8);
    r.clock_offset = s.i64(9);
    r.offset_error = s.is_null(10) ? -1 : s.i64(10);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<StreamInfo> TraceReader::streams(int64_t run) const {
  std::vector<StreamInfo> out;
  sql::Stmt s(db_, "SELECT rank, stream, gpu, label FROM streams WHERE run_id=?"
                   " ORDER BY rank, gpu DESC, stream");
  s.bind(1, run);
  while (s.step())
    out.push_back({static_cast<int32_t>(s.i64(0)), s.i64(1), s.i64(2) != 0, s.text(3)});
  return out;
}

std::vector<Communicator> TraceReader::communicators(int64_t run) const {
  std::vector<Communicator> out;
  sql::Stmt s(db_, "SELECT comm, nranks, ranks, label, backend FROM communicators"
                   " WHERE run_id=? ORDER BY comm");
  s.bind(1, run);
  while (s.step())
    out.push_back({s.text(0), s.is_null(1) ? -1 : static_cast<int32_t>(s.i64(1)), s.text(2),
                   s.text(3), s.text(4)});
  return out;
}

std::vector<Diagnostic> TraceReader::diagnostics(int64_t run) const {
  std::vector<Diagnostic> out;
  sql::Stmt s(db_, "SELECT rank, severity, code, count, detail FROM diagnostics WHERE run_id=?"
                   " ORDER BY severity DESC, code, rank");
  s.bind(1, run);
  while (s.step()) {
    Diagnostic d;
    d.rank = static_cast<int32_t>(s.i64(0));
    std::string sev = s.text(1);
    d.severity = sev == "error" ? Severity::Error
                 : sev == "warning" ? Severity::Warning
                                    : Severity::Info;
    d.code = s.text(2);
    d.count = s.i64(3);
    d.detail = s.text(4);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Step> TraceReader::steps(int64_t run) const {
  std::vector<Step> out;
  sql::Stmt s(db_, "SELECT rank, step, start_ns, end_ns FROM steps WHERE run_id=?"
                   " ORDER BY rank, step");
  s.bind(1, run);
  while (s.step()) out.push_back({static_cast<int32_t>(s.i64(0)), s.i64(1), s.i64(2), s.i64(3)});
  return out;
}

std::string TraceReader::meta(const std::string& key) const {
  sql::Stmt s(db_, "SELECT value FROM meta WHERE key=?");
  s.bind(1, key);
  return s.step() ? s.text(0) : std::string();
}

std::vector<std::pair<std::string, std::string>> TraceReader::meta_rows() const {
  std::vector<std::pair<std::string, std::string>> out;
  sql::Stmt s(db_, "SELECT key, value FROM meta ORDER BY key");
  while (s.step()) out.emplace_back(s.text(0), s.text(1));
  return out;
}

std::vector<std::string> TraceReader::strings() const {
  if (strings_loaded_) return strings_;
  std::vector<std::string> out;
  sql::Stmt s(db_, "SELECT id, text FROM strings");
  while (s.step()) {
    const int64_t id = s.i64(0);
    if (id < 0 || id > static_cast<int64_t>(UINT32_MAX))  // a StrId; a larger one is corrupt
      throw Error(ErrorCode::BadFormat,
                  path_ + ": a name has id " + std::to_string(id) + ", past the 32-bit name ids");
    auto i = static_cast<size_t>(id);
    if (i >= out.size()) out.resize(i + 1);
    out[i] = s.text(1);
  }
  return out;
}

const std::string& TraceReader::str(StrId id) const {
  if (!strings_loaded_) {
    strings_ = strings();
    strings_loaded_ = true;
  }
  static const std::string kEmpty;
  return id < strings_.size() ? strings_[id] : kEmpty;
}

TraceReader::Counts TraceReader::counts(int64_t run) const {
  if (auto it = counts_.find(run); it != counts_.end()) return it->second;
  auto count = [&](const char* sql) {
    sql::Stmt q(db_, sql);
    q.bind(1, run);
    return q.step() ? q.i64(0) : 0;
  };
  Counts c;
  c.gpu_streams = count("SELECT COUNT(*) FROM streams WHERE run_id=? AND gpu=1");
  c.cpu_threads = count("SELECT COUNT(*) FROM streams WHERE run_id=? AND gpu=0");
  c.kernels = count("SELECT COUNT(*) FROM kernels WHERE run_id=?");
  c.memcpys = count("SELECT COUNT(*) FROM memcpys WHERE run_id=? AND kind<>'memset'");
  c.memsets = count("SELECT COUNT(*) FROM memcpys WHERE run_id=? AND kind='memset'");
  c.api_calls = count("SELECT COUNT(*) FROM api_calls WHERE run_id=?");
  c.ranges = count("SELECT COUNT(*) FROM nvtx_ranges WHERE run_id=?");
  c.steps = count("SELECT COUNT(*) FROM steps WHERE run_id=?");
  c.collectives = count("SELECT COUNT(*) FROM collectives WHERE run_id=?");
  c.communicators = count("SELECT COUNT(*) FROM communicators WHERE run_id=?");
  counts_.emplace(run, c);
  return c;
}

std::vector<std::pair<StrId, std::string>> TraceReader::api_call_names(int64_t run) const {
  std::vector<std::pair<StrId, std::string>> out;
  sql::Stmt s(db_,
              "SELECT DISTINCT a.name_id, s.text FROM api_calls a JOIN strings s ON s.id ="
              " a.name_id WHERE a.run_id=?");
  s.bind(1, run);
  while (s.step()) out.emplace_back(static_cast<StrId>(s.i64(0)), s.text(1));
  return out;
}

std::map<std::string, int64_t> TraceReader::stream_collectives_by_op(int64_t run) const {
  std::map<std::string, int64_t> out;
  sql::Stmt s(db_, "SELECT op, COUNT(*) FROM collectives WHERE run_id=? AND stream>=0 GROUP BY op");
  s.bind(1, run);
  while (s.step()) out[s.text(0)] = s.i64(1);
  return out;
}

Ns TraceReader::max_duration(const char* table, int64_t run) const {
  std::string key = std::string(table) + "#" + std::to_string(run);
  auto it = max_dur_.find(key);
  if (it != max_dur_.end()) return it->second;
  sql::Stmt s(db_, std::string("SELECT COALESCE(MAX(end_ns - start_ns), 0) FROM ") + table +
                       " WHERE run_id=?");
  s.bind(1, run);
  Ns d = s.step() ? s.i64(0) : 0;
  max_dur_[key] = d;
  return d;
}

void TraceReader::kernels(int64_t run, const Fn<Kernel>& fn) const {
  each_row(db_, kKernels, run, kernel_of, fn);
}

void TraceReader::kernels(int64_t run, int32_t rank, int64_t stream, Ns t0, Ns t1,
                          const Fn<Kernel>& fn) const {
  window_rows(db_, kKernels, {run, rank, stream, t0 - max_duration(kKernels.table, run), t0, t1},
              kernel_of, fn);
}

void TraceReader::memcpys(int64_t run, const Fn<Memcpy>& fn) const {
  each_row(db_, kMemcpys, run, memcpy_of, fn);
}

void TraceReader::memcpys(int64_t run, int32_t rank, int64_t stream, Ns t0, Ns t1,
                          const Fn<Memcpy>& fn) const {
  window_rows(db_, kMemcpys, {run, rank, stream, t0 - max_duration(kMemcpys.table, run), t0, t1},
              memcpy_of, fn);
}

void TraceReader::kernels_from(int64_t run, int32_t rank, int64_t stream, Ns t0,
                               const Fn<Kernel>& fn) const {
  window_rows(db_, kKernels, {run, rank, stream, t0, INT64_MIN, INT64_MAX}, kernel_of, fn);
}

void TraceReader::memcpys_from(int64_t run, int32_t rank, int64_t stream, Ns t0,
                               const Fn<Memcpy>& fn) const {
  window_rows(db_, kMemcpys, {run, rank, stream, t0, INT64_MIN, INT64_MAX}, memcpy_of, fn);
}

void TraceReader::api_calls(int64_t run, const Fn<ApiCall>& fn) const {
  each_row(db_, kApiCalls, run, api_call_of, fn);
}

std::vector<Kernel> TraceReader::kernels(int64_t run, int32_t rank) const {
  return rank_rows<Kernel>(db_, kKernels, run, rank, kernel_of, stream_of<Kernel>,
                           table_order_rows_);
}

std::vector<Memcpy> TraceReader::memcpys(int64_t run, int32_t rank) const {
  return rank_rows<Memcpy>(db_, kMemcpys, run, rank, memcpy_of, stream_of<Memcpy>,
                           table_order_rows_);
}

std::vector<ApiCall> TraceReader::api_calls(int64_t run, int32_t rank) const {
  return rank_rows<ApiCall>(db_, kApiCalls, run, rank, api_call_of, thread_of, table_order_rows_);
}

std::vector<Range> TraceReader::ranges(int64_t run, int32_t rank) const {
  return rank_rows<Range>(db_, kRanges, run, rank, range_of, stream_of<Range>, table_order_rows_);
}

void TraceReader::runtime_calls(int64_t run, const Fn<ApiCall>& fn) const {
  each_row(db_,
           std::string("SELECT ") + kApiCalls.cols + " FROM api_calls WHERE run_id=? AND " +
               kRuntime + " ORDER BY " + kApiCalls.order,
           run, api_call_of, fn);
}

std::vector<ApiCall> TraceReader::runtime_calls(int64_t run, int32_t rank) const {
  return rank_rows<ApiCall>(db_, kApiCalls, run, rank, api_call_of, thread_of, table_order_rows_,
                            kRuntime);
}

void TraceReader::runtime_calls(int64_t run, int32_t rank, int64_t tid, Ns t0, Ns t1,
                                const Fn<ApiCall>& fn) const {
  sql::Stmt s(db_, std::string("SELECT ") + kApiCalls.cols +
                       " FROM api_calls WHERE run_id=? AND rank=? AND tid=? AND start_ns>=?"
                       " AND start_ns<? AND " +
                       kRuntime + " ORDER BY start_ns");
  s.bind(1, run);
  s.bind(2, rank);
  s.bind(3, tid);
  s.bind(4, t0);
  s.bind(5, t1);
  while (s.step())
    if (!fn(api_call_of(s))) break;
}

void TraceReader::ranges(int64_t run, const Fn<Range>& fn) const {
  each_row(db_, kRanges, run, range_of, fn);
}

namespace {
// By start; of equal starts, by stream, then in storage order. A rank's are read in its index's
// order (stream, start) and sorted here: ORDER BY start in SQL sorts them in a temporary B-tree,
// three times the read.
const Rows kCollectives{"collectives", kCollectiveColumns, "rank, start_ns, stream, rowid",
                        "rank, stream, start_ns"};
}  // namespace

std::vector<Collective> TraceReader::collectives(int64_t run, int32_t rank) const {
  std::vector<Collective> out = rank_rows<Collective>(
      db_, kCollectives, run, rank, collective_from_row, stream_of<Collective>, table_order_rows_);
  std::stable_sort(out.begin(), out.end(),
                   [](const Collective& a, const Collective& b) { return a.start < b.start; });
  return out;
}

std::vector<int32_t> TraceReader::collective_ranks(int64_t run) const {
  // SELECT DISTINCT would read every entry of the run in the index; this skips from one rank to
  // the next.
  std::vector<int32_t> out;
  sql::Stmt s(db_, "SELECT rank FROM collectives WHERE run_id=? AND rank>? ORDER BY rank LIMIT 1");
  for (int64_t after = INT64_MIN;;) {
    s.reset();
    s.bind(1, run);
    s.bind(2, after);
    if (!s.step()) return out;
    after = s.i64(0);
    out.push_back(static_cast<int32_t>(after));
  }
}

void TraceReader::collectives(int64_t run, const Fn<Collective>& fn) const {
  each_row(db_, kCollectives, run, collective_from_row, fn);
}

void TraceReader::collectives(int64_t run, int32_t rank, int64_t stream, Ns t0, Ns t1,
                              const Fn<Collective>& fn) const {
  window_rows(db_, kCollectives,
              {run, rank, stream, t0 - max_duration(kCollectives.table, run), t0, t1},
              collective_from_row, fn);
}

bool TraceReader::has_table(const std::string& name) const {
  sql::Stmt s(db_, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?");
  s.bind(1, name);
  return s.step();
}

std::vector<std::pair<std::string, int64_t>> TraceReader::derived_tables() const {
  std::vector<std::string> names;
  sql::Stmt t(db_, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name");
  while (t.step())
    if (schema::owner_of(t.text(0))) names.push_back(t.text(0));
  std::vector<std::pair<std::string, int64_t>> out;
  for (const std::string& name : names)
    out.emplace_back(name, sql::scalar(db_, "SELECT COUNT(*) FROM \"" + name + "\""));
  return out;
}

namespace {

std::string quoted_name(const std::string& id) {
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

}  // namespace

std::vector<TraceReader::TableText> TraceReader::extra_tables(int64_t run, size_t max_rows) const {
  std::vector<TableText> out;
  std::vector<std::string> names;
  {
    sql::Stmt s(db_, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name");
    while (s.step()) names.push_back(s.text(0));
  }
  for (const std::string& name : names) {
    if (schema::is_core_table(name) || name.starts_with("sqlite_")) continue;
    std::vector<std::string> cols;
    bool has_run = false;
    {
      sql::Stmt s(db_, "SELECT name FROM pragma_table_info(?)");
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
    TableText t;
    t.name = name;
    t.columns = cols;
    std::string q = "SELECT ";
    for (size_t i = 0; i < cols.size(); ++i) q += (i ? ", " : "") + quoted_name(cols[i]);
    q += " FROM " + quoted_name(name) + " WHERE run_id=? LIMIT " + std::to_string(max_rows + 1);
    sql::Stmt s(db_, q);
    s.bind(1, run);
    while (s.step()) {
      if (t.rows.size() == max_rows) {
        t.truncated = true;
        break;
      }
      std::vector<std::string> row;
      for (size_t i = 0; i < cols.size(); ++i) row.push_back(cell(s.get(), static_cast<int>(i)));
      t.rows.push_back(std::move(row));
    }
    out.push_back(std::move(t));
  }
  return out;
}

void TraceReader::nccl_calls(int64_t run, const Fn<NcclCallRow>& fn) const {
  if (!has_table("nccl_calls")) return;
  each_row(
      db_,
      "SELECT run_id, rank, comm_id, seq, call_id, group_id, op, redop_id, sendbuff,"
      " recvbuff, count, dtype_id, peer_or_root, stream_handle, tid, enqueue_ns,"
      " return_ns, result, comm_rank, comm_size FROM nccl_calls WHERE run_id=? ORDER BY rank, "
      "call_id, seq",
      run, [](const sql::Stmt& s) { return rows::read_nccl_call(s); }, fn);
}

void TraceReader::et_ops(int64_t run, const Fn<EtOp>& fn) const {
  if (!has_table("et_ops")) return;
  each_row(
      db_,
      "SELECT run_id, rank, node, parent, name_id, et_tid, rf_id, seq, schema_id, tid,"
      " start_ns, end_ns, step, joined_by, kind FROM et_ops WHERE run_id=? ORDER BY rank, node",
      run, [](const sql::Stmt& s) { return rows::read_et_op(s); }, fn);
}

void TraceReader::et_tensors(int64_t run, const Fn<EtTensor>& fn) const {
  if (!has_table("et_tensors")) return;
  each_row(
      db_,
      "SELECT run_id, rank, node, arg, item, output, tensor_id, storage_id, offset, numel,"
      " itemsize, dtype_id, device_id, shape_id, strides_id, lo, hi, extent FROM et_tensors"
      " WHERE run_id=? ORDER BY rank, node, output, arg, item",
      run, [](const sql::Stmt& s) { return rows::read_et_tensor(s); }, fn);
}

std::vector<CaptureWindow> TraceReader::capture_windows(int64_t run) const {
  std::vector<CaptureWindow> out;
  if (!has_table("capture_windows")) return out;
  sql::Stmt s(db_,
              "SELECT rank, start_ns, end_ns FROM capture_windows WHERE run_id=?"
              " ORDER BY rank, start_ns");
  s.bind(1, run);
  while (s.step()) out.push_back({static_cast<int32_t>(s.i64(0)), s.i64(1), s.i64(2)});
  return out;
}

void TraceReader::proxy_ops(int64_t run, const Fn<ProxyOpRow>& fn) const {
  if (!has_table("nccl_proxy_ops")) return;
  each_row(
      db_,
      "SELECT run_id, rank, comm_id, seq, call_id, channel, peer, is_send, steps,"
      " chunk_size, tid, start_ns, end_ns FROM nccl_proxy_ops WHERE run_id=? ORDER BY rank, "
      "start_ns",
      run, [](const sql::Stmt& s) { return rows::read_proxy_op(s); }, fn);
}

}  // namespace braid

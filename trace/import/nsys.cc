// Importer for Nsight Systems SQLite exports (`nsys export --type sqlite`).
//
// The export's schema changes between nsys versions and its tables are created lazily, so every
// table and column is looked up first (sqlite_master, PRAGMA table_info) and whatever is absent
// is skipped and counted in diagnostics. docs/import-nsys.md lists what is read from where.
//
// Order of work: NCCL's own NVTX ranges and the rank information are read first (they decide the
// rank of every row), then kernels, memcpys/memsets, runtime calls (which link NCCL kernels to
// their launch), all NVTX ranges, and last the collectives built from NCCL kernels.
#include <simdjson.h>
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "trace/categories.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/import/importer.h"
#include "trace/sqlite_util.h"
#include "trace/time_range.h"

namespace braid {
namespace {

// nsys serializes ids as (upper ids << 48) | (pid << 24) | tid.
constexpr int64_t kIdBits = 0x1000000;
int64_t pid_key_of(int64_t global_id) { return global_id / kIdBits; }
int64_t os_pid(int64_t pid_key) { return pid_key % kIdBits; }
int64_t os_tid(int64_t global_tid) { return global_tid % kIdBits; }

constexpr const char* kKernel = "CUPTI_ACTIVITY_KIND_KERNEL";
constexpr const char* kMemcpy = "CUPTI_ACTIVITY_KIND_MEMCPY";
constexpr const char* kMemset = "CUPTI_ACTIVITY_KIND_MEMSET";
constexpr const char* kRuntime = "CUPTI_ACTIVITY_KIND_RUNTIME";
constexpr const char* kNvtx = "NVTX_EVENTS";
constexpr const char* kStrings = "StringIds";

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Tables and their columns, as this export has them.
class Schema {
 public:
  explicit Schema(sqlite3* db) : db_(db) {
    sql::Stmt s(db, "SELECT name FROM sqlite_master WHERE type IN ('table','view')");
    while (s.step()) tables_.insert(s.text(0));
  }
  bool has(const std::string& t) const { return tables_.count(t) != 0; }
  bool col(const std::string& t, const std::string& c) {
    if (!has(t)) return false;
    auto it = cols_.find(t);
    if (it == cols_.end()) {
      std::unordered_set<std::string> cs;
      sql::Stmt s(db_, "SELECT name FROM pragma_table_info(?1)");
      s.bind(1, t);
      while (s.step()) cs.insert(s.text(0));
      it = cols_.emplace(t, std::move(cs)).first;
    }
    return it->second.count(c) != 0;
  }
  // "t.c" when the column exists, else "NULL": lets one query serve every schema version.
  std::string expr(const std::string& t, const std::string& alias, const std::string& c) {
    return col(t, c) ? alias + ".\"" + c + "\"" : std::string("NULL");
  }
  const std::set<std::string>& tables() const { return tables_; }

 private:
  sqlite3* db_;
  std::set<std::string> tables_;
  std::unordered_map<std::string, std::unordered_set<std::string>> cols_;
};

// What an NCCL NVTX payload says (NCCL's schema entry names, see nvtx_payload_schemas.h).
struct NcclPayload {
  std::string comm;  // communicator id as hex, "" if absent
  int64_t bytes = -1, count = -1;
  int32_t nranks = -1, rank = -1, peer = -1, root = -1;
  std::string dtype;
};

std::optional<int64_t> parse_int(std::string_view s) {
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    std::string str(s);
    long long v = (str.size() > 2 && str[0] == '0' && (str[1] == 'x' || str[1] == 'X'))
                      ? static_cast<long long>(std::stoull(str, &used, 16))
                      : std::stoll(str, &used, 10);
    if (used != str.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// Flattens nested objects: nsys may wrap the payload entries in an object per schema.
void collect_fields(simdjson::dom::element e,
                    std::vector<std::pair<std::string, simdjson::dom::element>>& out, int depth) {
  simdjson::dom::object obj;
  if (depth > 4 || e.get_object().get(obj)) return;
  for (auto [key, value] : obj) {
    if (value.is_object())
      collect_fields(value, out, depth + 1);
    else
      out.emplace_back(lower(key), value);
  }
}

std::optional<NcclPayload> parse_nccl_payload(const std::string& json) {
  if (json.empty()) return std::nullopt;
  static thread_local simdjson::dom::parser parser;
  auto doc = parser.parse(json);
  if (doc.error()) return std::nullopt;
  std::vector<std::pair<std::string, simdjson::dom::element>> fields;
  collect_fields(doc.value_unsafe(), fields, 0);
  NcclPayload p;
  for (auto& [key, v] : fields) {
    std::optional<int64_t> num;
    std::string text;
    if (v.is_int64())
      num = v.get_int64().value_unsafe();
    else if (v.is_uint64())
      num = static_cast<int64_t>(v.get_uint64().value_unsafe());
    else if (v.is_double())
      num = round_to_int64(v.get_double().value_unsafe());
    else if (v.is_string()) {
      text = std::string(v.get_string().value_unsafe());
      num = parse_int(text);
    }
    if (key == "nccl communicator id") {
      if (num)
        p.comm = hex(static_cast<uint64_t>(*num));
      else if (!text.empty())
        p.comm = text;
    } else if (!num) {
      if (key == "data type" || key == "datatype") p.dtype = normalize_dtype(text);
    } else if (key == "message size [bytes]" || key == "bytes") {
      p.bytes = *num;
    } else if (key == "no. of ranks") {
      p.nranks = static_cast<int32_t>(*num);
    } else if (key == "rank") {
      p.rank = static_cast<int32_t>(*num);
    } else if (key == "peer rank" || key == "peer") {
      p.peer = static_cast<int32_t>(*num);
    } else if (key == "root") {
      p.root = static_cast<int32_t>(*num);
    } else if (key == "count" || key == "no. of elements") {
      p.count = *num;
    }
  }
  return p;
}

// One range of NCCL's NVTX domain on one thread.
struct NcclRange {
  Ns start = 0, end = 0;
  int64_t global_tid = 0;
  std::string name;
  CollOp op = CollOp::Unknown;
  bool group_start = false, group_end = false, comm_init = false;
  NcclPayload payload;
};

void classify_nccl_range(NcclRange& r) {
  std::string l = lower(r.name);
  std::string rest = l.rfind("nccl", 0) == 0 ? l.substr(4) : l;
  r.group_start = rest == "groupstart";
  r.group_end = rest == "groupend";
  r.comm_init = rest.rfind("comminit", 0) == 0 || rest == "commsplit";
  if (r.group_start || r.group_end || r.comm_init) return;
  r.op = rest == "bcast" ? CollOp::Broadcast : coll_op_from_framework_name(rest);
}

struct PendingNccl {
  Kernel kernel;
  NcclKernelName parsed;
  int64_t pid_key = -1;
  Ns launch_start = -1;
  int64_t launch_tid = 0;  // global tid of the launching runtime call
};

struct Resolution {
  CollOp op = CollOp::Unknown;
  std::string comm;
  int64_t msg_bytes = -1;  // as the payload says (per op semantics, see bytes_for)
  int64_t count = -1;
  int32_t peer_or_root = -1;
  int32_t group_size = -1;
  std::string dtype;
  bool from_nvtx = false;
};

MemKind mem_kind_from_copy_kind(int64_t k) {
  // CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 3 HtoA, 4 AtoH, 5 AtoA, 6 AtoD, 7 DtoA, 8 DtoD,
  // 9 HtoH, 10 PtoP. Arrays live on the device.
  switch (k) {
    case 1:
    case 3:
      return MemKind::HtoD;
    case 2:
    case 4:
      return MemKind::DtoH;
    case 5:
    case 6:
    case 7:
    case 8:
      return MemKind::DtoD;
    case 9:
      return MemKind::HtoH;
    case 10:
      return MemKind::PtoP;
    default:
      return MemKind::Unknown;
  }
}

class NsysImporter {
 public:
  NsysImporter(ImportContext& ctx, std::string file, size_t index)
      : ctx_(ctx), w_(ctx.writer), run_(ctx.run), file_(std::move(file)), index_(index) {}
  ~NsysImporter() {
    if (db_) sqlite3_close(db_);
  }

  void run() {
    open();
    Schema schema(db_);
    schema_ = &schema;
    check_is_nsys();
    note_missing_tables();
    read_event_types();
    read_nccl_ranges();
    assign_ranks();
    read_device_names();
    read_kernels();
    read_memory(kMemcpy);
    read_memory(kMemset);
    read_runtime();
    read_nvtx();
    build_collectives();
    write_small_tables();
    if (ctx_.options.progress) ctx_.options.progress(file_size_, file_size_);
  }

 private:
  [[noreturn]] void bad(const std::string& why) {
    throw Error(ErrorCode::BadFormat, file_ + ": not an Nsight Systems export (" + why + ")");
  }

  // True (and counted) when a row's start/end cannot be a time (trace/time_range.h): the row is
  // skipped, so no arithmetic on it can overflow.
  bool bad_span(Ns start, Ns end) {
    if (valid_span(start, end)) return false;
    if (bad_time_++ == 0)
      bad_time_example_ = "start " + std::to_string(start) + ", end " + std::to_string(end);
    return true;
  }

  void open() {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file_, ec))
      throw Error(ErrorCode::NotFound, file_ + ": no such file");
    file_size_ = std::filesystem::file_size(file_, ec);
    ctx_.stats.bytes += file_size_;
    char head[16] = {};
    std::ifstream in(file_, std::ios::binary);
    if (!in) throw Error(ErrorCode::NotFound, file_ + ": cannot open");
    in.read(head, sizeof head);
    if (in.gcount() < 16 || std::memcmp(head, "SQLite format 3", 16) != 0)
      bad("not an SQLite database");
    if (sqlite3_open_v2(file_.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
      bad(std::string("cannot open as SQLite: ") + (db_ ? sqlite3_errmsg(db_) : "out of memory"));
  }

  void check_is_nsys() {
    static const char* kMarkers[] = {kKernel,
                                     kMemcpy,
                                     kMemset,
                                     kRuntime,
                                     kNvtx,
                                     "META_DATA_EXPORT",
                                     "TARGET_INFO_GPU",
                                     "TARGET_INFO_CUDA_STREAM",
                                     "ENUM_NSYS_EVENT_TYPE"};
    for (const char* t : kMarkers)
      if (schema_->has(t)) return;
    bad("none of its tables, e.g. CUPTI_ACTIVITY_KIND_KERNEL, NVTX_EVENTS, TARGET_INFO_GPU");
  }

  void note_missing_tables() {
    // nsys creates tables lazily: a trace without memsets has no memset table.
    static const char* kWanted[] = {
        kStrings, kKernel, kMemcpy,           kMemset,
        kRuntime, kNvtx,   "TARGET_INFO_GPU", "TARGET_INFO_CUDA_STREAM"};
    std::string missing;
    int64_t n = 0;
    for (const char* t : kWanted)
      if (!schema_->has(t)) {
        missing += (missing.empty() ? "" : ", ") + std::string(t);
        ++n;
      }
    bool core = !schema_->has(kKernel) || !schema_->has(kStrings);
    ctx_.diagnose(diag::Code::nsys_missing_table, n, file_ + ": absent, not imported: " + missing,
                  -1, core ? Severity::Warning : Severity::Info);
  }

  void missing_column(const std::string& what) {
    missing_cols_ += (missing_cols_.empty() ? "" : "; ") + what;
    ++missing_col_count_;
  }

  // Resolves a StringIds id to a writer id, once per id.
  StrId string_id(int64_t nsys_id, const sql::Stmt& s, int col) {
    auto it = str_cache_.find(nsys_id);
    if (it != str_cache_.end()) return it->second;
    StrId id = 0;
    if (!s.is_null(col))
      id = w_.intern(s.text(col));
    else
      ++unknown_strings_;
    str_cache_.emplace(nsys_id, id);
    return id;
  }
  std::string join_strings(const std::string& alias, const std::string& id_expr) {
    if (!schema_->has(kStrings) || id_expr == "NULL") return "";
    return " LEFT JOIN StringIds " + alias + " ON " + alias + ".id = " + id_expr;
  }
  std::string string_value(const std::string& alias, const std::string& id_expr) {
    return (!schema_->has(kStrings) || id_expr == "NULL") ? std::string("NULL") : alias + ".value";
  }

  void read_event_types() {
    // ENUM_NSYS_EVENT_TYPE gives the ids by name; the defaults are the ids nsys has written.
    ev_pushpop_ = {59, 70};  // NvtxPushPopRange, NvtxtPushPopRange
    ev_startend_ = {60, 71};
    ev_mark_ = {34};
    ev_domain_ = 75;
    if (!schema_->has("ENUM_NSYS_EVENT_TYPE") || !schema_->col("ENUM_NSYS_EVENT_TYPE", "name"))
      return;
    sql::Stmt s(db_, "SELECT id, name FROM ENUM_NSYS_EVENT_TYPE");
    std::map<std::string, int64_t> ids;
    while (s.step()) ids[s.text(1)] = s.i64(0);
    auto set_from = [&](std::set<int64_t>& out, std::initializer_list<const char*> names) {
      std::set<int64_t> got;
      for (const char* n : names)
        if (auto it = ids.find(n); it != ids.end()) got.insert(it->second);
      if (!got.empty()) out = got;
    };
    set_from(ev_pushpop_, {"NvtxPushPopRange", "NvtxtPushPopRange"});
    set_from(ev_startend_, {"NvtxStartEndRange", "NvtxtStartEndRange"});
    set_from(ev_mark_, {"NvtxMark"});
    if (auto it = ids.find("NvtxDomainCreate"); it != ids.end()) ev_domain_ = it->second;
  }

  std::string range_types_sql() const {
    std::string out;
    for (const auto* set : {&ev_pushpop_, &ev_startend_})
      for (int64_t v : *set) out += (out.empty() ? "" : ",") + std::to_string(v);
    return out;
  }

  // NVTX text: the explicit text, else the registered string.
  std::string nvtx_text_expr() {
    std::string text = schema_->expr(kNvtx, "n", "text");
    std::string reg = string_value("t", schema_->expr(kNvtx, "n", "textId"));
    return "COALESCE(" + text + ", " + reg + ")";
  }
  std::string nvtx_json_expr() {
    std::string json = schema_->expr(kNvtx, "n", "jsonText");
    std::string reg = string_value("j", schema_->expr(kNvtx, "n", "jsonTextId"));
    return "COALESCE(" + json + ", " + reg + ")";
  }
  std::string nvtx_joins() {
    return join_strings("t", schema_->expr(kNvtx, "n", "textId")) +
           join_strings("j", schema_->expr(kNvtx, "n", "jsonTextId"));
  }

  void read_nccl_ranges() {
    if (!schema_->has(kNvtx)) return;
    if (!schema_->col(kNvtx, "eventType") || !schema_->col(kNvtx, "start") ||
        !schema_->col(kNvtx, "end")) {
      missing_column("NVTX_EVENTS.start/end/eventType (NVTX not imported)");
      nvtx_unusable_ = true;
      return;
    }
    std::string dom = schema_->expr(kNvtx, "n", "domainId");
    std::string tid = schema_->expr(kNvtx, "n", "globalTid");
    // Domain names: NvtxDomainCreate rows carry the name in `text`, keyed by (process, domain).
    {
      sql::Stmt s(db_, "SELECT " + dom + ", " + nvtx_text_expr() + ", " + tid +
                           " FROM NVTX_EVENTS n" + nvtx_joins() +
                           " WHERE n.eventType = " + std::to_string(ev_domain_));
      while (s.step()) {
        if (s.is_null(0)) continue;
        int64_t pk = s.is_null(2) ? -1 : pid_key_of(s.i64(2));
        domains_[{pk, s.i64(0)}] = s.text(1);
      }
    }
    std::set<int64_t> nccl_ids;
    for (const auto& [key, name] : domains_)
      if (name == "NCCL") nccl_ids.insert(key.second);
    if (nccl_ids.empty()) return;
    std::string ids;
    for (int64_t d : nccl_ids) ids += (ids.empty() ? "" : ",") + std::to_string(d);
    sql::Stmt s(db_, "SELECT n.start, n.\"end\", " + tid + ", " + dom + ", " + nvtx_text_expr() +
                         ", " + nvtx_json_expr() + " FROM NVTX_EVENTS n" + nvtx_joins() +
                         " WHERE n.eventType IN (" + range_types_sql() + ") AND " + dom + " IN (" +
                         ids + ") AND n.\"end\" IS NOT NULL");
    while (s.step()) {
      int64_t gtid = s.is_null(2) ? 0 : s.i64(2);
      auto d = domains_.find({s.is_null(2) ? -1 : pid_key_of(gtid), s.i64(3)});
      if (d == domains_.end() || d->second != "NCCL") continue;
      if (bad_span(s.i64(0), s.i64(1))) continue;
      NcclRange r;
      r.start = s.i64(0);
      r.end = s.i64(1);
      r.global_tid = gtid;
      r.name = s.text(4);
      classify_nccl_range(r);
      if (auto p = parse_nccl_payload(s.text(5))) r.payload = *p;
      if (r.comm_init && !r.payload.comm.empty() && r.payload.nranks > 0)
        comm_nranks_[r.payload.comm] = r.payload.nranks;
      nccl_ranges_[gtid].push_back(std::move(r));
    }
    for (auto& [t, v] : nccl_ranges_)
      std::sort(v.begin(), v.end(), [](const NcclRange& a, const NcclRange& b) {
        return a.start != b.start ? a.start < b.start : a.end > b.end;
      });
  }

  // Every process that ran GPU work becomes a rank. Its rank number comes from the file when it
  // says (MPI_RANKS, or NCCL's ncclCommInitRank payload for its largest communicator), else from
  // the caller's default for this file.
  void assign_ranks() {
    std::set<int64_t> gpu_procs;
    bool rows_without_pid = false;
    for (const char* t : {kKernel, kMemcpy, kMemset}) {
      if (!schema_->has(t)) continue;
      if (!schema_->col(t, "globalPid")) {
        rows_without_pid = true;
        continue;
      }
      sql::Stmt s(db_, std::string("SELECT DISTINCT globalPid FROM ") + t);
      while (s.step()) {
        if (s.is_null(0))
          rows_without_pid = true;
        else
          gpu_procs.insert(pid_key_of(s.i64(0)));
      }
    }
    // Rank numbers the file states.
    std::map<int64_t, std::pair<int32_t, int32_t>> stated;  // pid key -> (rank, world)
    if (schema_->has("MPI_RANKS") && schema_->col("MPI_RANKS", "globalTid") &&
        schema_->col("MPI_RANKS", "rank")) {
      sql::Stmt s(db_, "SELECT globalTid, rank FROM MPI_RANKS");
      while (s.step())
        if (!s.is_null(0)) stated[pid_key_of(s.i64(0))] = {static_cast<int32_t>(s.i64(1)), -1};
    }
    std::map<int64_t, std::pair<int32_t, int32_t>> from_nccl;  // largest communicator wins
    for (const auto& [gtid, ranges] : nccl_ranges_)
      for (const auto& r : ranges) {
        if (!r.comm_init || r.payload.rank < 0 || r.payload.nranks <= 0) continue;
        auto& cur = from_nccl[pid_key_of(gtid)];
        if (r.payload.nranks > cur.second) cur = {r.payload.rank, r.payload.nranks};
      }
    for (const auto& [pk, rw] : from_nccl) {
      auto it = stated.find(pk);
      if (it == stated.end())
        stated[pk] = rw;
      else if (it->second.second < 0)
        it->second.second = rw.second;
    }
    std::vector<int64_t> procs(gpu_procs.begin(), gpu_procs.end());
    std::sort(procs.begin(), procs.end(), [](int64_t a, int64_t b) {
      return os_pid(a) != os_pid(b) ? os_pid(a) < os_pid(b) : a < b;
    });
    int32_t base = ctx_.default_rank(index_);
    int32_t guessed = 0;
    for (size_t i = 0; i < procs.size(); ++i) {
      Proc p;
      p.pid = os_pid(procs[i]);
      if (auto it = stated.find(procs[i]); it != stated.end()) {
        p.rank = it->second.first;
        p.world = it->second.second;
      } else {
        p.rank = base + static_cast<int32_t>(i);
        if (procs.size() > 1) ++guessed;
      }
      procs_[procs[i]] = p;
    }
    // Processes without GPU work but with a stated rank still own their CPU rows.
    for (const auto& [pk, rw] : stated)
      if (!procs_.count(pk)) procs_[pk] = Proc{rw.first, os_pid(pk), -1, rw.second};
    if (procs.size() == 1) sole_ = procs_[procs[0]].rank;
    if (procs.empty()) sole_ = stated.size() == 1 ? stated.begin()->second.first : base;
    // A rank comes from one file only (ImportContext refuses a second claim).
    std::set<int32_t> mine;
    for (const auto& [pk, p] : procs_) mine.insert(p.rank);
    if (sole_) mine.insert(*sole_);
    for (int32_t r : mine) ctx_.claim_rank(r, file_);
    if (rows_without_pid && procs.size() > 1)
      ctx_.diagnose(diag::Code::nsys_rows_without_process, 1,
                    file_ + ": GPU rows without globalPid in a multi-process export were skipped");
    ctx_.diagnose(diag::Code::nsys_rank_guessed, guessed,
                  file_ + ": several processes and no rank information; ranks numbered from " +
                      std::to_string(base) + " in pid order");
  }

  // The rank of a row from its globalPid/globalTid, or nullopt when it cannot be placed.
  std::optional<int32_t> rank_of(const sql::Stmt& s, int col) {
    if (s.is_null(col)) return sole_;
    auto it = procs_.find(pid_key_of(s.i64(col)));
    if (it != procs_.end()) return it->second.rank;
    return sole_;
  }
  std::optional<int32_t> rank_of_key(int64_t pk) {
    auto it = procs_.find(pk);
    return it != procs_.end() ? std::optional<int32_t>(it->second.rank) : sole_;
  }

  void read_device_names() {
    const std::string gpu = "TARGET_INFO_GPU";
    if (!schema_->has(gpu) || !schema_->col(gpu, "id") || !schema_->col(gpu, "name")) return;
    // The CUDA device ordinal (kernels' deviceId) is cuDevice in newer exports; older ones map it
    // through TARGET_INFO_CUDA_DEVICE (cudaId -> gpuId) or use the GPU id itself.
    std::string q;
    if (schema_->col(gpu, "cuDevice")) {
      q = "SELECT COALESCE(cuDevice, id), name FROM TARGET_INFO_GPU";
    } else if (schema_->col("TARGET_INFO_CUDA_DEVICE", "cudaId") &&
               schema_->col("TARGET_INFO_CUDA_DEVICE", "gpuId")) {
      q = "SELECT d.cudaId, g.name FROM TARGET_INFO_CUDA_DEVICE d JOIN TARGET_INFO_GPU g "
          "ON g.id = d.gpuId";
    } else {
      q = "SELECT id, name FROM TARGET_INFO_GPU";
    }
    sql::Stmt s(db_, q);
    while (s.step())
      if (!s.is_null(0) && !s.is_null(1)) device_names_.emplace(s.i64(0), s.text(1));
  }

  void note_stream(int32_t rank, int64_t stream) { streams_seen_.insert({rank, stream}); }
  void note_device(int32_t rank, int64_t device) {
    rank_device_.emplace(rank, device);  // the first device seen
  }

  void read_kernels() {
    if (!schema_->has(kKernel)) return;
    for (const char* c : {"start", "end", "streamId"})
      if (!schema_->col(kKernel, c)) {
        missing_column(std::string(kKernel) + "." + c + " (kernels not imported)");
        return;
      }
    // Names: demangledName in current exports; older ones only have shortName or mangledName.
    std::string name_col;
    for (const char* c : {"demangledName", "shortName", "mangledName"})
      if (schema_->col(kKernel, c)) {
        name_col = c;
        break;
      }
    if (name_col != "demangledName")
      missing_column(std::string(kKernel) + ".demangledName (" +
                     (name_col.empty() ? "kernels unnamed" : "used " + name_col) + ")");
    std::string name_id = name_col.empty() ? "NULL" : "k.\"" + name_col + "\"";
    sql::Stmt s(db_, "SELECT k.start, k.\"end\", " + schema_->expr(kKernel, "k", "deviceId") +
                         ", k.streamId, " + schema_->expr(kKernel, "k", "correlationId") + ", " +
                         schema_->expr(kKernel, "k", "globalPid") + ", " + name_id + ", " +
                         string_value("s", name_id) + " FROM CUPTI_ACTIVITY_KIND_KERNEL k" +
                         join_strings("s", name_id));
    while (s.step()) {
      ++ctx_.stats.events;
      auto rank = rank_of(s, 5);
      if (!rank) {
        ++unplaced_;
        continue;
      }
      if (bad_span(s.i64(0), s.i64(1))) continue;
      Kernel k;
      k.rank = *rank;
      k.start = s.i64(0);
      k.end = s.i64(1);
      k.stream = s.i64(3);
      k.correlation = s.is_null(4) ? 0 : s.i64(4);
      std::string name;
      if (!s.is_null(6)) {
        k.name = string_id(s.i64(6), s, 7);
        name = s.is_null(7) ? std::string() : s.text(7);
      }
      k.category = classify_kernel(name);
      if (!s.is_null(2)) note_device(k.rank, s.i64(2));
      note_stream(k.rank, k.stream);
      if (auto parsed = parse_nccl_kernel_name(name)) {
        // Written after the launch and NVTX are known: SendRecv kernels may get a better category.
        PendingNccl p;
        p.kernel = k;
        p.parsed = *parsed;
        p.pid_key = s.is_null(5) ? -1 : pid_key_of(s.i64(5));
        if (k.correlation != 0) pending_index_[{p.pid_key, k.correlation}] = pending_.size();
        pending_.push_back(std::move(p));
        continue;
      }
      w_.add(run_, k);
    }
  }

  void read_memory(const char* table) {
    if (!schema_->has(table)) return;
    bool memset = std::strcmp(table, kMemset) == 0;
    for (const char* c : {"start", "end", "streamId"})
      if (!schema_->col(table, c)) {
        missing_column(std::string(table) + "." + c + " (not imported)");
        return;
      }
    std::string kind = memset ? "NULL" : schema_->expr(table, "m", "copyKind");
    sql::Stmt s(db_, "SELECT m.start, m.\"end\", m.streamId, " +
                         schema_->expr(table, "m", "correlationId") + ", " +
                         schema_->expr(table, "m", "globalPid") + ", " +
                         schema_->expr(table, "m", "bytes") + ", " + kind + " FROM " + table +
                         " m");
    while (s.step()) {
      ++ctx_.stats.events;
      auto rank = rank_of(s, 4);
      if (!rank) {
        ++unplaced_;
        continue;
      }
      if (bad_span(s.i64(0), s.i64(1))) continue;
      Memcpy m;
      m.rank = *rank;
      m.start = s.i64(0);
      m.end = s.i64(1);
      m.stream = s.i64(2);
      m.correlation = s.is_null(3) ? 0 : s.i64(3);
      m.bytes = s.is_null(5) ? -1 : s.i64(5);
      m.kind = memset ? MemKind::Memset
                      : (s.is_null(6) ? MemKind::Unknown : mem_kind_from_copy_kind(s.i64(6)));
      m.name = memset ? w_.intern("Memset") : w_.intern("Memcpy " + std::string(to_string(m.kind)));
      note_stream(m.rank, m.stream);
      w_.add(run_, m);
    }
  }

  void read_runtime() {
    if (!schema_->has(kRuntime)) return;
    if (!schema_->col(kRuntime, "start") || !schema_->col(kRuntime, "end")) {
      missing_column(std::string(kRuntime) + ".start/end (runtime calls not imported)");
      return;
    }
    std::string name_id = schema_->expr(kRuntime, "r", "nameId");
    sql::Stmt s(db_, "SELECT r.start, r.\"end\", " + schema_->expr(kRuntime, "r", "globalTid") +
                         ", " + schema_->expr(kRuntime, "r", "correlationId") + ", " + name_id +
                         ", " + string_value("s", name_id) + " FROM CUPTI_ACTIVITY_KIND_RUNTIME r" +
                         join_strings("s", name_id));
    while (s.step()) {
      ++ctx_.stats.events;
      auto rank = rank_of(s, 2);
      if (!rank) {
        ++unplaced_;
        continue;
      }
      if (bad_span(s.i64(0), s.i64(1))) continue;
      ApiCall a;
      a.rank = *rank;
      a.start = s.i64(0);
      a.end = s.i64(1);
      a.tid = s.is_null(2) ? 0 : os_tid(s.i64(2));
      a.kind = ApiKind::Runtime;
      a.correlation = s.is_null(3) ? 0 : s.i64(3);
      if (!s.is_null(4)) a.name = string_id(s.i64(4), s, 5);
      w_.add(run_, a);
      if (a.correlation != 0 && !pending_index_.empty()) {
        int64_t pk = s.is_null(2) ? -1 : pid_key_of(s.i64(2));
        auto it = pending_index_.find({pk, a.correlation});
        if (it != pending_index_.end()) {
          pending_[it->second].launch_start = a.start;
          pending_[it->second].launch_tid = s.is_null(2) ? 0 : s.i64(2);
        }
      }
    }
  }

  void read_nvtx() {
    if (!schema_->has(kNvtx) || nvtx_unusable_) return;
    std::string tid = schema_->expr(kNvtx, "n", "globalTid");
    std::string num;  // first non-null scalar payload member
    for (const char* c : {"uint64Value", "int64Value", "uint32Value", "int32Value"})
      num += (num.empty() ? "" : ", ") + schema_->expr(kNvtx, "n", c);
    std::string real;
    for (const char* c : {"doubleValue", "floatValue"})
      real += (real.empty() ? "" : ", ") + schema_->expr(kNvtx, "n", c);
    sql::Stmt s(db_, "SELECT n.start, n.\"end\", n.eventType, " + tid + ", " +
                         schema_->expr(kNvtx, "n", "domainId") + ", " + nvtx_text_expr() + ", " +
                         nvtx_json_expr() + ", COALESCE(" + num + ", NULL), COALESCE(" + real +
                         ", NULL), " + schema_->expr(kNvtx, "n", "binaryData") +
                         " FROM NVTX_EVENTS n" + nvtx_joins());
    int64_t marks = 0, open = 0, binary = 0;
    while (s.step()) {
      ++ctx_.stats.events;
      int64_t type = s.i64(2);
      bool is_range = ev_pushpop_.count(type) || ev_startend_.count(type);
      if (!is_range) {
        if (ev_mark_.count(type)) ++marks;
        continue;  // domain/category/thread naming rows are metadata
      }
      if (s.is_null(1)) {
        ++open;
        continue;
      }
      auto rank = rank_of(s, 3);
      if (!rank) {
        ++unplaced_;
        continue;
      }
      if (bad_span(s.i64(0), s.i64(1))) continue;
      Range r;
      r.rank = *rank;
      r.stream = s.is_null(3) ? 0 : os_tid(s.i64(3));
      r.start = s.i64(0);
      r.end = s.i64(1);
      r.name = w_.intern(s.text(5));
      if (!s.is_null(4) && s.i64(4) != 0) {
        int64_t pk = s.is_null(3) ? -1 : pid_key_of(s.i64(3));
        auto d = domains_.find({pk, s.i64(4)});
        r.domain =
            w_.intern(d != domains_.end() ? d->second : "domain " + std::to_string(s.i64(4)));
      }
      if (!s.is_null(6))
        r.payload = w_.intern(s.text(6));
      else if (!s.is_null(7))
        r.payload = w_.intern(std::to_string(s.i64(7)));
      else if (!s.is_null(8))
        r.payload = w_.intern(std::to_string(s.f64(8)));
      else if (!s.is_null(9))
        ++binary;
      w_.add(run_, r);
    }
    ctx_.diagnose(diag::Code::nsys_nvtx_mark_skipped, marks,
                  file_ + ": NVTX marks (instants) are not imported as ranges");
    ctx_.diagnose(diag::Code::nsys_nvtx_unterminated, open,
                  file_ + ": NVTX ranges without an end were skipped");
    ctx_.diagnose(diag::Code::nsys_nvtx_binary_payload, binary,
                  file_ + ": binary NVTX payloads were not decoded");
  }

  // The NCCL NVTX ranges that describe the operation launched at `t` on thread `gtid`:
  // the innermost enclosing API range (ncclAllReduce, ncclSend, ...), or, when the launch sits
  // in ncclGroupEnd, the API ranges since the previous ncclGroupEnd on that thread.
  std::vector<const NcclRange*> describing_ranges(int64_t gtid, Ns t) {
    std::vector<const NcclRange*> out;
    auto it = nccl_ranges_.find(gtid);
    if (it == nccl_ranges_.end()) return out;
    const auto& rs = it->second;
    const NcclRange* inner = nullptr;
    const NcclRange* group_end = nullptr;
    for (const auto& r : rs) {
      if (r.start > t) break;
      if (r.end < t) continue;
      if (r.op != CollOp::Unknown) inner = &r;        // sorted by start: later is inner
      if (r.group_end && !group_end) group_end = &r;  // outermost group end
    }
    if (inner) return {inner};
    if (!group_end) return out;
    Ns boundary = INT64_MIN;
    for (const auto& r : rs)
      if (r.group_end && r.end <= group_end->start) boundary = std::max(boundary, r.end);
    for (const auto& r : rs)
      if (r.op != CollOp::Unknown && r.start >= boundary && r.end <= group_end->start)
        out.push_back(&r);
    return out;
  }

  Resolution resolve(const PendingNccl& p) {
    Resolution res;
    res.op = p.parsed.op;
    res.dtype = p.parsed.dtype;
    if (p.launch_start < 0) return res;
    auto ranges = describing_ranges(p.launch_tid, p.launch_start);
    if (ranges.empty()) return res;
    res.from_nvtx = true;
    auto take = [&](const NcclRange& r) {
      res.comm = r.payload.comm;
      res.msg_bytes = r.payload.bytes;
      res.count = r.payload.count;
      if (!r.payload.dtype.empty() && res.dtype.empty()) res.dtype = r.payload.dtype;
      res.peer_or_root = r.payload.peer >= 0 ? r.payload.peer : r.payload.root;
    };
    if (ranges.size() == 1) {
      const NcclRange& r = *ranges[0];
      take(r);
      if (p.parsed.op == CollOp::SendRecv || p.parsed.op == CollOp::Unknown) {
        res.op = r.op;
      } else if (r.op != p.parsed.op) {
        ++op_conflicts_;  // the kernel name is the better witness of what ran
        res.msg_bytes = -1;
      }
      return res;
    }
    res.group_size = static_cast<int32_t>(ranges.size());
    if (p.parsed.op != CollOp::SendRecv && p.parsed.op != CollOp::Unknown) {
      // A group of collectives: the ranges of this kernel's operation, sizes added.
      std::vector<const NcclRange*> same;
      for (const auto* r : ranges)
        if (r->op == p.parsed.op) same.push_back(r);
      if (same.empty()) return res;
      take(*same[0]);
      int64_t sum = 0;
      for (const auto* r : same)
        sum = (sum < 0 || r->payload.bytes < 0) ? -1 : sum + r->payload.bytes;
      res.msg_bytes = sum;
      res.peer_or_root = same.size() == 1 ? res.peer_or_root : -1;
      return res;
    }
    // A group of point-to-point calls carried by one SendRecv kernel.
    std::set<int32_t> send_peers, recv_peers;
    int64_t send_bytes = 0, recv_bytes = 0;
    int sends = 0, recvs = 0, others = 0;
    for (const auto* r : ranges) {
      auto add = [](int64_t& acc, int64_t b) { acc = (acc < 0 || b < 0) ? -1 : acc + b; };
      if (r->op == CollOp::Send) {
        ++sends;
        send_peers.insert(r->payload.peer);
        add(send_bytes, r->payload.bytes);
      } else if (r->op == CollOp::Recv) {
        ++recvs;
        recv_peers.insert(r->payload.peer);
        add(recv_bytes, r->payload.bytes);
      } else {
        ++others;
      }
    }
    take(*ranges[0]);
    res.count = -1;
    if (others > 0) {
      res.op = CollOp::ManyToMany;
      res.msg_bytes = -1;
      res.peer_or_root = -1;
      return res;
    }
    int32_t nranks = -1;
    if (auto it = comm_nranks_.find(res.comm); it != comm_nranks_.end()) nranks = it->second;
    if (sends == 1 && recvs == 1 && send_peers == recv_peers) {
      res.op = CollOp::SendRecv;
      res.peer_or_root = *send_peers.begin();
      res.msg_bytes = (send_bytes < 0 || recv_bytes < 0) ? -1 : std::max(send_bytes, recv_bytes);
    } else if (nranks > 1 && send_peers.size() >= static_cast<size_t>(nranks - 1) &&
               recv_peers.size() >= static_cast<size_t>(nranks - 1)) {
      res.op = CollOp::AllToAll;  // every peer of the communicator, both ways
      res.peer_or_root = -1;
      res.msg_bytes = send_bytes;
    } else {
      res.op = CollOp::ManyToMany;
      res.peer_or_root = -1;
      res.msg_bytes = (send_bytes < 0 || recv_bytes < 0) ? -1 : std::max(send_bytes, recv_bytes);
    }
    return res;
  }

  void build_collectives() {
    int64_t unlinked = 0, unresolved = 0, unsized = 0;
    std::vector<Collective> colls;
    colls.reserve(pending_.size());
    for (auto& p : pending_) {
      Resolution res = resolve(p);
      if (p.launch_start < 0) ++unlinked;
      if (res.op == CollOp::SendRecv && !res.from_nvtx) ++unresolved;
      Collective c;
      c.rank = p.kernel.rank;
      c.op = res.op;
      c.comm = res.comm.empty() ? 0 : w_.intern(res.comm);
      c.dtype = res.dtype.empty() ? 0 : w_.intern(res.dtype);
      c.stream = p.kernel.stream;
      c.start = p.kernel.start;
      c.end = p.kernel.end;
      c.enqueue = p.launch_start;
      c.algo = p.parsed.algo.empty() ? 0 : w_.intern(p.parsed.algo);
      c.proto = p.parsed.proto.empty() ? 0 : w_.intern(p.parsed.proto);
      c.group_size = res.group_size;
      c.peer_or_root = res.peer_or_root;
      c.name = p.kernel.name;
      c.kernel_ref = p.kernel.correlation;
      set_sizes(c, res);
      if (c.bytes < 0 && (c.op != CollOp::SendRecv || res.from_nvtx)) ++unsized;
      colls.push_back(c);
      // The kernel's category follows the operation now known.
      if (res.from_nvtx && res.op != CollOp::Unknown) p.kernel.category = comm_category(res.op);
      w_.add(run_, p.kernel);
      if (!res.comm.empty()) {
        auto it = comm_nranks_.find(res.comm);
        comms_[res.comm] = it != comm_nranks_.end() ? it->second : -1;
      }
    }
    // Order within each communicator (by launch time) is how ranks' collectives are matched.
    std::vector<size_t> order(colls.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      Ns ta = colls[a].enqueue >= 0 ? colls[a].enqueue : colls[a].start;
      Ns tb = colls[b].enqueue >= 0 ? colls[b].enqueue : colls[b].start;
      return ta < tb;
    });
    std::map<std::pair<int32_t, StrId>, int64_t> next_seq;
    for (size_t i : order) {
      auto& c = colls[i];
      if (c.comm != 0) c.seq = next_seq[{c.rank, c.comm}]++;
      w_.add(run_, c);
    }
    ctx_.diagnose(
        diag::Code::nsys_nccl_kernel_unlinked, unlinked,
        file_ + ": NCCL kernels whose launching runtime call was not found (enqueue unknown)");
    ctx_.diagnose(
        diag::Code::nsys_nccl_op_unresolved, unresolved,
        file_ + ": SendRecv kernels without an enclosing NCCL NVTX range; op left as SendRecv");
    ctx_.diagnose(diag::Code::nsys_nccl_size_unknown, unsized,
                  file_ +
                      ": collectives without a size (no NCCL NVTX payload, or communicator size "
                      "unknown for all-gather/reduce-scatter)");
    ctx_.diagnose(
        diag::Code::nsys_nccl_op_conflict, op_conflicts_,
        file_ + ": NCCL NVTX range names another operation than its kernel; kernel name kept");
  }

  // NCCL's "Message size [bytes]" is the per-rank message: count * type size for all-reduce,
  // broadcast, reduce and point-to-point; the send size for all-gather; the receive size for
  // reduce-scatter. Collective::bytes is the larger buffer (nccl-tests "size").
  void set_sizes(Collective& c, const Resolution& res) {
    int32_t n = -1;
    if (auto it = comm_nranks_.find(res.comm); it != comm_nranks_.end()) n = it->second;
    int ds = res.dtype.empty() ? 0 : dtype_size(res.dtype);
    int64_t m = res.msg_bytes;
    int64_t elems = res.count >= 0 ? res.count : (m >= 0 && ds > 0 ? m / ds : -1);
    switch (c.op) {
      case CollOp::AllGather:
        c.in_count = elems;
        c.out_count = (elems >= 0 && n > 0) ? elems * n : -1;
        c.bytes = (m >= 0 && n > 0) ? m * n : -1;
        break;
      case CollOp::ReduceScatter:
        c.out_count = elems;
        c.in_count = (elems >= 0 && n > 0) ? elems * n : -1;
        c.bytes = (m >= 0 && n > 0) ? m * n : -1;
        break;
      case CollOp::AllToAll:
      case CollOp::ManyToMany:
        c.bytes = m;
        c.in_count = c.out_count = (m >= 0 && ds > 0) ? m / ds : -1;
        break;
      default:
        c.bytes = m;
        c.in_count = c.out_count = elems;
        break;
    }
  }

  void write_small_tables() {
    std::set<int32_t> ranks;
    for (const auto& [pk, p] : procs_) ranks.insert(p.rank);
    if (procs_.empty() && sole_) ranks.insert(*sole_);
    for (const auto& [rank, stream] : streams_seen_) ranks.insert(rank);
    bool any_nccl = !pending_.empty() || !nccl_ranges_.empty();
    for (int32_t rank : ranks) {
      RankInfo r;
      r.rank = rank;
      r.source = file_;
      r.backend = any_nccl ? "nccl" : "";
      for (const auto& [pk, p] : procs_)
        if (p.rank == rank) {
          r.pid = p.pid;
          r.world_size = p.world;
        }
      if (auto it = rank_device_.find(rank); it != rank_device_.end()) {
        r.device = static_cast<int32_t>(it->second);
        if (auto d = device_names_.find(it->second); d != device_names_.end())
          r.device_name = d->second;
      }
      w_.add_rank(run_, r);
    }
    // Streams: the ones the process created (TARGET_INFO_CUDA_STREAM) and the ones used.
    std::map<std::pair<int32_t, int64_t>, std::string> labels;
    const std::string st = "TARGET_INFO_CUDA_STREAM";
    if (schema_->col(st, "streamId")) {
      sql::Stmt s(db_, "SELECT streamId, " + schema_->expr(st, "t", "processId") + ", " +
                           schema_->expr(st, "t", "priority") + " FROM " + st + " t");
      while (s.step()) {
        std::optional<int32_t> rank = sole_;
        if (!s.is_null(1))
          for (const auto& [pk, p] : procs_)
            if (p.pid == s.i64(1)) rank = p.rank;
        if (!rank) continue;
        std::string label = "stream " + std::to_string(s.i64(0));
        if (!s.is_null(2) && s.i64(2) != 0) label += " (priority " + std::to_string(s.i64(2)) + ")";
        labels[{*rank, s.i64(0)}] = label;
      }
    }
    for (const auto& key : streams_seen_)
      if (!labels.count(key)) labels[key] = "stream " + std::to_string(key.second);
    for (const auto& [key, label] : labels) {
      StreamInfo s;
      s.rank = key.first;
      s.stream = key.second;
      s.gpu = true;
      s.label = label;
      w_.add_stream(run_, s);
    }
    for (const auto& [comm, nranks] : comms_) {
      Communicator c;
      c.comm = comm;
      c.nranks = nranks;
      c.label = "NCCL communicator " + comm;
      c.backend = "nccl";
      w_.add_communicator(run_, c);
    }
    ctx_.diagnose(diag::Code::nsys_missing_column, missing_col_count_,
                  file_ + ": " + missing_cols_);
    ctx_.diagnose(diag::Code::nsys_unknown_string, unknown_strings_,
                  file_ + ": name ids not found in StringIds (names left empty)");
    ctx_.diagnose(
        diag::Code::nsys_bad_time, bad_time_,
        "rows whose start/end are not a time (over 130 years from the clock's origin, or ending "
        "before they start) were skipped; first: " +
            bad_time_example_);
    ctx_.diagnose(
        diag::Code::nsys_unplaced_rows, unplaced_,
        file_ + ": rows of processes without a rank in a multi-process export were skipped");
  }

  struct Proc {
    int32_t rank = 0;
    int64_t pid = -1;
    int64_t device = -1;
    int32_t world = -1;
  };

  ImportContext& ctx_;
  TraceWriter& w_;
  int64_t run_;
  std::string file_;
  size_t index_;
  uint64_t file_size_ = 0;
  sqlite3* db_ = nullptr;
  Schema* schema_ = nullptr;

  std::set<int64_t> ev_pushpop_, ev_startend_, ev_mark_;
  int64_t ev_domain_ = 75;
  bool nvtx_unusable_ = false;

  std::map<std::pair<int64_t, int64_t>, std::string> domains_;       // (pid key, domainId) -> name
  std::unordered_map<int64_t, std::vector<NcclRange>> nccl_ranges_;  // by global tid
  std::map<std::string, int32_t> comm_nranks_;
  std::map<std::string, int32_t> comms_;  // communicators seen on collectives -> nranks

  std::map<int64_t, Proc> procs_;  // by pid key
  std::optional<int32_t> sole_;    // rank for rows that name no (known) process
  std::map<int64_t, std::string> device_names_;
  std::map<int32_t, int64_t> rank_device_;
  std::set<std::pair<int32_t, int64_t>> streams_seen_;

  std::unordered_map<int64_t, StrId> str_cache_;
  std::vector<PendingNccl> pending_;
  std::map<std::pair<int64_t, int64_t>, size_t> pending_index_;  // (pid key, correlation)

  std::string missing_cols_;
  int64_t missing_col_count_ = 0, unknown_strings_ = 0, unplaced_ = 0, op_conflicts_ = 0;
  int64_t bad_time_ = 0;
  std::string bad_time_example_;
};

}  // namespace

void import_nsys(ImportContext& ctx, const std::string& file, size_t index) {
  NsysImporter imp(ctx, file, index);
  try {
    imp.run();
  } catch (const Error& e) {
    // SQLite failures while reading mean a damaged or foreign file: name it.
    if (e.code() == ErrorCode::Store)
      throw Error(ErrorCode::BadFormat,
                  file + ": unreadable Nsight Systems export (" + std::string(e.what()) + ")");
    throw;
  }
}

}  // namespace braid

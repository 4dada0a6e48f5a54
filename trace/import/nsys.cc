// Importer for Nsight Systems SQLite exports (`nsys export --type sqlite`): the export, its
// processes and ranks, the small tables and the order of work. The table families are read in
// their own files (nsys_export.h lists them).
//
// Order of work: NCCL's own NVTX ranges and the rank information are read first (they decide the
// rank of every row), then kernels, memcpys/memsets, runtime calls (which link NCCL kernels to
// their launch), all NVTX ranges, and last the collectives built from NCCL kernels.
#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/import/importer.h"
#include "trace/import/nsys_export.h"
#include "trace/sqlite_util.h"
#include "trace/time_range.h"

namespace braid {
namespace nsys {

bool NsysExport::bad_span(Ns start, Ns end) {
  if (valid_span(start, end)) return false;
  if (bad_time++ == 0)
    bad_time_example = "start " + std::to_string(start) + ", end " + std::to_string(end);
  return true;
}

void NsysExport::missing_column(const std::string& what) {
  missing_cols += (missing_cols.empty() ? "" : "; ") + what;
  ++missing_col_count;
}

StrId NsysExport::string_id(int64_t nsys_id, const sql::Stmt& s, int col) {
  auto it = str_cache.find(nsys_id);
  if (it != str_cache.end()) return it->second;
  StrId id = 0;
  if (!s.is_null(col))
    id = w.intern(s.text(col));
  else
    ++unknown_strings;
  str_cache.emplace(nsys_id, id);
  return id;
}

std::string NsysExport::join_strings(const std::string& alias, const std::string& id_expr) {
  if (!schema->has(kStrings) || id_expr == "NULL") return "";
  return " LEFT JOIN StringIds " + alias + " ON " + alias + ".id = " + id_expr;
}

std::string NsysExport::string_value(const std::string& alias, const std::string& id_expr) {
  return (!schema->has(kStrings) || id_expr == "NULL") ? std::string("NULL") : alias + ".value";
}

std::optional<int32_t> NsysExport::rank_of(const sql::Stmt& s, int col) {
  if (s.is_null(col)) return sole;
  auto it = procs.find(pid_key_of(s.i64(col)));
  if (it != procs.end()) return it->second.rank;
  return sole;
}

namespace {

class NsysImporter {
 public:
  NsysImporter(ImportContext& ctx, std::string file, size_t index)
      : x_(ctx, std::move(file), index), nvtx_(x_), cupti_(x_), nccl_(x_, nvtx_) {}

  void run() {
    open();
    x_.schema.emplace(x_.db);
    check_is_nsys();
    note_missing_tables();
    nvtx_.read_event_types();
    nvtx_.read_nccl_ranges();
    assign_ranks();
    read_device_names();
    cupti_.read_kernels();
    cupti_.read_memory(kMemcpy);
    cupti_.read_memory(kMemset);
    cupti_.read_runtime();
    nvtx_.read_ranges();
    nccl_.build(cupti_.pending());
    write_small_tables();
    if (x_.ctx.options.progress) x_.ctx.options.progress(x_.file_size, x_.file_size);
  }

 private:
  [[noreturn]] void bad(const std::string& why) {
    throw Error(ErrorCode::BadFormat, x_.file + ": not an Nsight Systems export (" + why + ")");
  }

  void open() {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(x_.file, ec))
      throw Error(ErrorCode::NotFound, x_.file + ": no such file");
    x_.file_size = std::filesystem::file_size(x_.file, ec);
    x_.ctx.stats.bytes += x_.file_size;
    char head[16] = {};
    std::ifstream in(x_.file, std::ios::binary);
    if (!in) throw Error(ErrorCode::NotFound, x_.file + ": cannot open");
    in.read(head, sizeof head);
    if (in.gcount() < 16 || std::memcmp(head, "SQLite format 3", 16) != 0)
      bad("not an SQLite database");
    if (sqlite3_open_v2(x_.file.c_str(), &x_.db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
      bad(std::string("cannot open as SQLite: ") +
          (x_.db ? sqlite3_errmsg(x_.db) : "out of memory"));
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
      if (x_.schema->has(t)) return;
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
      if (!x_.schema->has(t)) {
        missing += (missing.empty() ? "" : ", ") + std::string(t);
        ++n;
      }
    bool core = !x_.schema->has(kKernel) || !x_.schema->has(kStrings);
    x_.ctx.diagnose(diag::Code::nsys_missing_table, n,
                    x_.file + ": absent, not imported: " + missing, -1,
                    core ? Severity::Warning : Severity::Info);
  }

  // Every process that ran GPU work becomes a rank. Its rank number comes from the file when it
  // says (MPI_RANKS, or NCCL's ncclCommInitRank payload for its largest communicator), else from
  // the caller's default for this file.
  void assign_ranks() {
    std::set<int64_t> gpu_procs;
    bool rows_without_pid = false;
    for (const char* t : {kKernel, kMemcpy, kMemset}) {
      if (!x_.schema->has(t)) continue;
      if (!x_.schema->col(t, "globalPid")) {
        rows_without_pid = true;
        continue;
      }
      sql::Stmt s(x_.db, std::string("SELECT DISTINCT globalPid FROM ") + t);
      while (s.step()) {
        if (s.is_null(0))
          rows_without_pid = true;
        else
          gpu_procs.insert(pid_key_of(s.i64(0)));
      }
    }
    // Rank numbers the file states.
    std::map<int64_t, std::pair<int32_t, int32_t>> stated;  // pid key -> (rank, world)
    if (x_.schema->has("MPI_RANKS") && x_.schema->col("MPI_RANKS", "globalTid") &&
        x_.schema->col("MPI_RANKS", "rank")) {
      sql::Stmt s(x_.db, "SELECT globalTid, rank FROM MPI_RANKS");
      while (s.step())
        if (!s.is_null(0)) stated[pid_key_of(s.i64(0))] = {static_cast<int32_t>(s.i64(1)), -1};
    }
    std::map<int64_t, std::pair<int32_t, int32_t>> from_nccl;  // largest communicator wins
    for (const auto& [gtid, ranges] : nvtx_.nccl_ranges())
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
    int32_t base = x_.ctx.default_rank(x_.index);
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
      x_.procs[procs[i]] = p;
    }
    // Processes without GPU work but with a stated rank still own their CPU rows.
    for (const auto& [pk, rw] : stated)
      if (!x_.procs.count(pk)) x_.procs[pk] = Proc{rw.first, os_pid(pk), -1, rw.second};
    if (procs.size() == 1) x_.sole = x_.procs[procs[0]].rank;
    if (procs.empty()) x_.sole = stated.size() == 1 ? stated.begin()->second.first : base;
    // A rank comes from one file only (ImportContext refuses a second claim).
    std::set<int32_t> mine;
    for (const auto& [pk, p] : x_.procs) mine.insert(p.rank);
    if (x_.sole) mine.insert(*x_.sole);
    for (int32_t r : mine) x_.ctx.claim_rank(r, x_.file);
    if (rows_without_pid && procs.size() > 1)
      x_.ctx.diagnose(
          diag::Code::nsys_rows_without_process, 1,
          x_.file + ": GPU rows without globalPid in a multi-process export were skipped");
    x_.ctx.diagnose(diag::Code::nsys_rank_guessed, guessed,
                    x_.file + ": several processes and no rank information; ranks numbered from " +
                        std::to_string(base) + " in pid order");
  }

  void read_device_names() {
    const std::string gpu = "TARGET_INFO_GPU";
    if (!x_.schema->has(gpu) || !x_.schema->col(gpu, "id") || !x_.schema->col(gpu, "name")) return;
    // The CUDA device ordinal (kernels' deviceId) is cuDevice in newer exports; older ones map it
    // through TARGET_INFO_CUDA_DEVICE (cudaId -> gpuId) or use the GPU id itself.
    std::string q;
    if (x_.schema->col(gpu, "cuDevice")) {
      q = "SELECT COALESCE(cuDevice, id), name FROM TARGET_INFO_GPU";
    } else if (x_.schema->col("TARGET_INFO_CUDA_DEVICE", "cudaId") &&
               x_.schema->col("TARGET_INFO_CUDA_DEVICE", "gpuId")) {
      q = "SELECT d.cudaId, g.name FROM TARGET_INFO_CUDA_DEVICE d JOIN TARGET_INFO_GPU g "
          "ON g.id = d.gpuId";
    } else {
      q = "SELECT id, name FROM TARGET_INFO_GPU";
    }
    sql::Stmt s(x_.db, q);
    while (s.step())
      if (!s.is_null(0) && !s.is_null(1)) device_names_.emplace(s.i64(0), s.text(1));
  }

  void write_small_tables() {
    std::set<int32_t> ranks;
    for (const auto& [pk, p] : x_.procs) ranks.insert(p.rank);
    if (x_.procs.empty() && x_.sole) ranks.insert(*x_.sole);
    for (const auto& [rank, stream] : x_.streams_seen) ranks.insert(rank);
    bool any_nccl = !cupti_.pending().empty() || !nvtx_.nccl_ranges().empty();
    for (int32_t rank : ranks) {
      RankInfo r;
      r.rank = rank;
      r.source = x_.file;
      r.backend = any_nccl ? "nccl" : "";
      for (const auto& [pk, p] : x_.procs)
        if (p.rank == rank) {
          r.pid = p.pid;
          r.world_size = p.world;
        }
      if (auto it = x_.rank_device.find(rank); it != x_.rank_device.end()) {
        r.device = static_cast<int32_t>(it->second);
        if (auto d = device_names_.find(it->second); d != device_names_.end())
          r.device_name = d->second;
      }
      x_.w.add_rank(x_.run, r);
    }
    // Streams: the ones the process created (TARGET_INFO_CUDA_STREAM) and the ones used.
    std::map<std::pair<int32_t, int64_t>, std::string> labels;
    const std::string st = "TARGET_INFO_CUDA_STREAM";
    if (x_.schema->col(st, "streamId")) {
      sql::Stmt s(x_.db, "SELECT streamId, " + x_.schema->expr(st, "t", "processId") + ", " +
                             x_.schema->expr(st, "t", "priority") + " FROM " + st + " t");
      while (s.step()) {
        std::optional<int32_t> rank = x_.sole;
        if (!s.is_null(1))
          for (const auto& [pk, p] : x_.procs)
            if (p.pid == s.i64(1)) rank = p.rank;
        if (!rank) continue;
        std::string label = "stream " + std::to_string(s.i64(0));
        if (!s.is_null(2) && s.i64(2) != 0) label += " (priority " + std::to_string(s.i64(2)) + ")";
        labels[{*rank, s.i64(0)}] = label;
      }
    }
    for (const auto& key : x_.streams_seen)
      if (!labels.count(key)) labels[key] = "stream " + std::to_string(key.second);
    for (const auto& [key, label] : labels) {
      StreamInfo s;
      s.rank = key.first;
      s.stream = key.second;
      s.gpu = true;
      s.label = label;
      x_.w.add_stream(x_.run, s);
    }
    for (const auto& [comm, nranks] : nccl_.comms()) {
      Communicator c;
      c.comm = comm;
      c.nranks = nranks;
      c.label = "NCCL communicator " + comm;
      c.backend = "nccl";
      x_.w.add_communicator(x_.run, c);
    }
    x_.ctx.diagnose(diag::Code::nsys_missing_column, x_.missing_col_count,
                    x_.file + ": " + x_.missing_cols);
    x_.ctx.diagnose(diag::Code::nsys_unknown_string, x_.unknown_strings,
                    x_.file + ": name ids not found in StringIds (names left empty)");
    x_.ctx.diagnose(
        diag::Code::nsys_bad_time, x_.bad_time,
        "rows whose start/end are not a time (over 130 years from the clock's origin, or ending "
        "before they start) were skipped; first: " +
            x_.bad_time_example);
    x_.ctx.diagnose(
        diag::Code::nsys_unplaced_rows, x_.unplaced,
        x_.file + ": rows of processes without a rank in a multi-process export were skipped");
  }

  NsysExport x_;
  NvtxTables nvtx_;
  CuptiTables cupti_;
  NcclCollectives nccl_;
  std::map<int64_t, std::string> device_names_;
};

}  // namespace
}  // namespace nsys

void import_nsys(ImportContext& ctx, const std::string& file, size_t index) {
  nsys::NsysImporter imp(ctx, file, index);
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

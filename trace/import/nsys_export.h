// The Nsight Systems importer's parts (internal to trace/import/nsys*.cc), one per table family:
//
//   nsys.cc        the export itself (file, schema checks, string ids, diagnostics counters),
//                  processes and ranks (MPI_RANKS, NCCL's comm-init payload, TARGET_INFO_*),
//                  the small tables (ranks, streams, communicators) and the order of work
//   nsys_cupti.cc  CUPTI activity: kernels, memcpys/memsets, runtime calls
//   nsys_nvtx.cc   NVTX_EVENTS: NCCL's own ranges and their payloads, every range as nvtx_ranges
//   nsys_nccl.cc   collectives built from NCCL kernels and the NCCL ranges around their launch
//
// The export's schema changes between nsys versions and its tables are created lazily, so every
// table and column is looked up first (Schema) and whatever is absent is skipped and counted in
// diagnostics. docs/import-nsys.md lists what is read from where.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "trace/categories.h"
#include "trace/import/importer.h"
#include "trace/sqlite_util.h"

namespace braid::nsys {

// nsys serializes ids as (upper ids << 48) | (pid << 24) | tid.
constexpr int64_t kIdBits = 0x1000000;
inline int64_t pid_key_of(int64_t global_id) { return global_id / kIdBits; }
inline int64_t os_pid(int64_t pid_key) { return pid_key % kIdBits; }
inline int64_t os_tid(int64_t global_tid) { return global_tid % kIdBits; }

constexpr const char* kKernel = "CUPTI_ACTIVITY_KIND_KERNEL";
constexpr const char* kMemcpy = "CUPTI_ACTIVITY_KIND_MEMCPY";
constexpr const char* kMemset = "CUPTI_ACTIVITY_KIND_MEMSET";
constexpr const char* kRuntime = "CUPTI_ACTIVITY_KIND_RUNTIME";
constexpr const char* kNvtx = "NVTX_EVENTS";
constexpr const char* kStrings = "StringIds";

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

// One range of NCCL's NVTX domain on one thread.
struct NcclRange {
  Ns start = 0, end = 0;
  int64_t global_tid = 0;
  std::string name;
  CollOp op = CollOp::Unknown;
  bool group_start = false, group_end = false, comm_init = false;
  NcclPayload payload;
};

// An NCCL kernel, written once its launch and NVTX ranges are known (nsys_nccl.cc).
struct PendingNccl {
  Kernel kernel;
  NcclKernelName parsed;
  int64_t pid_key = -1;
  Ns launch_start = -1;
  int64_t launch_tid = 0;  // global tid of the launching runtime call
};

struct Proc {
  int32_t rank = 0;
  int64_t pid = -1;
  int64_t device = -1;
  int32_t world = -1;
};

// The export being imported and what every table family shares: where rows go, the schema,
// string ids, the rank of each process, what GPU rows showed, and the counters of skipped rows.
struct NsysExport {
  NsysExport(ImportContext& c, std::string f, size_t i)
      : ctx(c), w(c.writer), run(c.run), file(std::move(f)), index(i) {}
  ~NsysExport() {
    if (db) sqlite3_close(db);
  }
  NsysExport(const NsysExport&) = delete;
  NsysExport& operator=(const NsysExport&) = delete;

  // True (and counted) when a row's start/end cannot be a time (trace/time_range.h): the row is
  // skipped, so no arithmetic on it can overflow.
  bool bad_span(Ns start, Ns end);
  void missing_column(const std::string& what);
  // Resolves a StringIds id to a writer id, once per id.
  StrId string_id(int64_t nsys_id, const sql::Stmt& s, int col);
  std::string join_strings(const std::string& alias, const std::string& id_expr);
  std::string string_value(const std::string& alias, const std::string& id_expr);
  // The rank of a row from its globalPid/globalTid, or nullopt when it cannot be placed.
  std::optional<int32_t> rank_of(const sql::Stmt& s, int col);
  void note_stream(int32_t rank, int64_t stream) { streams_seen.insert({rank, stream}); }
  void note_device(int32_t rank, int64_t device) {
    rank_device.emplace(rank, device);  // the first device seen
  }

  ImportContext& ctx;
  TraceWriter& w;
  int64_t run;
  std::string file;
  size_t index;
  uint64_t file_size = 0;
  sqlite3* db = nullptr;
  std::optional<Schema> schema;

  std::map<int64_t, Proc> procs;  // by pid key
  std::optional<int32_t> sole;    // rank for rows that name no (known) process
  std::map<int32_t, int64_t> rank_device;
  std::set<std::pair<int32_t, int64_t>> streams_seen;

  std::unordered_map<int64_t, StrId> str_cache;
  std::string missing_cols;
  int64_t missing_col_count = 0, unknown_strings = 0, unplaced = 0;
  int64_t bad_time = 0;
  std::string bad_time_example;
};

// NVTX_EVENTS (nsys_nvtx.cc): the event type ids, domain names, NCCL's own ranges (read first:
// they help decide ranks and describe collectives) and every range as an nvtx_ranges row.
class NvtxTables {
 public:
  explicit NvtxTables(NsysExport& x) : x_(x) {}
  void read_event_types();
  void read_nccl_ranges();
  void read_ranges();
  // The NCCL NVTX ranges that describe the operation launched at `t` on thread `gtid`:
  // the innermost enclosing API range (ncclAllReduce, ncclSend, ...), or, when the launch sits
  // in ncclGroupEnd, the API ranges since the previous ncclGroupEnd on that thread.
  std::vector<const NcclRange*> describing_ranges(int64_t gtid, Ns t) const;

  const std::unordered_map<int64_t, std::vector<NcclRange>>& nccl_ranges() const {
    return nccl_ranges_;
  }
  const std::map<std::string, int32_t>& comm_nranks() const { return comm_nranks_; }

 private:
  std::string range_types_sql() const;
  std::string nvtx_text_expr();
  std::string nvtx_json_expr();
  std::string nvtx_joins();

  NsysExport& x_;
  std::set<int64_t> ev_pushpop_, ev_startend_, ev_mark_;
  int64_t ev_domain_ = 75;
  bool nvtx_unusable_ = false;
  std::map<std::pair<int64_t, int64_t>, std::string> domains_;       // (pid key, domainId) -> name
  std::unordered_map<int64_t, std::vector<NcclRange>> nccl_ranges_;  // by global tid
  std::map<std::string, int32_t> comm_nranks_;
};

// CUPTI activity (nsys_cupti.cc): kernels, memcpys/memsets and runtime calls. NCCL kernels are
// held back as PendingNccl, their launch filled in from the runtime calls.
class CuptiTables {
 public:
  explicit CuptiTables(NsysExport& x) : x_(x) {}
  void read_kernels();
  void read_memory(const char* table);
  void read_runtime();
  std::vector<PendingNccl>& pending() { return pending_; }

 private:
  NsysExport& x_;
  std::vector<PendingNccl> pending_;
  std::map<std::pair<int64_t, int64_t>, size_t> pending_index_;  // (pid key, correlation)
};

// Collectives from NCCL kernels (nsys_nccl.cc): the operation, communicator and size from the
// NCCL ranges around each kernel's launch, numbered per communicator in launch order.
class NcclCollectives {
 public:
  NcclCollectives(NsysExport& x, const NvtxTables& nvtx) : x_(x), nvtx_(nvtx) {}
  // Writes the pending kernels and their collectives.
  void build(std::vector<PendingNccl>& pending);
  const std::map<std::string, int32_t>& comms() const { return comms_; }

 private:
  struct Resolution;
  Resolution resolve(const PendingNccl& p);
  void set_sizes(Collective& c, const Resolution& res);

  NsysExport& x_;
  const NvtxTables& nvtx_;
  std::map<std::string, int32_t> comms_;  // communicators seen on collectives -> nranks
  int64_t op_conflicts_ = 0;
};

}  // namespace braid::nsys

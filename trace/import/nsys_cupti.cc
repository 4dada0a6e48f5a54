// The Nsight Systems importer's CUPTI activity tables (nsys_export.h): kernels, memcpys/memsets
// and runtime calls; NCCL kernels wait as PendingNccl for their collectives (nsys_nccl.cc).
#include <cstdint>
#include <cstring>
#include <string>

#include "trace/import/nsys_export.h"

namespace braid::nsys {
namespace {

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

}  // namespace

void CuptiTables::read_kernels() {
  if (!x_.schema->has(kKernel)) return;
  for (const char* c : {"start", "end", "streamId"})
    if (!x_.schema->col(kKernel, c)) {
      x_.missing_column(std::string(kKernel) + "." + c + " (kernels not imported)");
      return;
    }
  // Names: demangledName in current exports; older ones only have shortName or mangledName.
  std::string name_col;
  for (const char* c : {"demangledName", "shortName", "mangledName"})
    if (x_.schema->col(kKernel, c)) {
      name_col = c;
      break;
    }
  if (name_col != "demangledName")
    x_.missing_column(std::string(kKernel) + ".demangledName (" +
                      (name_col.empty() ? "kernels unnamed" : "used " + name_col) + ")");
  std::string name_id = name_col.empty() ? "NULL" : "k.\"" + name_col + "\"";
  sql::Stmt s(x_.db, "SELECT k.start, k.\"end\", " + x_.schema->expr(kKernel, "k", "deviceId") +
                         ", k.streamId, " + x_.schema->expr(kKernel, "k", "correlationId") + ", " +
                         x_.schema->expr(kKernel, "k", "globalPid") + ", " + name_id + ", " +
                         x_.string_value("s", name_id) + " FROM CUPTI_ACTIVITY_KIND_KERNEL k" +
                         x_.join_strings("s", name_id));
  while (s.step()) {
    ++x_.ctx.stats.events;
    auto rank = x_.rank_of(s, 5);
    if (!rank) {
      ++x_.unplaced;
      continue;
    }
    if (x_.bad_span(s.i64(0), s.i64(1))) continue;
    Kernel k;
    k.rank = *rank;
    k.start = s.i64(0);
    k.end = s.i64(1);
    k.stream = s.i64(3);
    k.correlation = s.is_null(4) ? 0 : s.i64(4);
    std::string name;
    if (!s.is_null(6)) {
      k.name = x_.string_id(s.i64(6), s, 7);
      name = s.is_null(7) ? std::string() : s.text(7);
    }
    k.category = classify_kernel(name);
    if (!s.is_null(2)) x_.note_device(k.rank, s.i64(2));
    x_.note_stream(k.rank, k.stream);
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
    x_.w.add(x_.run, k);
  }
}

void CuptiTables::read_memory(const char* table) {
  if (!x_.schema->has(table)) return;
  bool memset = std::strcmp(table, kMemset) == 0;
  for (const char* c : {"start", "end", "streamId"})
    if (!x_.schema->col(table, c)) {
      x_.missing_column(std::string(table) + "." + c + " (not imported)");
      return;
    }
  std::string kind = memset ? "NULL" : x_.schema->expr(table, "m", "copyKind");
  sql::Stmt s(x_.db, "SELECT m.start, m.\"end\", m.streamId, " +
                         x_.schema->expr(table, "m", "correlationId") + ", " +
                         x_.schema->expr(table, "m", "globalPid") + ", " +
                         x_.schema->expr(table, "m", "bytes") + ", " + kind + " FROM " + table +
                         " m");
  while (s.step()) {
    ++x_.ctx.stats.events;
    auto rank = x_.rank_of(s, 4);
    if (!rank) {
      ++x_.unplaced;
      continue;
    }
    if (x_.bad_span(s.i64(0), s.i64(1))) continue;
    Memcpy m;
    m.rank = *rank;
    m.start = s.i64(0);
    m.end = s.i64(1);
    m.stream = s.i64(2);
    m.correlation = s.is_null(3) ? 0 : s.i64(3);
    m.bytes = s.is_null(5) ? -1 : s.i64(5);
    m.kind = memset ? MemKind::Memset
                    : (s.is_null(6) ? MemKind::Unknown : mem_kind_from_copy_kind(s.i64(6)));
    m.name =
        memset ? x_.w.intern("Memset") : x_.w.intern("Memcpy " + std::string(to_string(m.kind)));
    x_.note_stream(m.rank, m.stream);
    x_.w.add(x_.run, m);
  }
}

void CuptiTables::read_runtime() {
  if (!x_.schema->has(kRuntime)) return;
  if (!x_.schema->col(kRuntime, "start") || !x_.schema->col(kRuntime, "end")) {
    x_.missing_column(std::string(kRuntime) + ".start/end (runtime calls not imported)");
    return;
  }
  std::string name_id = x_.schema->expr(kRuntime, "r", "nameId");
  sql::Stmt s(x_.db, "SELECT r.start, r.\"end\", " + x_.schema->expr(kRuntime, "r", "globalTid") +
                         ", " + x_.schema->expr(kRuntime, "r", "correlationId") + ", " + name_id +
                         ", " + x_.string_value("s", name_id) +
                         " FROM CUPTI_ACTIVITY_KIND_RUNTIME r" + x_.join_strings("s", name_id));
  while (s.step()) {
    ++x_.ctx.stats.events;
    auto rank = x_.rank_of(s, 2);
    if (!rank) {
      ++x_.unplaced;
      continue;
    }
    if (x_.bad_span(s.i64(0), s.i64(1))) continue;
    ApiCall a;
    a.rank = *rank;
    a.start = s.i64(0);
    a.end = s.i64(1);
    a.tid = s.is_null(2) ? 0 : os_tid(s.i64(2));
    a.kind = ApiKind::Runtime;
    a.correlation = s.is_null(3) ? 0 : s.i64(3);
    if (!s.is_null(4)) a.name = x_.string_id(s.i64(4), s, 5);
    x_.w.add(x_.run, a);
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

}  // namespace braid::nsys

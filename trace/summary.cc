#include "trace/summary.h"

#include <cinttypes>
#include <cstdio>
#include <set>

#include "trace/diagnostics.h"
#include "trace/json.h"
#include "trace/sqlite_util.h"

namespace braid {

std::vector<RunSummary> summarize(const TraceReader& reader) {
  sqlite3* db = reader.db();
  std::vector<RunSummary> out;
  for (const auto& run : reader.runs()) {
    RunSummary s;
    s.run = run;
    s.ranks = reader.ranks(run.run_id);
    const TraceReader::Counts c = reader.counts(run.run_id);
    s.gpu_streams = c.gpu_streams;
    s.cpu_threads = c.cpu_threads;
    s.kernels = c.kernels;
    s.memcpys = c.memcpys;
    s.memsets = c.memsets;
    s.api_calls = c.api_calls;
    s.ranges = c.ranges;
    s.steps = c.steps;
    s.collectives = c.collectives;
    s.communicators = c.communicators;

    // Time span on the job axis: per rank min/max over the event tables, shifted by the offset.
    {
      sql::Stmt q(db,
                  "SELECT MIN(t0 + COALESCE(r.clock_offset_ns, 0)), MAX(t1 + COALESCE(r.clock_offset_ns, 0))"
                  " FROM (SELECT rank, MIN(start_ns) t0, MAX(end_ns) t1 FROM kernels WHERE run_id=?1 GROUP BY rank"
                  " UNION ALL SELECT rank, MIN(start_ns), MAX(end_ns) FROM memcpys WHERE run_id=?1 GROUP BY rank"
                  " UNION ALL SELECT rank, MIN(start_ns), MAX(end_ns) FROM api_calls WHERE run_id=?1 GROUP BY rank"
                  " UNION ALL SELECT rank, MIN(start_ns), MAX(end_ns) FROM nvtx_ranges WHERE run_id=?1 GROUP BY rank"
                  " UNION ALL SELECT rank, MIN(start_ns), MAX(end_ns) FROM collectives WHERE run_id=?1 GROUP BY rank) e"
                  " LEFT JOIN ranks r ON r.run_id=?1 AND r.rank=e.rank");
      q.bind(1, run.run_id);
      if (q.step() && !q.is_null(0)) {
        s.start = q.i64(0);
        s.end = q.i64(1);
      }
    }
    {
      sql::Stmt q(db, "SELECT c.name, COUNT(*), SUM(k.end_ns - k.start_ns) FROM kernels k"
                      " JOIN categories c ON c.id = k.category WHERE k.run_id=? GROUP BY c.name");
      q.bind(1, run.run_id);
      while (q.step()) {
        s.kernels_by_category[q.text(0)] = q.i64(1);
        s.kernel_time_by_category[q.text(0)] = q.i64(2);
      }
    }
    {
      sql::Stmt q(db, "SELECT op, COUNT(*), SUM(CASE WHEN bytes >= 0 THEN bytes ELSE 0 END),"
                      " SUM(bytes >= 0), SUM(end_ns - start_ns) FROM collectives WHERE run_id=?"
                      " GROUP BY op");
      q.bind(1, run.run_id);
      while (q.step()) {
        CollectiveTotals t;
        t.count = q.i64(1);
        t.bytes = q.i64(2);
        t.sized = q.i64(3);
        t.time_ns = q.i64(4);
        s.collectives_by_op[q.text(0)] = t;
      }
    }
    s.diagnostics = reader.diagnostics(run.run_id);
    out.push_back(std::move(s));
  }
  return out;
}

void put_diagnostic(json::Writer& w, const Diagnostic& d) {
  w.begin_object()
      .field("rank", d.rank)
      .field("severity", to_string(d.severity))
      .field("code", d.code)
      .field("count", d.count)
      .field("detail", d.detail)
      .end_object();
}

std::string summary_json(const std::string& path, const std::vector<RunSummary>& runs) {
  json::Writer w;
  w.begin_object().field("file", path).key("runs").begin_array();
  for (const auto& s : runs) {
    w.begin_object()
        .field("run_id", s.run.run_id)
        .field("kind", to_string(s.run.kind))
        .field("backend", s.run.backend)
        .field("source", s.run.source);
    w.key("ranks").begin_array();
    for (const auto& r : s.ranks)
      w.begin_object()
          .field("rank", r.rank)
          .field("world_size", r.world_size)
          .field("device", r.device)
          .field("device_name", r.device_name)
          .field("backend", r.backend)
          .field("nccl_version", r.nccl_version)
          .field("clock_offset_ns", r.clock_offset)
          .field("source", r.source)
          .end_object();
    w.end_array()
        .field("gpu_streams", s.gpu_streams)
        .field("cpu_threads", s.cpu_threads)
        .field("start_ns", s.start)
        .field("end_ns", s.end)
        .field("duration_ns", s.end - s.start);
    w.key("counts")
        .begin_object()
        .field("kernels", s.kernels)
        .field("memcpys", s.memcpys)
        .field("memsets", s.memsets)
        .field("api_calls", s.api_calls)
        .field("ranges", s.ranges)
        .field("steps", s.steps)
        .field("collectives", s.collectives)
        .field("communicators", s.communicators)
        .end_object();
    w.key("kernels_by_category").begin_object();
    for (const auto& [cat, n] : s.kernels_by_category)
      w.key(cat)
          .begin_object()
          .field("count", n)
          .field("time_ns", s.kernel_time_by_category.at(cat))
          .end_object();
    w.end_object().key("collectives_by_op").begin_object();
    for (const auto& [op, t] : s.collectives_by_op)
      w.key(op)
          .begin_object()
          .field("count", t.count)
          .field("bytes", t.bytes)
          .field("sized", t.sized)
          .field("time_ns", t.time_ns)
          .end_object();
    w.end_object().key("diagnostics").begin_array();
    for (const auto& d : s.diagnostics) put_diagnostic(w, d);
    w.end_array().end_object();
  }
  w.end_array().end_object();
  return w.take() + "\n";
}

std::string summary_text(const std::string& path, const std::vector<RunSummary>& runs) {
  std::string o = path + ": " + std::to_string(runs.size()) + (runs.size() == 1 ? " run\n" : " runs\n");
  char buf[512];
  for (const auto& s : runs) {
    std::snprintf(buf, sizeof buf, "\nrun %" PRId64 " (%s, %s)  %s\n", s.run.run_id,
                  std::string(to_string(s.run.kind)).c_str(), s.run.backend.c_str(),
                  s.run.source.c_str());
    o += buf;
    o += "  ranks:    " + std::to_string(s.ranks.size());
    if (!s.ranks.empty() && s.ranks[0].world_size > 0)
      o += " of world size " + std::to_string(s.ranks[0].world_size);
    o += "\n";
    for (const auto& r : s.ranks) {
      std::snprintf(buf, sizeof buf, "    rank %d  device %d %s  %s%s\n", r.rank, r.device,
                    r.device_name.c_str(), r.backend.c_str(),
                    r.nccl_version.empty() ? "" : (" NCCL " + r.nccl_version).c_str());
      o += buf;
    }
    o += "  streams:  " + std::to_string(s.gpu_streams) + " GPU, " + std::to_string(s.cpu_threads) +
         " CPU threads\n";
    o += "  span:     " + format_ns(s.end - s.start) + "\n";
    std::snprintf(buf, sizeof buf,
                  "  events:   %" PRId64 " kernels, %" PRId64 " memcpy, %" PRId64 " memset, %" PRId64
                  " CPU/API, %" PRId64 " ranges, %" PRId64 " steps\n",
                  s.kernels, s.memcpys, s.memsets, s.api_calls, s.ranges, s.steps);
    o += buf;
    if (!s.kernels_by_category.empty()) {
      o += "  kernels by category:\n";
      for (const auto& [cat, n] : s.kernels_by_category) {
        std::snprintf(buf, sizeof buf, "    %-20s %10" PRId64 "  %s\n", cat.c_str(), n,
                      format_ns(s.kernel_time_by_category.at(cat)).c_str());
        o += buf;
      }
    }
    o += "  collectives: " + std::to_string(s.collectives) + " on " +
         std::to_string(s.communicators) + " communicators\n";
    if (!s.collectives_by_op.empty()) {
      std::snprintf(buf, sizeof buf, "    %-16s %8s %14s %14s\n", "op", "count", "bytes", "time");
      o += buf;
      for (const auto& [op, t] : s.collectives_by_op) {
        std::string bytes = t.sized ? format_bytes(t.bytes) : "?";
        if (t.sized && t.sized < t.count) bytes += " (" + std::to_string(t.sized) + " sized)";
        std::snprintf(buf, sizeof buf, "    %-16s %8" PRId64 " %14s %14s\n", op.c_str(), t.count,
                      bytes.c_str(), format_ns(t.time_ns).c_str());
        o += buf;
      }
    }
    if (!s.diagnostics.empty()) {
      o += "  diagnostics:\n";
      for (const auto& d : s.diagnostics) {
        std::string where = d.rank >= 0 ? "rank " + std::to_string(d.rank) : "run";
        std::snprintf(buf, sizeof buf, "    %-7s %-8s %-36s %8" PRId64 "  %s\n",
                      std::string(to_string(d.severity)).c_str(), where.c_str(), d.code.c_str(),
                      d.count, d.detail.c_str());
        o += buf;
      }
      // What each code counts, from the one table of codes (trace/diagnostics.h).
      std::set<std::string> codes;
      for (const auto& d : s.diagnostics) codes.insert(d.code);
      for (const std::string& c : codes)
        if (const diag::Info* info = diag::find(c))
          o += "    " + c + ": " + std::string(info->description) + "\n";
    }
  }
  return o;
}

}  // namespace braid

#include "app/view/core/stats.h"

#include <algorithm>
#include <tuple>

#include "analysis/cost_model.h"
#include "app/view/core/colors.h"
#include "app/view/core/lod.h"

namespace braid::view {

CollTiming coll_timing(const ViewRun& d, int32_t ci) {
  CollTiming t;
  const CollRec& r = d.colls[ci];
  t.duration = std::max<Ns>(0, r.c.end - r.c.start);
  t.transfer = t.duration;
  t.exposed = -1;
  const Match* m = r.match >= 0 ? &d.matches[r.match] : nullptr;
  if (m) t.nranks = static_cast<int>(m->members.size());
  if (r.c.group_size > 0) t.nranks = r.c.group_size;
  if (m && m->metrics >= 0) {
    const analysis::CollectiveMetrics& cm = d.metrics.collectives[m->metrics];
    t.nranks = cm.nranks;
    t.late_rank = cm.late_rank;
    t.transfer = cm.transfer_ns;
    t.algbw_gbs = cm.algbw_gbps;
    t.busbw_gbs = cm.busbw_gbps;
    // A member's timing as analysis::add_collective_metrics gives it (the loader keeps it per
    // collective, not per member list): its arrival is its start on the job axis.
    t.wait = cm.last_arrival - r.c.start;
    t.exposed = d.colls.exposed(static_cast<size_t>(ci));
    return t;
  }
  if (r.c.bytes > 0 && t.transfer > 0) {
    t.algbw_gbs = analysis::algbw_gbps(r.c.bytes, t.transfer);
    t.busbw_gbs = analysis::busbw_gbps(r.c.op, t.nranks, r.c.bytes, t.transfer);
  }
  return t;
}

RangeStats range_stats(const ViewRun& d, Ns t0, Ns t1) {
  RangeStats s;
  s.t0 = t0;
  s.t1 = t1;
  std::map<int32_t, std::vector<analysis::Interval>> gpu;
  for (const Lane& l : d.lanes)
    for (const Row& row : l.rows)
      for (auto i = static_cast<size_t>(first_visible(row, t0));
           i < row.size() && row.start(i) < t1; ++i) {
        const PackedEvent& e = row.packed()[i];
        if (e.kind() == EventKind::Step) continue;  // the steps lane repeats the steps table
        Ns a = std::max(e.start, t0), b = std::min(row.end(i), t1);
        auto& c = s.by_category[category_name(static_cast<uint8_t>(e.category))];
        ++c.count;
        c.time += b - a;
        ++s.events;
        // Only communication kernels (and a host collective's own event) carry a collective:
        // the row's table is searched for those alone.
        const bool comm =
            e.kind() == EventKind::Kernel && is_comm(static_cast<Category>(e.category));
        if (const int32_t ci = comm ? row.coll(i) : -1; ci >= 0) {
          ++s.collectives;
          s.collective_bytes += std::max<int64_t>(0, d.colls[ci].c.bytes);
        }
        if (l.gpu && e.kind() != EventKind::Annotation) gpu[l.rank].push_back({a, b});
      }
  for (auto& [rank, iv] : gpu) s.gpu_busy[rank] = analysis::merge_intervals(iv);
  return s;
}

RunMetrics run_metrics(const ViewRun& d) {
  RunMetrics m;
  Ns lo = INT64_MAX, hi = INT64_MIN;
  for (const analysis::RankMetrics& r : d.metrics.ranks)
    if (r.step < 0) {
      m.ranks.push_back(r);
      lo = std::min(lo, r.start);
      hi = std::max(hi, r.end);
    }
  if (!m.ranks.empty()) {
    Ns ex = 0, co = 0, cp = 0;
    for (const analysis::RankMetrics& r : m.ranks) {
      ex += r.exposed_comm_ns;
      co += r.comm_ns;
      cp += r.compute_ns;
    }
    auto n = static_cast<Ns>(m.ranks.size());
    m.exposed_comm_per_rank = ex / n;
    m.comm_per_rank = co / n;
    m.compute_per_rank = cp / n;
  }
  std::map<int64_t, Ns> steps = analysis::step_spans(d.metrics);
  if (!steps.empty()) {
    m.steps_from_trace = true;
    m.steps = static_cast<int64_t>(steps.size());
    Ns total = 0;
    for (auto& [k, v] : steps) total += v;
    m.step_time = total / m.steps;
  } else {
    m.steps = 1;
    m.step_time = lo <= hi ? hi - lo : d.end - d.start;
  }
  for (const CollRec& r : d.colls) {
    OpTotals& t = m.per_op[std::string(to_string(r.c.op))];
    ++t.count;
    t.bytes += std::max<int64_t>(0, r.c.bytes);
    t.time += std::max<Ns>(0, r.c.end - r.c.start);
  }
  return m;
}

MetricsBar metrics_bar(const analysis::RankMetrics& r) {
  MetricsBar b;
  b.compute = r.compute_ns - r.overlap_ns;
  b.overlapped = r.overlap_ns;
  b.exposed = r.exposed_comm_ns;
  b.memory = std::max<Ns>(0, r.busy_ns - r.compute_ns - r.exposed_comm_ns);
  b.idle = r.idle_ns;
  return b;
}

std::vector<ExposedColl> top_exposed(const ViewRun& d, size_t n) {
  std::map<std::tuple<std::string, CollOp, int64_t>, ExposedColl> by;
  const auto& cs = d.metrics.collectives;
  for (size_t i = 0; i < cs.size(); ++i) {
    const analysis::CollectiveMetrics& c = cs[i];
    ExposedColl& e = by[{c.comm, c.op, c.bytes}];
    e.comm = c.comm;
    e.op = c.op;
    e.bytes = c.bytes;
    ++e.count;
    e.exposed += c.exposed_ns;
    e.transfer += c.transfer_ns;
    if (e.worst < 0 || c.exposed_ns > cs[e.worst].exposed_ns) e.worst = static_cast<int32_t>(i);
  }
  std::vector<ExposedColl> out;
  for (auto& [k, v] : by)
    if (v.exposed > 0) out.push_back(std::move(v));
  std::sort(out.begin(), out.end(), [](const ExposedColl& a, const ExposedColl& b) {
    return a.exposed != b.exposed ? a.exposed > b.exposed : a.comm < b.comm;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

Ns step_origin(const ViewRun& d) {
  if (d.steps.empty()) return d.start;
  int64_t first = d.steps.front().step;
  for (const Step& s : d.steps) first = std::min(first, s.step);
  Ns t = INT64_MAX;
  for (const Step& s : d.steps)
    if (s.step == first) t = std::min(t, s.start);
  return t;
}

std::vector<DiffRow> diff_runs(const RunMetrics& a, const RunMetrics& b) {
  std::vector<DiffRow> out;
  auto d = [](double x) { return x; };
  out.push_back({"step time", d(a.step_time), d(b.step_time), "ns"});
  out.push_back({"exposed communication / rank", d(a.exposed_comm_per_rank),
                 d(b.exposed_comm_per_rank), "ns"});
  out.push_back({"communication / rank", d(a.comm_per_rank), d(b.comm_per_rank), "ns"});
  out.push_back({"compute / rank", d(a.compute_per_rank), d(b.compute_per_rank), "ns"});
  std::map<std::string, std::pair<OpTotals, OpTotals>> ops;
  for (auto& [k, v] : a.per_op) ops[k].first = v;
  for (auto& [k, v] : b.per_op) ops[k].second = v;
  for (auto& [k, v] : ops) {
    out.push_back({k + " count", d(v.first.count), d(v.second.count), "count"});
    out.push_back({k + " time", d(v.first.time), d(v.second.time), "ns"});
    out.push_back({k + " bytes", d(v.first.bytes), d(v.second.bytes), "bytes"});
  }
  return out;
}

}  // namespace braid::view

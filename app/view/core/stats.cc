#include "app/view/core/stats.h"

#include <algorithm>

#include "app/view/core/colors.h"

namespace braid::view {

double bus_factor(CollOp op, int n) {
  if (n <= 1) return 1.0;
  switch (op) {
    case CollOp::AllReduce:
      return 2.0 * (n - 1) / n;
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::AllToAll:
      return static_cast<double>(n - 1) / n;
    default:
      return 1.0;
  }
}

CollTiming coll_timing(const RunData& d, int32_t ci) {
  CollTiming t;
  const CollRec& r = d.colls[ci];
  t.duration = std::max<Ns>(0, r.c.end - r.c.start);
  t.transfer = t.duration;
  if (r.match >= 0) {
    const Match& m = d.matches[r.match];
    t.nranks = static_cast<int>(m.members.size());
    Ns latest = INT64_MIN;
    for (int32_t o : m.members)
      if (d.colls[o].c.start >= latest) {
        latest = d.colls[o].c.start;
        t.late_rank = d.colls[o].c.rank;
      }
    t.wait = std::max<Ns>(0, latest - r.c.start);
    t.transfer = std::max<Ns>(0, m.latest_end - latest);
  }
  if (r.c.group_size > 0) t.nranks = r.c.group_size;
  if (r.c.bytes > 0 && t.transfer > 0) {
    t.algbw_gbs = static_cast<double>(r.c.bytes) / static_cast<double>(t.transfer);  // B/ns = GB/s
    t.busbw_gbs = t.algbw_gbs * bus_factor(r.c.op, t.nranks);
  }
  return t;
}

Ns union_length(std::vector<std::pair<Ns, Ns>> iv) {
  std::sort(iv.begin(), iv.end());
  Ns total = 0, cur0 = 0, cur1 = 0;
  bool open = false;
  for (auto [a, b] : iv) {
    if (b <= a) continue;
    if (!open || a > cur1) {
      if (open) total += cur1 - cur0;
      cur0 = a;
      cur1 = b;
      open = true;
    } else {
      cur1 = std::max(cur1, b);
    }
  }
  if (open) total += cur1 - cur0;
  return total;
}

namespace {

std::vector<std::pair<Ns, Ns>> merged(std::vector<std::pair<Ns, Ns>> iv) {
  std::sort(iv.begin(), iv.end());
  std::vector<std::pair<Ns, Ns>> out;
  for (auto [a, b] : iv) {
    if (b <= a) continue;
    if (out.empty() || a > out.back().second)
      out.push_back({a, b});
    else
      out.back().second = std::max(out.back().second, b);
  }
  return out;
}

bool is_comm_event(const Event& e) {
  return e.category < kCategoryCpu && is_comm(static_cast<Category>(e.category));
}

}  // namespace

Ns difference_length(std::vector<std::pair<Ns, Ns>> a, std::vector<std::pair<Ns, Ns>> b) {
  auto ma = merged(std::move(a)), mb = merged(std::move(b));
  Ns total = 0;
  size_t j = 0;
  for (auto [a0, a1] : ma) {
    Ns covered = 0;
    while (j < mb.size() && mb[j].second <= a0) ++j;
    for (size_t k = j; k < mb.size() && mb[k].first < a1; ++k)
      covered += std::min(a1, mb[k].second) - std::max(a0, mb[k].first);
    total += (a1 - a0) - covered;
  }
  return total;
}

RangeStats range_stats(const RunData& d, Ns t0, Ns t1) {
  RangeStats s;
  s.t0 = t0;
  s.t1 = t1;
  std::map<int32_t, std::vector<std::pair<Ns, Ns>>> gpu;
  for (const Lane& l : d.lanes)
    for (const Row& row : l.rows) {
      auto it = std::upper_bound(row.events.begin(), row.events.end(), t0,
                                 [](Ns v, const Event& e) { return v < e.end; });
      for (; it != row.events.end() && it->start < t1; ++it) {
        Ns a = std::max(it->start, t0), b = std::min(it->end, t1);
        auto& c = s.by_category[category_name(it->category)];
        ++c.count;
        c.time += b - a;
        ++s.events;
        if (it->coll >= 0) {
          ++s.collectives;
          s.collective_bytes += std::max<int64_t>(0, d.colls[it->coll].c.bytes);
        }
        if (l.gpu && it->kind != EventKind::Annotation) gpu[l.rank].push_back({a, b});
      }
    }
  for (auto& [rank, iv] : gpu) s.gpu_busy[rank] = union_length(std::move(iv));
  return s;
}

RunMetrics run_metrics(const RunData& d) {
  RunMetrics m;
  std::map<int32_t, RankMetrics> ranks;
  std::map<int32_t, std::vector<std::pair<Ns, Ns>>> compute, comm;
  for (const Lane& l : d.lanes) {
    RankMetrics& rm = ranks[l.rank];
    rm.rank = l.rank;
    for (const Row& row : l.rows)
      for (const Event& e : row.events) {
        if (e.kind == EventKind::Kernel) ++rm.kernels;
        if (e.coll >= 0) ++rm.collectives;
        if (e.kind == EventKind::CpuCall || e.kind == EventKind::Annotation) continue;
        // Host-side collectives (no GPU kernel seen) still count as communication.
        if (is_comm_event(e))
          comm[l.rank].push_back({e.start, e.end});
        else if (l.gpu)
          compute[l.rank].push_back({e.start, e.end});
      }
  }
  for (auto& [rank, rm] : ranks) {
    auto& cp = compute[rank];
    auto& cm = comm[rank];
    std::vector<std::pair<Ns, Ns>> all = cp;
    all.insert(all.end(), cm.begin(), cm.end());
    if (!all.empty()) {
      Ns lo = INT64_MAX, hi = INT64_MIN;
      for (auto [a, b] : all) {
        lo = std::min(lo, a);
        hi = std::max(hi, b);
      }
      rm.span = hi - lo;
      rm.idle = rm.span - union_length(all);
    }
    rm.compute = union_length(cp);
    rm.comm = union_length(cm);
    rm.exposed_comm = difference_length(cm, cp);
    m.ranks.push_back(rm);
  }
  if (!m.ranks.empty()) {
    Ns ex = 0, co = 0, cp = 0;
    for (const RankMetrics& r : m.ranks) {
      ex += r.exposed_comm;
      co += r.comm;
      cp += r.compute;
    }
    auto n = static_cast<Ns>(m.ranks.size());
    m.exposed_comm_per_rank = ex / n;
    m.comm_per_rank = co / n;
    m.compute_per_rank = cp / n;
  }
  std::map<int64_t, std::pair<Ns, Ns>> steps;
  for (const Step& s : d.steps) {
    auto [it, fresh] = steps.emplace(s.step, std::make_pair(s.start, s.end));
    if (!fresh) {
      it->second.first = std::min(it->second.first, s.start);
      it->second.second = std::max(it->second.second, s.end);
    }
  }
  if (!steps.empty()) {
    m.steps_from_trace = true;
    m.steps = static_cast<int64_t>(steps.size());
    Ns total = 0;
    for (auto& [k, v] : steps) total += v.second - v.first;
    m.step_time = total / m.steps;
  } else {
    m.steps = 1;
    m.step_time = d.end - d.start;
  }
  for (const CollRec& r : d.colls) {
    OpTotals& t = m.per_op[std::string(to_string(r.c.op))];
    ++t.count;
    t.bytes += std::max<int64_t>(0, r.c.bytes);
    t.time += std::max<Ns>(0, r.c.end - r.c.start);
  }
  return m;
}

Ns step_origin(const RunData& d) {
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

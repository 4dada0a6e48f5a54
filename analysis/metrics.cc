#include "analysis/metrics.h"

#include <algorithm>

#include "analysis/cost_model.h"

namespace braid::analysis {

Ns merge_intervals(std::vector<Interval>& v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.end <= i.start) continue;
    if (!out.empty() && i.start <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  v = std::move(out);
  Ns total = 0;
  for (const Interval& i : v) total += i.end - i.start;
  return total;
}

Ns intersect_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  Ns total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    Ns lo = std::max(a[i].start, b[j].start), hi = std::min(a[i].end, b[j].end);
    if (hi > lo) total += hi - lo;
    if (a[i].end < b[j].end) ++i;
    else ++j;
  }
  return total;
}

int32_t group_nranks(const RunData& run, const CollGroup& g) {
  if (g.method == MatchMethod::PointToPoint) return 2;
  const Collective& c = run.ranks.at(g.members[0].rank).collectives[g.members[0].index];
  if (c.group_size > 0) return c.group_size;
  for (const Communicator& cm : run.comms)
    if (cm.comm == g.comm && cm.nranks > 0) return cm.nranks;
  return std::max<int32_t>(g.expected, static_cast<int32_t>(g.members.size()));
}

namespace {

enum class Cls { Compute, Comm, Memory };

Cls class_of(Category c) {
  if (is_comm(c)) return Cls::Comm;
  if (c == Category::Memory) return Cls::Memory;
  return Cls::Compute;
}

RankMetrics window_metrics(const RankTrace& t, Ns off, Ns lo, Ns hi) {
  RankMetrics m;
  m.rank = t.info.rank;
  std::vector<Interval> all, comp, comm, mem;
  auto clip = [&](Ns s, Ns e) { return Interval{std::max(s + off, lo), std::min(e + off, hi)}; };
  for (const Kernel& k : t.kernels) {
    if (k.start + off >= hi || k.end + off <= lo) continue;
    Interval i = clip(k.start, k.end);
    all.push_back(i);
    switch (class_of(k.category)) {
      case Cls::Compute: comp.push_back(i); break;
      case Cls::Comm: comm.push_back(i); break;
      case Cls::Memory: mem.push_back(i); break;
    }
    ++m.kernels;
  }
  for (const Memcpy& c : t.memcpys) {
    if (c.start + off >= hi || c.end + off <= lo) continue;
    all.push_back(clip(c.start, c.end));
    mem.push_back(clip(c.start, c.end));
  }
  for (const Collective& c : t.collectives)
    if (c.start + off >= lo && c.start + off < hi) ++m.collectives;
  m.start = lo;
  m.end = hi;
  m.busy_ns = merge_intervals(all);
  m.compute_ns = merge_intervals(comp);
  m.comm_ns = merge_intervals(comm);
  m.memory_ns = merge_intervals(mem);
  m.idle_ns = m.span() - m.busy_ns;
  m.non_compute_ns = m.span() - m.compute_ns - m.idle_ns;
  m.overlap_ns = intersect_length(comm, comp);
  m.exposed_comm_ns = m.comm_ns - m.overlap_ns;
  m.overlap_pct = m.comm_ns > 0 ? 100.0 * static_cast<double>(m.overlap_ns) / m.comm_ns : 0;
  return m;
}

}  // namespace

Metrics compute_metrics(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                        const MetricsOptions& opt) {
  Metrics out;
  for (const auto& [r, t] : run.ranks) {
    const Ns off = clocks.offset(r);
    if (opt.step < 0) {
      Ns lo = INT64_MAX, hi = INT64_MIN;
      for (const Kernel& k : t.kernels) lo = std::min(lo, k.start), hi = std::max(hi, k.end);
      for (const Memcpy& c : t.memcpys) lo = std::min(lo, c.start), hi = std::max(hi, c.end);
      if (lo <= hi) {
        RankMetrics m = window_metrics(t, off, lo + off, hi + off);
        m.step = -1;
        out.ranks.push_back(m);
      }
    }
    for (const Step& s : t.steps) {
      if (opt.step >= 0 && s.step != opt.step) continue;
      RankMetrics m = window_metrics(t, off, s.start + off, s.end + off);
      m.step = s.step;
      out.ranks.push_back(m);
    }
    // Kernel breakdown.
    std::map<StrId, KernelStat> by_name;
    auto& cats = out.category_ns[r];
    for (const Kernel& k : t.kernels) {
      if (opt.step >= 0) {
        bool in = false;
        for (const Step& s : t.steps)
          in = in || (s.step == opt.step && k.start >= s.start && k.start < s.end);
        if (!in) continue;
      }
      Ns d = k.end - k.start;
      KernelStat& ks = by_name[k.name];
      if (ks.count == 0) {
        ks.rank = r;
        ks.name = run.str(k.name);
        ks.category = k.category;
        ks.min_ns = d;
      }
      ++ks.count;
      ks.total_ns += d;
      ks.min_ns = std::min(ks.min_ns, d);
      ks.max_ns = std::max(ks.max_ns, d);
      cats[k.category] += d;
    }
    std::vector<KernelStat> v;
    for (auto& [_, ks] : by_name) v.push_back(std::move(ks));
    std::sort(v.begin(), v.end(), [](const KernelStat& a, const KernelStat& b) {
      return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
    });
    if (static_cast<int>(v.size()) > opt.top_kernels) v.resize(opt.top_kernels);
    for (auto& ks : v) out.kernels.push_back(std::move(ks));
  }

  for (size_t g = 0; g < match.groups.size(); ++g) {
    const CollGroup& grp = match.groups[g];
    CollectiveMetrics cm;
    cm.group = static_cast<int>(g);
    cm.comm = grp.comm;
    cm.seq = grp.seq;
    cm.op = grp.op;
    cm.bytes = grp.bytes;
    cm.nranks = group_nranks(run, grp);
    cm.complete = grp.complete() && !grp.mismatched;
    cm.first_arrival = INT64_MAX;
    cm.last_arrival = INT64_MIN;
    cm.end = INT64_MIN;
    for (const CollRef& m : grp.members) {
      const Collective& c = run.ranks.at(m.rank).collectives[m.index];
      const Ns off = clocks.offset(m.rank);
      MemberTiming mt{m.rank, c.start + off, c.end + off, 0};
      cm.members.push_back(mt);
      cm.first_arrival = std::min(cm.first_arrival, mt.arrival);
      if (mt.arrival > cm.last_arrival) cm.last_arrival = mt.arrival, cm.late_rank = m.rank;
      cm.end = std::max(cm.end, mt.end);
    }
    if (grp.members.size() < 2) cm.late_rank = -1;
    for (MemberTiming& mt : cm.members) mt.wait_ns = cm.last_arrival - mt.arrival;
    cm.wait_ns = cm.last_arrival - cm.first_arrival;
    cm.transfer_ns = std::max<Ns>(0, cm.end - cm.last_arrival);
    if (cm.bytes > 0 && cm.transfer_ns > 0) {
      cm.algbw_gbps = algbw_gbps(cm.bytes, cm.transfer_ns);
      cm.busbw_gbps = busbw_gbps(cm.op, cm.nranks, cm.bytes, cm.transfer_ns);
    }
    const RankTrace& t0 = run.ranks.at(grp.members[0].rank);
    const Collective& c0 = t0.collectives[grp.members[0].index];
    for (const Step& s : t0.steps)
      if (c0.start >= s.start && c0.start < s.end) cm.step = s.step;
    if (opt.step >= 0 && cm.step != opt.step) continue;
    out.collectives.push_back(std::move(cm));
  }
  return out;
}

}  // namespace braid::analysis

#include "analysis/metrics.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "analysis/cost_model.h"

namespace braid::analysis {

namespace {
// Above this many sorted runs merge_intervals sorts instead of merging the runs.
constexpr size_t kMaxSortedRuns = 16;
}  // namespace

Ns merge_intervals(std::vector<Interval>& v) {
  // Intervals come a stream at a time, each stream in start order: a few sorted runs, merged
  // into one (linear per run) where sorting them all would cost n log n; else sorted.
  auto by_start = [](const Interval& a, const Interval& b) { return a.start < b.start; };
  std::vector<size_t> runs;  // where each sorted run after the first begins
  for (size_t i = 1; i < v.size() && runs.size() <= kMaxSortedRuns; ++i)
    if (v[i].start < v[i - 1].start) runs.push_back(i);
  if (runs.size() > kMaxSortedRuns) {
    std::sort(v.begin(), v.end(), by_start);
  } else {
    for (size_t k = 0; k < runs.size(); ++k) {
      const size_t end = k + 1 < runs.size() ? runs[k + 1] : v.size();
      std::inplace_merge(v.begin(), v.begin() + static_cast<ptrdiff_t>(runs[k]),
                         v.begin() + static_cast<ptrdiff_t>(end), by_start);
    }
  }
  // Merged in place: each interval joins the last one kept when it starts before that ends.
  size_t kept = 0;
  for (const Interval& i : v) {
    if (i.end <= i.start) continue;
    if (kept && i.start <= v[kept - 1].end)
      v[kept - 1].end = std::max(v[kept - 1].end, i.end);
    else
      v[kept++] = i;
  }
  v.resize(kept);
  v.shrink_to_fit();
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

// GPU activity of one rank selected for a row, on the job axis.
struct Activity {
  std::vector<Interval> comp, comm, mem;
  int64_t kernels = 0;
  Ns lo = INT64_MAX, hi = INT64_MIN;
  // Room for the kernels `ids` picks of `kernels` (all when null: a rank's million, no growth's
  // copies) and `copies` copies.
  void reserve(const std::vector<Kernel>& kernels, const std::vector<int32_t>* ids, size_t copies) {
    size_t n = 0, n_comm = 0;
    auto count = [&](const Kernel& k) {
      ++n;
      n_comm += time_class(k.category) == TimeClass::Comm;
    };
    if (ids)
      for (int32_t i : *ids) count(kernels[static_cast<size_t>(i)]);
    else
      for (const Kernel& k : kernels) count(k);
    comp.reserve(n - n_comm);
    comm.reserve(n_comm);
    mem.reserve(copies);
  }
  void add(Interval i, TimeClass c) {
    lo = std::min(lo, i.start);
    hi = std::max(hi, i.end);
    (c == TimeClass::Comm ? comm : c == TimeClass::Memory ? mem : comp).push_back(i);
  }
};

// The length of the union of merged lists (each sorted and disjoint), walked together by start:
// the busy time from the three classes' merged lists, instead of a fourth list of every interval
// (a rank's million, sorted again).
Ns union_length(const std::vector<const std::vector<Interval>*>& lists) {
  std::vector<size_t> at(lists.size(), 0);
  Ns total = 0, lo = 0, hi = 0;
  bool open = false;
  for (;;) {
    const Interval* next = nullptr;
    size_t from = 0;
    for (size_t k = 0; k < lists.size(); ++k)
      if (at[k] < lists[k]->size() && (!next || (*lists[k])[at[k]].start < next->start))
        next = &(*lists[k])[at[k]], from = k;
    if (!next) break;
    ++at[from];
    if (open && next->start <= hi) {
      hi = std::max(hi, next->end);
      continue;
    }
    if (open) total += hi - lo;
    lo = next->start, hi = next->end, open = true;
  }
  return open ? total + (hi - lo) : total;
}

RankMetrics row_metrics(int32_t rank, Activity& a, Ns lo, Ns hi) {
  RankMetrics m;
  m.rank = rank;
  m.kernels = a.kernels;
  m.start = lo;
  m.end = hi;
  m.compute_ns = merge_intervals(a.comp);
  m.comm_ns = merge_intervals(a.comm);
  m.memory_ns = merge_intervals(a.mem);
  m.busy_ns = union_length({&a.comp, &a.comm, &a.mem});
  m.idle_ns = m.span() - m.busy_ns;
  m.non_compute_ns = m.span() - m.compute_ns - m.idle_ns;
  m.overlap_ns = intersect_length(a.comm, a.comp);
  m.exposed_comm_ns = m.comm_ns - m.overlap_ns;
  m.overlap_pct = m.comm_ns > 0 ? 100.0 * static_cast<double>(m.overlap_ns) / m.comm_ns : 0;
  return m;
}

}  // namespace

// Binary search: a collective costs the intervals it overlaps, not the rank's whole list.
Ns uncovered(Ns a, Ns b, const std::vector<Interval>& cover) {
  auto it = std::upper_bound(cover.begin(), cover.end(), a,
                             [](Ns t, const Interval& i) { return t < i.end; });
  Ns covered = 0;
  for (; it != cover.end() && it->start < b; ++it)
    covered += std::min(b, it->end) - std::max(a, it->start);
  return (b - a) - covered;
}

namespace {

constexpr Ns kUs = 1000;
Ns ceil_us(Ns t) { return t >= 0 ? (t + kUs - 1) / kUs * kUs : -((-t) / kUs * kUs); }
Ns floor_us(Ns t) { return t >= 0 ? t / kUs * kUs : -((-t + kUs - 1) / kUs * kUs); }

// HTA's default window (TraceAnalysis without include_last_profiler_step): GPU activity counts
// only when the runtime call that launched it is in the trace and started before the last
// ProfilerStep did (with one step: before it ended; with none: any launch). Times are rounded
// as HTA's parser rounds fractional-µs traces: start up to, end down to whole µs.
struct HtaWindow {
  bool filter = false;  // false: the rank has no launch calls (HTA keeps everything then)
  Ns cutoff = INT64_MAX;
  bool inclusive = false;
  bool keeps(const RankTrace& t, int64_t correlation) const {
    if (!filter) return true;
    Ns l = t.launch_of(correlation);
    if (l < 0) return false;
    l = ceil_us(l);
    return inclusive ? l <= cutoff : l < cutoff;
  }
};

HtaWindow hta_window(const RankTrace& t) {
  HtaWindow w;
  w.filter = !t.launches.empty();
  if (t.steps.size() >= 2) {
    Ns last = INT64_MIN;
    for (const Step& s : t.steps) last = std::max(last, s.start);
    w.cutoff = ceil_us(last);
  } else if (t.steps.size() == 1) {
    w.cutoff = floor_us(t.steps[0].end);
    w.inclusive = true;
  }
  return w;
}

}  // namespace

std::map<int64_t, Ns> step_spans(const Metrics& m) {
  std::map<int64_t, std::pair<Ns, Ns>> w;
  for (const RankMetrics& r : m.ranks) {
    if (r.step < 0) continue;
    auto [it, fresh] = w.emplace(r.step, std::make_pair(r.start, r.end));
    if (!fresh) {
      it->second.first = std::min(it->second.first, r.start);
      it->second.second = std::max(it->second.second, r.end);
    }
  }
  std::map<int64_t, Ns> out;
  for (auto& [s, v] : w) out[s] = v.second - v.first;
  return out;
}

std::map<int32_t, LateRank> late_ranks(const Metrics& m) {
  std::map<int32_t, LateRank> out;
  for (const CollectiveMetrics& c : m.collectives)
    if (c.late_rank >= 0 && c.complete) {
      ++out[c.late_rank].count;
      out[c.late_rank].waited_ns += c.wait_ns;
    }
  return out;
}

namespace {

// The indexes of `items` by their step (`step_of`), in their order, for the steps `wanted`.
template <typename T, typename StepOf, typename Wanted>
std::map<int64_t, std::vector<int32_t>> by_step(const std::vector<T>& items, const StepOf& step_of,
                                                const Wanted& wanted) {
  std::map<int64_t, std::vector<int32_t>> out;
  for (int32_t i = 0; i < static_cast<int32_t>(items.size()); ++i)
    if (const int64_t st = step_of(items[i]); wanted(st)) out[st].push_back(i);
  return out;
}

}  // namespace

std::vector<Interval> add_rank_metrics(const RunData& run, int32_t r, const ClockFit& clocks,
                                       const MetricsOptions& opt, Metrics& out) {
  const RankTrace& t = run.ranks.at(r);
  const Ns off = clocks.offset(r);
  // The merged computation intervals on the job axis (collective exposure): the whole run's
  // row's, when it has one on that axis.
  std::vector<Interval> comp;
  bool have_comp = false;
  if (opt.step < 0) {
    Activity a;
    a.reserve(t.kernels, nullptr, t.memcpys.size());
    HtaWindow hw;
    if (opt.hta_compat) hw = hta_window(t);
    auto place = [&](Ns s, Ns e) {
      return opt.hta_compat ? Interval{ceil_us(s) + off, floor_us(e) + off}
                            : Interval{s + off, e + off};
    };
    for (const Kernel& k : t.kernels) {
      if (opt.hta_compat && !hw.keeps(t, k.correlation)) continue;
      a.add(place(k.start, k.end), time_class(k.category));
      ++a.kernels;
    }
    for (const Memcpy& c : t.memcpys)
      if (!opt.hta_compat || hw.keeps(t, c.correlation))
        a.add(place(c.start, c.end), TimeClass::Memory);
    if (a.lo <= a.hi) {
      RankMetrics m = row_metrics(r, a, a.lo, a.hi);
      m.step = -1;
      for (const Collective& c : t.collectives)
        if (c.start + off >= a.lo && c.start + off < a.hi) ++m.collectives;
      out.ranks.push_back(m);
    }
    if (!opt.hta_compat) {  // every compute kernel, unrounded, merged by row_metrics
      comp = std::move(a.comp);
      have_comp = true;
    }
  }
  if (!have_comp) {
    for (const Kernel& k : t.kernels)
      if (time_class(k.category) == TimeClass::Compute)
        comp.push_back({k.start + off, k.end + off});
    merge_intervals(comp);
  }
  // Step rows: the GPU work each step launched, over its own span (the step's host window
  // when it launched none).
  // Each activity's step is found once (by_step), not once per step.
  auto wanted = [&](int64_t st) { return st >= 0 && (opt.step < 0 || st == opt.step); };
  const auto kernels_in = by_step(
      t.kernels, [&](const Kernel& k) { return t.kernel_step(k); }, wanted);
  const auto copies_in = by_step(
      t.memcpys, [&](const Memcpy& c) { return t.memcpy_step(c); }, wanted);
  const auto colls_in = by_step(
      t.collectives, [&](const Collective& c) { return t.collective_step(c); }, wanted);
  for (const Step& s : t.steps) {
    if (opt.step >= 0 && s.step != opt.step) continue;
    Activity a;
    auto it = kernels_in.find(s.step);
    auto copies = copies_in.find(s.step);
    if (it != kernels_in.end()) {
      a.reserve(t.kernels, &it->second, copies == copies_in.end() ? 0 : copies->second.size());
      for (int32_t i : it->second) {
        const Kernel& k = t.kernels[i];
        a.add({k.start + off, k.end + off}, time_class(k.category));
        ++a.kernels;
      }
    }
    if (copies != copies_in.end())
      for (int32_t i : copies->second)
        a.add({t.memcpys[i].start + off, t.memcpys[i].end + off}, TimeClass::Memory);
    RankMetrics m = a.lo <= a.hi ? row_metrics(r, a, a.lo, a.hi)
                                 : row_metrics(r, a, s.start + off, s.end + off);
    m.step = s.step;
    if (auto it = colls_in.find(s.step); it != colls_in.end())
      m.collectives = static_cast<int64_t>(it->second.size());
    out.ranks.push_back(m);
  }
  // Kernel breakdown.
  std::unordered_map<StrId, KernelStat> by_name;  // ordered below
  std::array<Ns, 256> cats{};                     // by Category
  std::array<bool, 256> seen{};
  for (const Kernel& k : t.kernels) {
    if (opt.step >= 0 && t.kernel_step(k) != opt.step) continue;
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
    const auto c = static_cast<uint8_t>(k.category);
    cats[c] += d;
    seen[c] = true;
  }
  auto& by_category = out.category_ns[r];
  for (size_t c = 0; c < cats.size(); ++c)
    if (seen[c]) by_category[static_cast<Category>(c)] += cats[c];
  std::vector<KernelStat> v;
  for (auto& [_, ks] : by_name) v.push_back(std::move(ks));
  std::sort(v.begin(), v.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  if (static_cast<int>(v.size()) > opt.top_kernels) v.resize(opt.top_kernels);
  for (auto& ks : v) out.kernels.push_back(std::move(ks));
  return comp;
}

void add_collective_metrics(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                            const MetricsOptions& opt, Metrics& out) {
  if (opt.step < 0) out.collectives.reserve(out.collectives.size() + match.groups.size());
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
    cm.members.reserve(grp.members.size());
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
    cm.step = t0.collective_step(t0.collectives[grp.members[0].index]);
    if (opt.step >= 0 && cm.step != opt.step) continue;
    out.collectives.push_back(std::move(cm));
  }
}

std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> members_by_rank(const Metrics& m) {
  std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> out;
  for (size_t i = 0; i < m.collectives.size(); ++i)
    for (size_t j = 0; j < m.collectives[i].members.size(); ++j)
      out[m.collectives[i].members[j].rank].push_back(
          {static_cast<int32_t>(i), static_cast<int32_t>(j)});
  return out;
}

namespace {

// The member's exposure: of [arrival, end], what its rank's computation leaves uncovered.
void expose(CollectiveMetrics& cm, MemberTiming& mt, const std::vector<Interval>& computation) {
  mt.exposed_ns = uncovered(mt.arrival, std::max(mt.arrival, mt.end), computation);
  cm.exposed_ns += mt.exposed_ns;
}

}  // namespace

void add_exposure(Metrics& m, const std::vector<std::pair<int32_t, int32_t>>& members,
                  const std::vector<Interval>& computation) {
  for (auto [i, j] : members) {
    CollectiveMetrics& cm = m.collectives[static_cast<size_t>(i)];
    expose(cm, cm.members[static_cast<size_t>(j)], computation);
  }
}

Metrics compute_metrics(const RunData& run, const MatchResult& match, const ClockFit& clocks,
                        const MetricsOptions& opt) {
  Metrics out;
  std::map<int32_t, std::vector<Interval>> computation;
  for (const auto& [r, t] : run.ranks)
    if (!opt.holds || opt.holds(r)) computation[r] = add_rank_metrics(run, r, clocks, opt, out);
  add_collective_metrics(run, match, clocks, opt, out);
  // Members' exposure for the ranks held (0 for the others: their holder adds it).
  for (CollectiveMetrics& cm : out.collectives)
    for (MemberTiming& mt : cm.members)
      if (auto it = computation.find(mt.rank); it != computation.end()) expose(cm, mt, it->second);
  return out;
}

}  // namespace braid::analysis

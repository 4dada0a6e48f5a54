#include "app/view/core/loader.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "analysis/clock.h"
#include "analysis/run_data.h"
#include "trace/diagnostics.h"
#include "trace/error.h"

namespace braid::view {
namespace {

// Lanes by (rank, stream), created on first use. Events are collected per lane and split into
// rows once everything is read.
class LaneBuilder {
 public:
  explicit LaneBuilder(ViewRun& d) : d_(d) {}

  // The name the file gives a stream or thread (`streams` table), used when its lane is made:
  // only threads and streams with events get a lane.
  void name(int32_t rank, int64_t stream, bool gpu, const std::string& label) {
    if (!label.empty()) names_[std::make_tuple(rank, stream, gpu)] = label;
  }

  int lane(int32_t rank, int64_t stream, bool gpu, const std::string& label = "") {
    auto key = std::make_tuple(rank, stream, gpu);
    if (key == last_key_ && last_ >= 0) return last_;
    auto it = index_.find(key);
    int i;
    if (it == index_.end()) {
      i = static_cast<int>(d_.lanes.size());
      Lane l;
      l.rank = rank;
      l.stream = stream;
      l.gpu = gpu;
      l.label = label;
      if (l.label.empty())
        if (auto n = names_.find(key); n != names_.end()) l.label = n->second;
      d_.lanes.push_back(std::move(l));
      events_.emplace_back();
      index_.emplace(key, i);
    } else {
      i = it->second;
    }
    last_key_ = key;
    last_ = i;
    return i;
  }
  std::vector<Event>& events(int lane) { return events_[lane]; }
  size_t lane_count() const { return events_.size(); }

 private:
  ViewRun& d_;
  // A CPU thread id may equal a CUDA stream id of the same rank: the key says which it is.
  std::map<std::tuple<int32_t, int64_t, bool>, int> index_;
  std::map<std::tuple<int32_t, int64_t, bool>, std::string> names_;
  std::tuple<int32_t, int64_t, bool> last_key_{-1, -1, false};
  int last_ = -1;
  std::vector<std::vector<Event>> events_;
};

// Splits events sorted by (start, end descending) into rows of non-overlapping events: an
// event goes to the first row that is free at its start, so enclosing ranges sit above what
// they enclose. Returns how many events had to be shortened to fit (pathological overlap).
int64_t assign_rows(std::vector<Event>&& ev, std::vector<Row>& rows) {
  constexpr size_t kMaxRows = 64;
  bool overlap = false;
  for (size_t i = 1; i < ev.size() && !overlap; ++i) overlap = ev[i].start < ev[i - 1].end;
  if (!overlap) {
    rows.emplace_back();
    rows.back().events = std::move(ev);
    return 0;
  }
  int64_t clamped = 0;
  std::vector<Ns> last_end;
  for (const Event& e : ev) {
    size_t r = 0;
    while (r < last_end.size() && last_end[r] > e.start) ++r;
    Event x = e;
    if (r == last_end.size()) {
      if (r < kMaxRows) {
        rows.emplace_back();
        last_end.push_back(x.start);
      } else {
        r = static_cast<size_t>(std::min_element(last_end.begin(), last_end.end()) -
                                last_end.begin());
        x.start = last_end[r];
        ++clamped;
        if (x.end <= x.start) continue;
      }
    }
    rows[r].events.push_back(x);
    last_end[r] = x.end;
  }
  return clamped;
}

bool by_start(const Event& a, const Event& b) {
  return a.start != b.start ? a.start < b.start : a.end > b.end;
}

void fill_density(ViewRun& d) {
  double span = static_cast<double>(std::max<Ns>(1, d.end - d.start));
  double bin = span / kOverviewBins;
  for (Lane& l : d.lanes) {
    l.density.assign(kOverviewBins, 0.f);
    if (l.rows.empty()) continue;
    // Row 0 holds the outermost events: its busy time is the lane's.
    for (const Event& e : l.rows[0].events) {
      double a = static_cast<double>(e.start - d.start) / bin;
      double b = static_cast<double>(e.end - d.start) / bin;
      int ia = std::clamp(static_cast<int>(a), 0, kOverviewBins - 1);
      int ib = std::clamp(static_cast<int>(b), 0, kOverviewBins - 1);
      for (int i = ia; i <= ib; ++i) {
        double lo = std::max(a, static_cast<double>(i)), hi = std::min(b, i + 1.0);
        if (hi > lo) l.density[i] += static_cast<float>(hi - lo);
      }
    }
    for (float& v : l.density) v = std::min(v, 1.f);
  }
  d.gpu_density.assign(kOverviewBins, 0.f);
  int gpu_lanes = 0;
  for (const Lane& l : d.lanes)
    if (l.gpu) {
      ++gpu_lanes;
      for (int i = 0; i < kOverviewBins; ++i) d.gpu_density[i] += l.density[i];
    }
  if (gpu_lanes)
    for (float& v : d.gpu_density) v /= static_cast<float>(gpu_lanes);
}

}  // namespace

// Why one function of ~300 lines (docs/architecture.md, "Long functions"): it is the order in
// which a run's data is moved, not copied, from the analysis load into the view's lanes, each
// rank's analysis data freed as soon as its events are in lanes, so the loader never holds two
// copies of a large run (bench/check_memory.sh, docs/BENCHMARKS.md). Split into steps, each
// step would hand over the same partly-moved state; the per-lane work is in the helpers above.
std::shared_ptr<ViewRun> load_view_run(const std::string& path, int64_t run_id,
                                       LoadProgress* progress) {
  TraceReader reader(path);
  auto d = std::make_shared<ViewRun>();
  d->path = path;
  bool found = false;
  std::string ids;
  for (const RunRow& r : reader.runs()) {
    if (r.run_id == run_id) {
      d->run = r;
      found = true;
    }
    ids += (ids.empty() ? "" : ", ") + std::to_string(r.run_id);
  }
  if (!found)
    throw Error(ErrorCode::NotFound,
                path + ": no run " + std::to_string(run_id) +
                    (ids.empty() ? " (the file has no runs)" : " (runs: " + ids + ")"));
  d->ranks = reader.ranks(run_id);
  d->communicators = reader.communicators(run_id);
  d->diagnostics = reader.diagnostics(run_id);
  d->strings = reader.strings();
  std::unordered_map<int32_t, Ns> offset;
  for (const RankInfo& r : d->ranks) offset[r.rank] = r.clock_offset;
  auto off = [&](int32_t rank) {
    auto it = offset.find(rank);
    return it == offset.end() ? Ns{0} : it->second;
  };

  // The API calls are read twice: by the analysis load (launches and synchronizations) and
  // below for the CPU lanes.
  const TraceReader::Counts n = reader.counts(run_id);
  const int64_t total =
      n.kernels + n.memcpys + n.memsets + n.collectives + 2 * n.api_calls + n.ranges;
  if (progress) progress->total = std::max<int64_t>(1, total);
  auto cancelled = [&] { return Error(ErrorCode::Internal, path + ": loading cancelled"); };

  // Kernels, memcpys, collectives and steps come from the analysis component's load, and the
  // matching and the metrics are computed by it on that load, so the window and `braid
  // analyze` show the same numbers (analysis/metrics.h).
  analysis::RunData a;
  try {
    a = analysis::load_run(reader, run_id, [&](int64_t rows) {
      if (progress) progress->done = rows;
      return !(progress && progress->cancel);
    });
  } catch (const Error&) {
    if (progress && progress->cancel) throw cancelled();
    throw;
  }
  int64_t done = progress ? progress->done.load() : 0;
  auto tick = [&] {
    if (progress && (++done & 4095) == 0) {
      progress->done = done;
      if (progress->cancel) throw cancelled();
    }
  };

  // Cross-rank matching and metrics, as `braid analyze` computes them, on the clock offsets the
  // file holds (those `braid analyze` solved, once it has run).
  analysis::MatchResult match = analysis::match_trace_collectives(a);
  d->metrics = analysis::compute_metrics(a, match, analysis::stored_clocks(a));

  // Collectives are numbered rank by rank in the analysis load's order, so a collective of the
  // analysis (rank, index) is ViewRun::colls[first_coll[rank] + index]. Moved out of the
  // analysis load once the metrics are computed, and what only the metrics needed (launch
  // calls, synchronizations) freed with them: the load never holds two copies of them.
  std::map<int32_t, int32_t> first_coll;
  size_t coll_count = 0;
  for (const auto& [rank, t] : a.ranks) coll_count += t.collectives.size();
  d->colls.reserve(coll_count);
  for (auto& [rank, t] : a.ranks) {
    const Ns o = off(rank);
    first_coll[rank] = static_cast<int32_t>(d->colls.size());
    for (Collective& c : t.collectives) {
      CollRec r;
      r.c = std::move(c);
      r.c.start += o;
      r.c.end += o;
      if (r.c.enqueue >= 0) r.c.enqueue += o;
      d->colls.push_back(std::move(r));
    }
    std::vector<Collective>().swap(t.collectives);
    std::vector<analysis::SyncCall>().swap(t.syncs);
    t.launches.clear();
  }
  std::vector<int32_t> metrics_of(match.groups.size(), -1);
  for (size_t i = 0; i < d->metrics.collectives.size(); ++i)
    metrics_of[d->metrics.collectives[i].group] = static_cast<int32_t>(i);
  for (size_t g = 0; g < match.groups.size(); ++g) {
    const analysis::CollGroup& grp = match.groups[g];
    if (grp.members.empty()) continue;
    Match m;
    m.order = grp.seq;
    m.op = grp.op;
    m.metrics = metrics_of[g];
    m.latest_start = INT64_MIN;
    m.earliest_end = INT64_MAX;
    m.latest_end = INT64_MIN;
    for (const analysis::CollRef& ref : grp.members) {
      auto ci = first_coll.at(ref.rank) + ref.index;
      CollRec& r = d->colls[ci];
      m.comm = r.c.comm;
      m.members.push_back(ci);
      m.latest_start = std::max(m.latest_start, r.c.start);
      m.earliest_end = std::min(m.earliest_end, r.c.end);
      m.latest_end = std::max(m.latest_end, r.c.end);
      r.match = static_cast<int32_t>(d->matches.size());
    }
    d->matches.push_back(std::move(m));
  }
  match = analysis::MatchResult();

  // The lanes, rank by rank, each rank's analysis data freed once its events are in lanes (the
  // two never both hold the whole run).
  LaneBuilder lanes(*d);
  for (const StreamInfo& s : reader.streams(run_id)) lanes.name(s.rank, s.stream, s.gpu, s.label);
  std::map<int32_t, std::vector<Step>> steps;
  for (auto& [rank, t] : a.ranks) {
    const Ns o = off(rank);
    for (const Kernel& k : t.kernels)
      lanes.events(lanes.lane(rank, k.stream, true))
          .push_back({k.start + o, k.end + o, k.name, static_cast<uint8_t>(k.category),
                      EventKind::Kernel, 0, -1});
    std::vector<Kernel>().swap(t.kernels);
    for (const Memcpy& m : t.memcpys)
      lanes.events(lanes.lane(rank, m.stream, true))
          .push_back({m.start + o, m.end + o, m.name, static_cast<uint8_t>(Category::Memory),
                      EventKind::Memcpy, static_cast<uint16_t>(m.kind), -1});
    std::vector<Memcpy>().swap(t.memcpys);
    steps[rank] = std::move(t.steps);
  }
  a = analysis::RunData();
  reader.api_calls(run_id, [&](const ApiCall& c) {
    Ns o = off(c.rank);
    lanes.events(lanes.lane(c.rank, c.tid, false))
        .push_back({c.start + o, c.end + o, c.name, kCategoryCpu, EventKind::CpuCall,
                    static_cast<uint16_t>(c.kind), -1});
    tick();
    return true;
  });
  reader.ranges(run_id, [&](const Range& r) {
    Ns o = off(r.rank);
    lanes.events(lanes.lane(r.rank, r.stream, r.on_gpu))
        .push_back(
            {r.start + o, r.end + o, r.name, kCategoryAnnotation, EventKind::Annotation, 0, -1});
    tick();
    return true;
  });

  for (size_t i = 0; i < lanes.lane_count(); ++i) {
    auto& ev = lanes.events(static_cast<int>(i));
    if (!std::is_sorted(ev.begin(), ev.end(), by_start))
      std::stable_sort(ev.begin(), ev.end(), by_start);
  }

  // A collective is drawn as the communication kernel that carried it; one without a kernel
  // (CPU-side times, or a kernel the trace lacks) becomes an event of its own.
  for (size_t ci = 0; ci < d->colls.size(); ++ci) {
    const Collective& c = d->colls[ci].c;
    bool attached = false;
    if (c.stream >= 0) {
      auto& ev = lanes.events(lanes.lane(c.rank, c.stream, true));
      auto it = std::lower_bound(ev.begin(), ev.end(), c.start,
                                 [](const Event& e, Ns t) { return e.start < t; });
      // Prefer the kernel starting exactly with the collective, else the first one inside it.
      for (; it != ev.end() && it->start < std::max(c.end, c.start + 1); ++it) {
        if (it->kind == EventKind::Kernel && it->coll < 0 &&
            is_comm(static_cast<Category>(it->category))) {
          it->coll = static_cast<int32_t>(ci);
          attached = true;
          break;
        }
      }
    }
    if (!attached) {
      int lane = c.stream >= 0 ? lanes.lane(c.rank, c.stream, true)
                               : lanes.lane(c.rank, -1, false, "collectives (host)");
      Event e{c.start,
              std::max(c.end, c.start),
              c.name,
              static_cast<uint8_t>(comm_category(c.op)),
              EventKind::Collective,
              0,
              static_cast<int32_t>(ci)};
      auto& ev = lanes.events(lane);
      ev.insert(std::upper_bound(ev.begin(), ev.end(), e, by_start), e);
    }
  }

  // Each rank's steps (the `steps` table) in a lane of their own, first in the rank.
  {
    std::map<int64_t, StrId> step_names;
    for (const auto& [rank, rank_steps] : steps) {
      if (rank_steps.empty()) continue;
      auto& ev = lanes.events(lanes.lane(rank, kStepsLane, false, "steps"));
      for (const Step& s : rank_steps) {
        auto [it, fresh] = step_names.emplace(s.step, static_cast<StrId>(d->strings.size()));
        if (fresh) d->strings.push_back("step " + std::to_string(s.step));
        Ns o = off(rank);
        ev.push_back({s.start + o, std::max(s.end, s.start) + o, it->second, kCategoryStep,
                      EventKind::Step, 0, -1});
      }
      std::stable_sort(ev.begin(), ev.end(), by_start);
    }
  }

  int64_t clamped = 0;
  d->start = d->gpu_start = INT64_MAX;
  d->end = d->gpu_end = INT64_MIN;
  for (size_t i = 0; i < lanes.lane_count(); ++i) {
    Lane& l = d->lanes[i];
    auto& ev = lanes.events(static_cast<int>(i));
    l.event_count = static_cast<int64_t>(ev.size());
    if (l.stream != kStepsLane) d->event_count += l.event_count;  // events the file stores
    for (const Event& e : ev) {
      d->start = std::min(d->start, e.start);
      d->end = std::max(d->end, e.end);
      if (e.kind == EventKind::Kernel || e.kind == EventKind::Memcpy ||
          (e.kind == EventKind::Collective && l.gpu)) {
        d->gpu_start = std::min(d->gpu_start, e.start);
        d->gpu_end = std::max(d->gpu_end, e.end);
      }
    }
    clamped += assign_rows(std::move(ev), l.rows);
    std::vector<Event>().swap(ev);
  }
  if (d->start > d->end) d->start = d->end = 0;
  if (d->gpu_start > d->gpu_end) {
    d->gpu_start = d->start;
    d->gpu_end = d->end;
  }
  if (clamped > 0)
    d->diagnostics.push_back(diag::make(diag::Code::view_overlap_clamped, clamped,
                                        "events shortened to fit 64 rows of overlapping events"));
  for (size_t li = 0; li < d->lanes.size(); ++li)
    for (size_t ri = 0; ri < d->lanes[li].rows.size(); ++ri) {
      const auto& ev = d->lanes[li].rows[ri].events;
      for (size_t k = 0; k < ev.size(); ++k)
        if (ev[k].coll >= 0) {
          CollRec& r = d->colls[ev[k].coll];
          r.lane = static_cast<int32_t>(li);
          r.row = static_cast<int32_t>(ri);
          r.index = static_cast<int64_t>(k);
        }
    }

  // Lanes grouped per rank: GPU streams by stream id, then host lanes.
  std::map<int32_t, std::vector<int>> by_rank;
  for (size_t i = 0; i < d->lanes.size(); ++i)
    by_rank[d->lanes[i].rank].push_back(static_cast<int>(i));
  for (auto& [rank, ls] : by_rank) {
    std::sort(ls.begin(), ls.end(), [&](int a, int b) {
      const Lane &x = d->lanes[a], &y = d->lanes[b];
      bool xs = !x.gpu && x.stream == kStepsLane, ys = !y.gpu && y.stream == kStepsLane;
      if (xs != ys) return xs;
      if (x.gpu != y.gpu) return x.gpu;
      return x.stream < y.stream;
    });
    RankGroup g;
    g.info.rank = rank;
    for (const RankInfo& r : d->ranks)
      if (r.rank == rank) g.info = r;
    g.lanes = ls;
    d->groups.push_back(std::move(g));
  }
  for (Lane& l : d->lanes)
    if (l.label.empty())
      l.label = l.gpu ? "stream " + std::to_string(l.stream) : "thread " + std::to_string(l.stream);

  // The capture window (a capture with --window): a window stored as it opened (a capture
  // killed before its first cycle) ends with the run's events.
  {
    Ns lo = INT64_MAX, hi = INT64_MIN;
    for (const CaptureWindow& w : reader.capture_windows(run_id)) {
      Ns o = off(w.rank);
      lo = std::min(lo, w.start + o);
      hi = std::max(hi, std::max(w.end, w.start) + o);
    }
    if (lo < INT64_MAX) {
      d->window_start = lo;
      d->window_end = hi > lo ? hi : std::max(lo, d->end);
    }
  }

  for (const auto& [rank, rank_steps] : steps)
    for (Step s : rank_steps) {
      Ns o = off(rank);
      s.start += o;
      s.end += o;
      d->steps.push_back(s);
    }
  fill_density(*d);
  if (progress) progress->done = progress->total.load();
  return d;
}

BackgroundLoad::BackgroundLoad(std::string path, int64_t run_id,
                               std::function<void(const ViewRun&)> derive)
    : path_(std::move(path)), run_id_(run_id) {
  thread_ = std::thread([this, derive = std::move(derive)] {
    try {
      auto d = load_view_run(path_, run_id_, &progress_);
      if (derive) derive(*d);
      std::lock_guard<std::mutex> lock(mu_);
      data_ = std::move(d);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = e.what();
    }
    finished_ = true;
  });
}

BackgroundLoad::~BackgroundLoad() {
  progress_.cancel = true;
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<ViewRun> BackgroundLoad::result() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_;
}

std::string BackgroundLoad::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace braid::view

#include "app/view/core/loader.h"

#include <malloc.h>

#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "analysis/clock.h"
#include "analysis/metrics.h"
#include "analysis/run_data.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/sqlite_util.h"

namespace braid::view {
namespace {

// Splits events sorted by (start, end descending) into rows of non-overlapping events: an
// event goes to the first row that is free at its start, so enclosing ranges sit above what
// they enclose. Returns how many events had to be shortened to fit (pathological overlap).
int64_t assign_rows(std::vector<Event>&& ev, std::vector<Row>& rows) {
  constexpr size_t kMaxRows = 64;
  bool overlap = false;
  for (size_t i = 1; i < ev.size() && !overlap; ++i) overlap = ev[i].start < ev[i - 1].end;
  if (!overlap) {
    rows.emplace_back();
    rows.back().reserve(ev.size());
    for (const Event& e : ev) rows.back().push(e);
    std::vector<Event>().swap(ev);
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
    rows[r].push(x);
    last_end[r] = x.end;
  }
  return clamped;
}

// A kernel's or a copy's event, on the job axis (`o`: its rank's clock offset).
Event lane_event(const Kernel& k, Ns o) {
  return {k.start + o, k.end + o, k.name, static_cast<uint8_t>(k.category)};
}
Event lane_event(const Memcpy& m, Ns o) {
  return {m.start + o, m.end + o, m.name, memcpy_category(m.kind)};
}

bool by_start(const Event& a, const Event& b) {
  return a.start != b.start ? a.start < b.start : a.end > b.end;
}

// The lane's busy fraction per bin of [start, end) (the overview strip).
void fill_density(Lane& l, Ns start, Ns end) {
  double span = static_cast<double>(std::max<Ns>(1, end - start));
  double bin = span / kOverviewBins;
  l.density.assign(kOverviewBins, 0.f);
  if (l.rows.empty()) return;
  // Row 0 holds the outermost events: its busy time is the lane's.
  const Row& outer = l.rows[0];
  for (size_t k = 0; k < outer.size(); ++k) {
    double a = static_cast<double>(outer.start(k) - start) / bin;
    double b = static_cast<double>(outer.end(k) - start) / bin;
    // Clamped as doubles: while a run loads, the span is an estimate an event may lie far past.
    constexpr double kLast = kOverviewBins - 1;
    int ia = static_cast<int>(std::clamp(a, 0.0, kLast));
    int ib = static_cast<int>(std::clamp(b, 0.0, kLast));
    for (int i = ia; i <= ib; ++i) {
      double lo = std::max(a, static_cast<double>(i)), hi = std::min(b, i + 1.0);
      if (hi > lo) l.density[i] += static_cast<float>(hi - lo);
    }
  }
  for (float& v : l.density) v = std::min(v, 1.f);
}

void gpu_density(ViewRun& d) {
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

// The load of one run: what every rank shares first (collectives, matches, steps), then rank by
// rank, each rank read once and let go (the analysis's per-rank pieces compute its metrics on
// the way, analysis/stream.h), a ViewRun handed over after each.
class Loader {
 public:
  Loader(const std::string& path, int64_t run_id, LoadProgress* progress, const Publish& publish)
      : reader_(path), path_(path), run_id_(run_id), progress_(progress), publish_(publish) {}

  std::shared_ptr<ViewRun> run() {
    begin();
    // Two threads read the next two ranks (each its own SQLite connection) while this one makes
    // the rank before into lanes: the reading (the longer part) and the making overlap, and the
    // reading uses a core the making leaves. On an error here, the reads in flight are waited
    // for (the futures' destructors) before anything they use goes away.
    TraceReader second(path_), third(path_);
    std::vector<std::pair<int32_t, analysis::RankTrace*>> order;
    for (auto& [rank, t] : run_->ranks) order.emplace_back(rank, &t);
    auto read = [&](size_t i) {
      const TraceReader& reader = i % 2 ? third : second;
      return std::async(std::launch::async, [this, &reader, &order, i] {
        return read_rank(reader, order[i].first, *order[i].second);
      });
    };
    std::deque<std::future<RankRead>> next;
    for (size_t i = 0; i < std::min<size_t>(2, order.size()); ++i) next.push_back(read(i));
    if (!order.empty()) preview(order.front().first);
    for (size_t i = 0; i < order.size(); ++i) {
      RankRead in = next.front().get();
      next.pop_front();
      if (i + 2 < order.size()) next.push_back(read(i + 2));
      add_rank(in);
    }
    return finish();
  }

 private:
  Error cancelled() const { return Error(ErrorCode::Internal, path_ + ": loading cancelled"); }
  Error too_many_names(uint64_t n, const char* what) const {
    return Error(ErrorCode::Unsupported, path_ + ": " + std::to_string(n) + what +
                                             "; braid-view holds at most " +
                                             std::to_string(kMaxEventNames) + " (24-bit name ids)");
  }
  void tick(int64_t rows) {
    if (!progress_) return;
    progress_->done += rows;
    if (progress_->cancel) throw cancelled();
  }
  Ns off(int32_t rank) const {
    auto it = offset_.find(rank);
    return it == offset_.end() ? Ns{0} : it->second;
  }
  void hand_over() {
    d_.ranks_loaded = static_cast<int>(d_.groups.size());
    if (publish_) publish_(std::make_shared<ViewRun>(d_));
  }

  void begin();
  // A rank's events by lane: (stream or thread, on the GPU).
  using RankLanes = std::map<std::pair<int64_t, bool>, std::vector<Event>>;
  // A rank's rows as read: its trace filled (analysis::fill_rank) and its API calls and ranges.
  // read_rank() reads only through `reader`, the rank's own trace and what begin() made.
  struct RankRead {
    int32_t rank = 0;
    analysis::RankTrace* t = nullptr;
    std::vector<ApiCall> calls;
    std::vector<Range> ranges;
  };
  RankRead read_rank(const TraceReader& reader, int32_t rank, analysis::RankTrace& t) const;
  void add_rank(RankRead& in);
  // What lanes span on the job axis: all their events, and their GPU work (kernels, copies).
  struct LaneSpan {
    Ns start = INT64_MAX, end = INT64_MIN;
    Ns gpu_start = INT64_MAX, gpu_end = INT64_MIN;
  };
  // Returns how many events were shortened to fit the rows (assign_rows).
  int64_t add_lanes(ViewRun& d, int32_t rank, RankLanes& lanes, LaneSpan& span);
  void set_span(ViewRun& d, const LaneSpan& span) const;
  void preview(int32_t rank);
  std::vector<int32_t> ranks_with_rows() const;
  void match();
  std::shared_ptr<ViewRun> finish();

  TraceReader reader_;
  std::string path_;
  int64_t run_id_;
  LoadProgress* progress_;
  const Publish& publish_;
  ViewRun d_;
  std::unordered_map<int32_t, Ns> offset_;
  // The analysis's view of the run, filled a rank at a time: each rank's collectives (which
  // d_.colls shows once the rank is in: never changed after), steps and launches; its events
  // only while it loads.
  std::shared_ptr<analysis::RunData> run_;
  analysis::ClockFit clocks_;
  analysis::SyncNames sync_names_;
  analysis::Metrics metrics_;             // handed over with the complete run
  std::map<int32_t, size_t> first_coll_;  // a rank's first collective in d_.colls
  std::vector<Ns> exposed_;               // per collective: of its time, what no computation covers
  std::map<int64_t, StrId> step_names_;
  std::map<int32_t, std::vector<int64_t>> gpu_streams_;  // the `streams` table's, by rank
  std::map<std::tuple<int32_t, int64_t, bool>, std::string> names_;  // streams' and threads'
  Ns density_start_ = 0, density_end_ = 0;                           // the bins' span
  Ns steps_start_ = INT64_MAX, steps_end_ = INT64_MIN;               // the steps' span
  LaneSpan span_;                                                    // of the lanes loaded
  int64_t clamped_ = 0;
};

void Loader::begin() {
  bool found = false;
  std::string ids;
  for (const RunRow& r : reader_.runs()) {
    if (r.run_id == run_id_) {
      d_.run = r;
      found = true;
    }
    ids += (ids.empty() ? "" : ", ") + std::to_string(r.run_id);
  }
  if (!found)
    throw Error(ErrorCode::NotFound,
                path_ + ": no run " + std::to_string(run_id_) +
                    (ids.empty() ? " (the file has no runs)" : " (runs: " + ids + ")"));
  d_.path = path_;
  d_.ranks = reader_.ranks(run_id_);
  d_.communicators = reader_.communicators(run_id_);
  d_.diagnostics = reader_.diagnostics(run_id_);
  for (const RankInfo& r : d_.ranks) offset_[r.rank] = r.clock_offset;
  for (const StreamInfo& s : reader_.streams(run_id_)) {
    if (!s.label.empty()) names_[std::make_tuple(s.rank, s.stream, s.gpu)] = s.label;
    if (s.gpu) gpu_streams_[s.rank].push_back(s.stream);
  }
  // The rows to read, for the progress bar: each table's largest row id, a look-up where
  // COUNT(*) would read the whole table (half a minute on a 7 GB file before the first frame).
  // Exact for a file of one run; a file of several runs over-counts, and the bar jumps to the
  // end when the load is done.
  if (progress_) {
    int64_t total = 0;
    for (const char* t : {"kernels", "memcpys", "collectives", "api_calls", "nvtx_ranges"})
      total += sql::scalar(reader_.db(), std::string("SELECT COALESCE(MAX(rowid), 0) FROM ") + t);
    progress_->total = std::max<int64_t>(1, total);
  }

  // What every rank shares and is small: infos, streams, steps, names. The collectives, the
  // matching and the metrics come with the ranks (and the matching at the end): nothing read
  // here grows with the events, so the first rank's lanes follow at once.
  // Name ids have 24 bits (Event::name): a file with more names is refused before they are read.
  if (const int64_t last = sql::scalar(reader_.db(), "SELECT COALESCE(MAX(id), 0) FROM strings");
      last >= static_cast<int64_t>(kMaxEventNames))
    throw too_many_names(static_cast<uint64_t>(last) + 1, " names");
  std::vector<std::string> strings = reader_.strings();
  run_ = std::make_shared<analysis::RunData>(analysis::run_frame(reader_, run_id_));
  for (int32_t r : ranks_with_rows()) run_->ranks[r].info.rank = r;
  for (const Step& s : reader_.steps(run_id_)) run_->ranks[s.rank].steps.push_back(s);
  run_->comms = reader_.communicators(run_id_);
  run_->reader = nullptr;  // names from `strings`: the RunData outlives this reader
  run_->strings = strings;
  sync_names_ = analysis::sync_names(strings);
  clocks_ = analysis::stored_clocks(*run_);
  d_.colls.hold(run_);
  d_.start = INT64_MAX;
  d_.end = INT64_MIN;
  for (auto& [rank, t] : run_->ranks) {
    t.info.rank = rank;
    t.index_steps();
    const Ns o = off(rank);
    for (Step s : t.steps) {
      s.start += o;
      s.end += o;
      d_.start = std::min(d_.start, s.start);
      d_.end = std::max(d_.end, std::max(s.end, s.start));
      d_.steps.push_back(s);
      auto [it, fresh] = step_names_.emplace(s.step, static_cast<StrId>(strings.size()));
      if (fresh) strings.push_back("step " + std::to_string(s.step));
    }
  }
  if (strings.size() > kMaxEventNames)
    throw too_many_names(strings.size(), " names with the steps'");
  d_.strings = Shared<std::string>(std::move(strings));
  steps_start_ = d_.start;
  steps_end_ = d_.end;
  if (d_.start > d_.end) d_.start = d_.end = 0;
  density_start_ = d_.start;
  density_end_ = d_.end;
  d_.gpu_start = d_.start;
  d_.gpu_end = d_.end;
  hand_over();
}

// The ranks with rows in any event table, by a look-up per rank in each table's index (a rank
// the `ranks` table lacks still gets its lanes).
std::vector<int32_t> Loader::ranks_with_rows() const {
  std::set<int32_t> out;
  for (const char* t : {"kernels", "memcpys", "collectives", "api_calls", "nvtx_ranges"}) {
    sql::Stmt s(reader_.db(), std::string("SELECT rank FROM ") + t +
                                  " WHERE run_id=? AND rank>? ORDER BY run_id, rank LIMIT 1");
    int64_t after = INT64_MIN;
    for (;;) {
      s.reset();
      s.bind(1, run_id_);
      s.bind(2, after);
      if (!s.step()) break;
      after = s.i64(0);
      out.insert(static_cast<int32_t>(after));
    }
  }
  return {out.begin(), out.end()};
}

// The rank's lanes, in its group's order (steps, GPU streams by id, host lanes by id), each
// split into rows, and its group.
int64_t Loader::add_lanes(ViewRun& d, int32_t rank, RankLanes& lanes, LaneSpan& span) {
  int64_t clamped = 0;
  // Its lanes, in the group's order (steps, GPU streams by id, host lanes by id), into rows.
  std::vector<std::pair<int64_t, bool>> order;
  for (const auto& [key, ev] : lanes)
    if (!ev.empty()) order.push_back(key);
  std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
    const bool xs = !x.second && x.first == kStepsLane, ys = !y.second && y.first == kStepsLane;
    if (xs != ys) return xs;
    if (x.second != y.second) return x.second;
    return x.first < y.first;
  });
  RankGroup g;
  g.info.rank = rank;
  for (const RankInfo& r : d.ranks)
    if (r.rank == rank) g.info = r;
  for (const auto& key : order) {
    std::vector<Event>& ev = lanes[key];
    Lane l;
    l.rank = rank;
    l.stream = key.first;
    l.gpu = key.second;
    if (key.first == kStepsLane && !key.second) {
      l.label = "steps";
    } else if (key.first == -1 && !key.second && !ev.empty() && ev.front().coll >= 0) {
      l.label = "collectives (host)";
    } else if (auto n = names_.find(std::make_tuple(rank, key.first, key.second));
               n != names_.end()) {
      l.label = n->second;
    } else {
      l.label = l.gpu ? "stream " + std::to_string(l.stream) : "thread " + std::to_string(l.stream);
    }
    l.event_count = static_cast<int64_t>(ev.size());
    if (l.stream != kStepsLane || l.gpu) d.event_count += l.event_count;  // the file's events
    for (const Event& e : ev) {
      span.start = std::min(span.start, e.start);
      span.end = std::max(span.end, e.end);
      if (l.gpu && (e.kind() == EventKind::Kernel || e.kind() == EventKind::Memcpy)) {
        span.gpu_start = std::min(span.gpu_start, e.start);
        span.gpu_end = std::max(span.gpu_end, e.end);
      }
    }
    std::vector<Row> rows;
    clamped += assign_rows(std::move(ev), rows);
    for (Row& r : rows) r.shrink_to_fit();
    l.rows = Shared<Row>(std::move(rows));
    g.lanes.push_back(static_cast<int>(d.lanes.size()));
    d.lanes.push_back(std::move(l));
    std::vector<Event>().swap(lanes[key]);
    fill_density(d.lanes.back(), density_start_, density_end_);
  }
  d.groups.push_back(std::move(g));
  return clamped;
}

// While loading: the steps' span (none: empty) and the lanes' in so far.
void Loader::set_span(ViewRun& d, const LaneSpan& span) const {
  d.start = std::min(steps_start_, span.start);
  d.end = std::max(steps_end_, span.end);
  if (d.start > d.end) d.start = d.end = 0;
  if (span.gpu_start <= span.gpu_end) {
    d.gpu_start = span.gpu_start;
    d.gpu_end = span.gpu_end;
  }
  gpu_density(d);
}

// The first rank's GPU streams' first events (each stream's first kPreviewEvents kernels and
// copies, ranges of the index), handed over while a second thread reads the rank whole: what a
// frame draws before that rank is in, however large it is (a second and more at 100 M events).
void Loader::preview(int32_t rank) {
  constexpr size_t kPreviewEvents = 20'000;
  auto streams = gpu_streams_.find(rank);
  if (!publish_ || streams == gpu_streams_.end()) return;
  const Ns o = off(rank);
  RankLanes lanes;
  for (int64_t stream : streams->second) {
    std::vector<Event>& ev = lanes[{stream, true}];
    reader_.kernels_from(run_id_, rank, stream, INT64_MIN, [&](const Kernel& k) {
      ev.push_back(lane_event(k, o));
      return ev.size() < kPreviewEvents;
    });
    size_t copies = 0;
    reader_.memcpys_from(run_id_, rank, stream, INT64_MIN, [&](const Memcpy& m) {
      ev.push_back(lane_event(m, o));
      return ++copies < kPreviewEvents;
    });
    if (!std::is_sorted(ev.begin(), ev.end(), by_start))
      std::stable_sort(ev.begin(), ev.end(), by_start);
  }
  ViewRun v = d_;
  LaneSpan span = span_;
  add_lanes(v, rank, lanes, span);
  if (v.lanes.empty()) return;
  set_span(v, span);
  v.preview = true;
  publish_(std::make_shared<ViewRun>(std::move(v)));
}

Loader::RankRead Loader::read_rank(const TraceReader& reader, int32_t rank,
                                   analysis::RankTrace& t) const {
  RankRead in{rank, &t, {}, {}};
  analysis::fill_collectives(reader, run_id_, t);
  analysis::fill_rank(reader, run_id_, sync_names_, t);
  in.calls = reader.api_calls(run_id_, rank);
  in.ranges = reader.ranges(run_id_, rank);
  return in;
}

void Loader::add_rank(RankRead& in) {
  if (progress_ && progress_->cancel) throw cancelled();
  const int32_t rank = in.rank;
  analysis::RankTrace& t = *in.t;
  const Ns o = off(rank);
  const size_t first = d_.colls.size();
  first_coll_[rank] = first;
  // The rank's metrics rows, and each of its collectives' exposed time (what its members'
  // exposure will be once matched: the time of [arrival, end] no computation of the rank covers).
  const std::vector<analysis::Interval> comp =
      analysis::add_rank_metrics(*run_, rank, clocks_, {}, metrics_);
  const Ns clock = clocks_.offset(rank);
  for (const Collective& c : t.collectives)
    exposed_.push_back(
        analysis::uncovered(c.start + clock, std::max(c.start, c.end) + clock, comp));

  RankLanes lanes;
  auto lane = [&](int64_t stream, bool gpu) -> std::vector<Event>& { return lanes[{stream, gpu}]; };
  // Kernels and copies come by stream (the reader's order): each stream's lane reserved for
  // both, then filled a run of one stream at a time (no growth's copies of a million events).
  auto by_stream = [](const auto& v, auto&& each) {
    for (size_t i = 0; i < v.size();) {
      size_t j = i + 1;
      while (j < v.size() && v[j].stream == v[i].stream) ++j;
      each(v[i].stream, i, j);
      i = j;
    }
  };
  std::map<int64_t, size_t> gpu_events;
  by_stream(t.kernels, [&](int64_t s, size_t i, size_t j) { gpu_events[s] += j - i; });
  by_stream(t.memcpys, [&](int64_t s, size_t i, size_t j) { gpu_events[s] += j - i; });
  for (const auto& [s, n] : gpu_events) lane(s, true).reserve(n);
  by_stream(t.kernels, [&](int64_t s, size_t i, size_t j) {
    std::vector<Event>& ev = lane(s, true);
    for (size_t k = i; k < j; ++k) ev.push_back(lane_event(t.kernels[k], o));
  });
  by_stream(t.memcpys, [&](int64_t s, size_t i, size_t j) {
    std::vector<Event>& ev = lane(s, true);
    for (size_t k = i; k < j; ++k) ev.push_back(lane_event(t.memcpys[k], o));
  });
  tick(static_cast<int64_t>(t.kernels.size() + t.memcpys.size() + t.collectives.size()));
  analysis::strip_rank(t);  // keeps the collectives, their launches and the steps
  for (const ApiCall& c : in.calls)
    lane(c.tid, false).push_back({c.start + o, c.end + o, c.name, kCategoryCpu});
  for (const Range& r : in.ranges)
    lane(r.stream, r.on_gpu).push_back({r.start + o, r.end + o, r.name, kCategoryAnnotation});
  tick(static_cast<int64_t>(in.calls.size() + in.ranges.size()));
  std::vector<ApiCall>().swap(in.calls);
  std::vector<Range>().swap(in.ranges);
  for (auto& [key, ev] : lanes)
    if (!std::is_sorted(ev.begin(), ev.end(), by_start))
      std::stable_sort(ev.begin(), ev.end(), by_start);

  // A collective is drawn as the communication kernel that carried it; one without a kernel
  // (CPU-side times, or a kernel the trace lacks) becomes an event of its own.
  for (size_t i = 0; i < t.collectives.size(); ++i) {
    const size_t ci = first + i;
    Collective c = t.collectives[i];
    c.start += o;
    c.end += o;
    bool attached = false;
    if (c.stream >= 0) {
      auto& ev = lane(c.stream, true);
      auto it = std::lower_bound(ev.begin(), ev.end(), c.start,
                                 [](const Event& e, Ns at) { return e.start < at; });
      // Prefer the kernel starting exactly with the collective, else the first one inside it.
      for (; it != ev.end() && it->start < std::max(c.end, c.start + 1); ++it) {
        if (it->kind() == EventKind::Kernel && it->coll < 0 &&
            is_comm(static_cast<Category>(it->category))) {
          it->coll = static_cast<int32_t>(ci);
          attached = true;
          break;
        }
      }
    }
    if (!attached) {
      Event e{c.start, std::max(c.end, c.start), c.name, static_cast<uint8_t>(comm_category(c.op)),
              static_cast<int32_t>(ci)};
      auto& ev = lane(c.stream >= 0 ? c.stream : -1, c.stream >= 0);
      ev.insert(std::upper_bound(ev.begin(), ev.end(), e, by_start), e);
    }
  }

  // The rank's steps (the `steps` table) in a lane of its own, first in the rank.
  if (!t.steps.empty()) {
    auto& ev = lane(kStepsLane, false);
    for (const Step& s : t.steps)
      ev.push_back(
          {s.start + o, std::max(s.end, s.start) + o, step_names_.at(s.step), kCategoryStep});
    std::stable_sort(ev.begin(), ev.end(), by_start);
  }

  clamped_ += add_lanes(d_, rank, lanes, span_);
  set_span(d_, span_);
  if (!t.collectives.empty()) d_.colls.add_rank(&t.collectives, o);  // never changed after
  hand_over();
}

// Matching every rank's collectives (each rank's are in), as `braid analyze` does, and the
// per-collective metrics; a member's exposure is its collective's, found as the rank loaded.
void Loader::match() {
  const analysis::MatchResult m = analysis::match_trace_collectives(*run_);
  analysis::add_collective_metrics(*run_, m, clocks_, {}, metrics_);
  for (analysis::CollectiveMetrics& cm : metrics_.collectives) {
    const analysis::CollGroup& grp = m.groups[static_cast<size_t>(cm.group)];
    for (size_t j = 0; j < grp.members.size(); ++j) {
      const analysis::CollRef& ref = grp.members[j];
      cm.members[j].exposed_ns = exposed_[first_coll_.at(ref.rank) + ref.index];
      cm.exposed_ns += cm.members[j].exposed_ns;
    }
  }
  std::vector<int32_t> metrics_of(m.groups.size(), -1);
  for (size_t i = 0; i < metrics_.collectives.size(); ++i)
    metrics_of[metrics_.collectives[i].group] = static_cast<int32_t>(i);
  std::vector<Match> matches;
  std::vector<int32_t> match_of(d_.colls.size(), -1);
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const analysis::CollGroup& grp = m.groups[g];
    if (grp.members.empty()) continue;
    Match x;
    x.order = grp.seq;
    x.op = grp.op;
    x.metrics = metrics_of[g];
    x.latest_start = INT64_MIN;
    x.earliest_end = INT64_MAX;
    x.latest_end = INT64_MIN;
    for (const analysis::CollRef& ref : grp.members) {
      const size_t ci = first_coll_.at(ref.rank) + ref.index;
      const Collective& c = run_->ranks.at(ref.rank).collectives[ref.index];
      const Ns o = off(ref.rank);
      x.comm = c.comm;
      x.members.push_back(static_cast<int32_t>(ci));
      x.latest_start = std::max(x.latest_start, c.start + o);
      x.earliest_end = std::min(x.earliest_end, c.end + o);
      x.latest_end = std::max(x.latest_end, c.end + o);
      match_of[ci] = static_cast<int32_t>(matches.size());
    }
    matches.push_back(std::move(x));
  }
  // The member lists go (their wait and exposure are the Match's and the collective's).
  for (analysis::CollectiveMetrics& cm : metrics_.collectives)
    std::vector<analysis::MemberTiming>().swap(cm.members);
  d_.matches = Shared<Match>(std::move(matches));
  d_.colls.set_matches(Shared<int32_t>(std::move(match_of)), Shared<Ns>(std::move(exposed_)));
}

std::shared_ptr<ViewRun> Loader::finish() {
  match();
  // The exact span, and the lanes' busy fractions over it when it is not the one they had.
  if (span_.start <= span_.end) {
    d_.start = span_.start;
    d_.end = span_.end;
  } else {
    d_.start = d_.end = 0;
  }
  if (span_.gpu_start > span_.gpu_end) {
    d_.gpu_start = d_.start;
    d_.gpu_end = d_.end;
  }
  if (d_.start != density_start_ || d_.end != density_end_)
    for (Lane& l : d_.lanes) fill_density(l, d_.start, d_.end);
  gpu_density(d_);
  if (clamped_ > 0)
    d_.diagnostics.push_back(diag::make(diag::Code::view_overlap_clamped, clamped_,
                                        "events shortened to fit 64 rows of overlapping events"));
  // The capture window (a capture with --window): a window stored as it opened (a capture
  // killed before its first cycle) ends with the run's events.
  Ns lo = INT64_MAX, hi = INT64_MIN;
  for (const CaptureWindow& w : reader_.capture_windows(run_id_)) {
    Ns o = off(w.rank);
    lo = std::min(lo, w.start + o);
    hi = std::max(hi, std::max(w.end, w.start) + o);
  }
  if (lo < INT64_MAX) {
    d_.window_start = lo;
    d_.window_end = hi > lo ? hi : std::max(lo, d_.end);
  }
  d_.metrics = std::move(metrics_);
  d_.complete = true;
  d_.ranks_loaded = static_cast<int>(d_.groups.size());
  auto done = std::make_shared<ViewRun>(std::move(d_));
  if (progress_) progress_->done = progress_->total.load();
  if (publish_) publish_(done);
  return done;
}

}  // namespace

void lean_malloc() { mallopt(M_MMAP_THRESHOLD, 1 << 20); }

std::shared_ptr<ViewRun> load_view_run(const std::string& path, int64_t run_id,
                                       LoadProgress* progress, const Publish& publish) {
  return Loader(path, run_id, progress, publish).run();
}

BackgroundLoad::BackgroundLoad(std::string path, int64_t run_id,
                               std::function<void(const ViewRun&)> derive)
    : path_(std::move(path)), run_id_(run_id) {
  thread_ = std::thread([this, derive = std::move(derive)] {
    try {
      load_view_run(path_, run_id_, &progress_, [&](std::shared_ptr<ViewRun> d) {
        if (d->complete && derive) derive(*d);
        std::lock_guard<std::mutex> lock(mu_);
        data_ = std::move(d);
        ++handed_over_;
      });
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      data_.reset();
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

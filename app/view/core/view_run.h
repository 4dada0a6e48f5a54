// What the GUI shows of one run: per (rank, stream) lanes of events on the job's common time
// axis, each lane split into rows of non-overlapping events sorted by start (so the visible
// window of a row is a binary search on start and on end), plus the collectives with their
// cross-rank matches and the analysis metrics.
//
// A ViewRun is never changed once the loader hands it over, so frames never lock. The loader
// hands over a run as it grows (core/loader.h): first its ranks and steps, then a ViewRun more
// each time a rank's lanes and collectives are in, the last one `complete` with the matches and
// the metrics. Those ViewRuns share what they have in common (Shared, CollTable below): handing
// over one more rank copies a few pointers per lane, never an event or a collective.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/metrics.h"
#include "trace/model.h"
#include "trace/reader.h"

namespace braid::view {

// What an event is, which its category says (Event::kind).
enum class EventKind : uint8_t { Kernel, Memcpy, CpuCall, Annotation, Step };

// Categories beyond trace/model.h's kernel categories, for events that are not kernels.
inline constexpr uint8_t kCategoryMemcpy = 100;      // + MemKind: a row of `memcpys` (memory)
inline constexpr uint8_t kCategoryCpu = 200;         // CPU op / runtime call
inline constexpr uint8_t kCategoryAnnotation = 201;  // NVTX range, user annotation
inline constexpr uint8_t kCategoryStep = 202;        // a step of the `steps` table
inline uint8_t memcpy_category(MemKind k) {
  return static_cast<uint8_t>(kCategoryMemcpy + static_cast<uint8_t>(k));
}
// The stream id of a rank's steps lane (its first lane): the steps the file holds, one row.
inline constexpr int64_t kStepsLane = INT64_MIN;
// Names an event can have: its name id has 24 bits (the loader refuses a file with more).
inline constexpr uint32_t kMaxEventNames = 1u << 24;

inline EventKind kind_of(uint8_t category) {
  if (category == kCategoryCpu) return EventKind::CpuCall;
  if (category == kCategoryAnnotation) return EventKind::Annotation;
  if (category == kCategoryStep) return EventKind::Step;
  if (category >= kCategoryMemcpy) return EventKind::Memcpy;
  return EventKind::Kernel;
}

// One event, whole: what the loader builds and what a Row gives back for one of its events
// (Row::operator[]). A Row does not store it this way (PackedEvent).
struct Event {
  Ns start = 0, end = 0;  // job axis (rank clock + clock_offset_ns)
  uint32_t name : 24 = 0;
  // braid::Category code, or kCategoryMemcpy + MemKind, kCategoryCpu / Annotation / Step
  uint32_t category : 8 = 0;
  int32_t coll = -1;  // index into ViewRun::colls when the event carries a collective

  Event() = default;
  Event(Ns s, Ns e, StrId n, uint8_t cat, int32_t c = -1)
      : start(s), end(e), name(n), category(cat), coll(c) {}
  EventKind kind() const { return kind_of(static_cast<uint8_t>(category)); }
  MemKind mem_kind() const { return static_cast<MemKind>(category - kCategoryMemcpy); }
};

// One event as a Row stores it: 16 bytes (issue 33: at most 40 bytes an event in memory, all
// told; 100 million events take 1.6 GB). The end is a 32-bit duration (4.29 s; a longer event's
// end is in its row's own table), the kind is in the category (a copy's kind too), the name id
// has 24 bits, and the collective an event carries (one event in ten or fewer) is in its row's
// table too.
struct PackedEvent {
  static constexpr uint32_t kLong = UINT32_MAX;  // duration: see the row's long ends
  Ns start = 0;
  uint32_t dur = 0;
  uint32_t name : 24 = 0;
  uint32_t category : 8 = 0;
  EventKind kind() const { return kind_of(static_cast<uint8_t>(category)); }
};
static_assert(sizeof(PackedEvent) == 16, "PackedEvent is a packed 16-byte record");

// Events that do not overlap, sorted by start (so ends sorted too): the visible window of a
// row is a search on start. Filled in order (push), then never changed.
class Row {
 public:
  // Every kStride-th event's start, apart (half a byte an event): a search jumps through them
  // in a few cache lines, then reads one stride of events (512 bytes), where a search of the
  // events themselves would touch a cache line per probe of a row of tens of MB (lod.h).
  static constexpr size_t kStride = 32;
  void push(const Event& e);
  void reserve(size_t n) { ev_.reserve(n); }
  void shrink_to_fit();
  size_t size() const { return ev_.size(); }
  bool empty() const { return ev_.empty(); }
  const std::vector<PackedEvent>& packed() const { return ev_; }
  Ns start(size_t i) const { return ev_[i].start; }
  Ns end(size_t i) const {
    const PackedEvent& e = ev_[i];
    return e.dur != PackedEvent::kLong ? e.start + e.dur : long_end(i);
  }
  int32_t coll(size_t i) const;  // -1: the event carries no collective
  // The first event at or after `from` that starts at or after `t` (size() if none), found by
  // galloping from `from` through the strides' starts: the answer is usually near.
  size_t first_start_from(size_t from, Ns t) const;
  Event operator[](size_t i) const {
    const PackedEvent& e = ev_[i];
    return {e.start, end(i), e.name, static_cast<uint8_t>(e.category), coll(i)};
  }

 private:
  Ns long_end(size_t i) const;
  std::vector<PackedEvent> ev_;
  std::vector<Ns> stride_start_;                    // ev_[k * kStride].start
  std::vector<std::pair<uint32_t, Ns>> long_end_;   // (index, end), by index
  std::vector<std::pair<uint32_t, int32_t>> coll_;  // (index, collective), by index
};

// A vector that never changes once made, shared by the ViewRuns a load hands over (copying one
// copies a pointer). Reads like a const std::vector.
template <typename T>
class Shared {
 public:
  Shared() = default;
  explicit Shared(std::vector<T> v) : p_(std::make_shared<const std::vector<T>>(std::move(v))) {}
  const std::vector<T>& vec() const { return p_ ? *p_ : none(); }
  const T& operator[](size_t i) const { return vec()[i]; }
  size_t size() const { return vec().size(); }
  bool empty() const { return vec().empty(); }
  auto begin() const { return vec().begin(); }
  auto end() const { return vec().end(); }
  const T& front() const { return vec().front(); }
  const T& back() const { return vec().back(); }

 private:
  static const std::vector<T>& none() {
    static const std::vector<T> kNone;
    return kNone;
  }
  std::shared_ptr<const std::vector<T>> p_;
};

// Where an event is: lane, row and position in the row.
struct EventRef {
  int lane = -1, row = -1;
  int64_t index = -1;
};

// A (rank, stream) of the file (StreamInfo: its GPU stream or host thread, its label) and its
// events.
struct Lane : StreamInfo {
  Shared<Row> rows;
  int64_t event_count = 0;
  // Busy fraction per bin of the run's whole span (overview strip), kOverviewBins entries.
  std::vector<float> density;
};
inline constexpr int kOverviewBins = 1024;

struct RankGroup {
  RankInfo info;
  std::vector<int> lanes;  // indexes into ViewRun::lanes, GPU streams first
};

// A collective as one rank executed it, with its cross-rank match. Where it is drawn:
// ViewRun::place.
struct CollRec {
  Collective c;        // times on the job axis
  int32_t match = -1;  // index into ViewRun::matches, -1 when unmatched (or not matched yet)
};

// The collectives of the ranks loaded, numbered rank by rank in the analysis's order (collective
// i of the analysis's rank r is [first of r + i]). They stay where the load's analysis holds them
// (analysis::RunData, on each rank's own clock, once for the GUI and the metrics); [i] gives one
// on the job axis with its match, which the complete run has.
class CollTable {
 public:
  CollRec operator[](size_t i) const;
  size_t size() const { return parts_.empty() ? 0 : parts_.back().first + parts_.back().v->size(); }
  bool empty() const { return size() == 0; }
  // Collective i's rank's range [first, first + count).
  size_t first_of(size_t i) const { return part(i).first; }

  class iterator {
   public:
    iterator(const CollTable* t, size_t i) : t_(t), i_(i) {}
    CollRec operator*() const { return (*t_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }

   private:
    const CollTable* t_;
    size_t i_;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size()}; }

  // The loader's: `run` holds the collectives; a rank's are added once they will not change.
  void hold(std::shared_ptr<const void> run) { run_ = std::move(run); }
  void add_rank(const std::vector<Collective>* v, Ns offset) {
    parts_.push_back({size(), v, offset});
  }
  void set_matches(Shared<int32_t> match, Shared<Ns> exposed) {
    match_ = std::move(match);
    exposed_ = std::move(exposed);
  }
  // Collective i's match ([i].match without the collective), -1 while unmatched.
  int32_t match(size_t i) const { return i < match_.size() ? match_[i] : -1; }
  // Of collective i's time, what no computation of its rank covers (its member's exposure in
  // analysis::MemberTiming); -1 until the run is complete.
  Ns exposed(size_t i) const { return i < exposed_.size() ? exposed_[i] : -1; }

 private:
  struct Part {
    size_t first = 0;
    const std::vector<Collective>* v = nullptr;
    Ns offset = 0;
  };
  const Part& part(size_t i) const;
  std::shared_ptr<const void> run_;  // keeps the vectors alive
  std::vector<Part> parts_;          // by first
  Shared<int32_t> match_;            // per collective, once the run is complete
  Shared<Ns> exposed_;               // per collective, once the run is complete
};

// The instances of one collective across the ranks of its communicator.
struct Match {
  StrId comm = 0;
  int64_t order = 0;  // seq, or position within the communicator on each rank
  CollOp op = CollOp::Unknown;
  std::vector<int32_t> members;  // indexes into ViewRun::colls, by rank
  Ns latest_start = 0;           // when the last rank arrived
  Ns earliest_end = 0;
  Ns latest_end = 0;     // when the last rank finished
  int32_t metrics = -1;  // index into ViewRun::metrics.collectives, -1 when it has none
};

struct ViewRun {
  std::string path;
  RunRow run;
  std::vector<RankInfo> ranks;
  std::vector<RankGroup> groups;  // one per rank loaded, by rank
  std::vector<Lane> lanes;        // rank by rank, each rank's lanes in its group's order
  CollTable colls;                // the ranks loaded
  Shared<Match> matches;          // analysis::match_trace_collectives's groups
  int ranks_loaded = 0;           // ranks whose lanes are in (as groups), of ranks.size()
  // While the first rank is read whole: its GPU streams' first events alone, in one group,
  // ranks_loaded 0 (the loader's next ViewRun has the rank whole).
  bool preview = false;
  bool complete = false;          // every rank's lanes, the metrics and the exact span are in
  // What `braid analyze` computes for the run (analysis::compute_metrics on the file's clock
  // offsets): per rank and step the time breakdown, per matched collective its timing. Empty
  // until `complete`. The collectives' member lists are not kept (a few hundred MB at 100 M
  // events): a member's wait is its match's last arrival less its start, its exposure
  // CollTable::exposed (coll_timing, core/stats.h).
  analysis::Metrics metrics;
  std::vector<Step> steps;  // job axis
  std::vector<Communicator> communicators;
  std::vector<Diagnostic> diagnostics;
  Shared<std::string> strings;  // interned names, by StrId
  // Span of all events on the job axis; until `complete`, of the steps, the collectives and
  // the ranks loaded.
  Ns start = 0, end = 0;
  Ns gpu_start = 0, gpu_end = 0;     // span of the GPU work (kernels, copies), else start/end
  // The capture window the agent recorded (`capture_windows`, all ranks' windows on the job
  // axis, from the first opening to the last closing); window_end <= window_start: none.
  Ns window_start = 0, window_end = 0;
  bool has_window() const { return window_end > window_start; }
  // What the window opens on: the capture window when the file has one, else the GPU work.
  Ns open_start() const { return has_window() ? window_start : gpu_start; }
  Ns open_end() const { return has_window() ? window_end : gpu_end; }
  std::vector<float> gpu_density;  // mean busy fraction of the GPU lanes, kOverviewBins
  int64_t event_count = 0;

  const std::string& str(StrId id) const;
  Event event(int lane, int row, int64_t index) const {
    return lanes[lane].rows[row][static_cast<size_t>(index)];
  }
  std::string run_title() const;                    // "run 2 (replayed, sim)"
  int lane_of(int32_t rank, int64_t stream) const;  // -1 if absent
  int lane_of(int32_t rank, int64_t stream, bool gpu) const;
  // Where collective `ci` is drawn: the communication kernel that carried it, or its own
  // event; none while its rank is not loaded.
  std::optional<EventRef> place(int32_t ci) const;
};

}  // namespace braid::view

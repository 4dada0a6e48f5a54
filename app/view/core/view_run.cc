#include "app/view/core/view_run.h"

#include <algorithm>
#include <stdexcept>

#include "app/view/core/lod.h"

namespace braid::view {

namespace {
template <typename V>
auto by_index(const std::vector<std::pair<uint32_t, V>>& v, size_t i) {
  return std::lower_bound(v.begin(), v.end(), static_cast<uint32_t>(i),
                          [](const std::pair<uint32_t, V>& p, uint32_t k) { return p.first < k; });
}
}  // namespace

void Row::push(const Event& e) {
  if (ev_.size() >= UINT32_MAX) throw std::length_error("a row holds at most 2^32 - 1 events");
  const auto i = static_cast<uint32_t>(ev_.size());
  const Ns dur = std::max<Ns>(0, e.end - e.start);
  PackedEvent p;
  p.start = e.start;
  p.dur = dur < PackedEvent::kLong ? static_cast<uint32_t>(dur) : PackedEvent::kLong;
  p.name = e.name;
  p.category = e.category;
  if (i % kStride == 0) stride_start_.push_back(e.start);
  ev_.push_back(p);
  if (p.dur == PackedEvent::kLong) long_end_.push_back({i, e.start + dur});
  if (e.coll >= 0) coll_.push_back({i, e.coll});
}

void Row::shrink_to_fit() {
  ev_.shrink_to_fit();
  stride_start_.shrink_to_fit();
  long_end_.shrink_to_fit();
  coll_.shrink_to_fit();
}

size_t Row::first_start_from(size_t from, Ns t) const {
  const size_t n = ev_.size();
  if (from >= n || ev_[from].start >= t) return from;
  // The first stride k past from's whose first event starts at or after t: galloping, then a
  // binary search of the strides passed over.
  const size_t strides = stride_start_.size();
  size_t k = from / kStride + 1;
  if (k < strides && stride_start_[k] < t) {
    size_t lo = k, step = 1;  // stride_start_[lo] < t
    while (lo + step < strides && stride_start_[lo + step] < t) {
      lo += step;
      step *= 2;
    }
    const size_t hi = std::min(strides, lo + step);
    k = static_cast<size_t>(std::lower_bound(stride_start_.begin() + static_cast<ptrdiff_t>(lo) + 1,
                                             stride_start_.begin() + static_cast<ptrdiff_t>(hi),
                                             t) -
                            stride_start_.begin());
  }
  // The answer is in (from, k * kStride]: within the stride before k's.
  const size_t begin = std::max(from + 1, (k - 1) * kStride);
  const size_t end = std::min(n, k * kStride);
  return static_cast<size_t>(
      std::lower_bound(ev_.begin() + static_cast<ptrdiff_t>(begin),
                       ev_.begin() + static_cast<ptrdiff_t>(end), t,
                       [](const PackedEvent& e, Ns v) { return e.start < v; }) -
      ev_.begin());
}

Ns Row::long_end(size_t i) const { return by_index(long_end_, i)->second; }

int32_t Row::coll(size_t i) const {
  auto it = by_index(coll_, i);
  return it != coll_.end() && it->first == i ? it->second : -1;
}

const CollTable::Part& CollTable::part(size_t i) const {
  auto it = std::upper_bound(parts_.begin(), parts_.end(), i,
                             [](size_t v, const Part& p) { return v < p.first; });
  return *(it - 1);
}

CollRec CollTable::operator[](size_t i) const {
  const Part& p = part(i);
  CollRec r;
  r.c = (*p.v)[i - p.first];
  r.c.start += p.offset;
  r.c.end += p.offset;
  if (r.c.enqueue >= 0) r.c.enqueue += p.offset;
  r.match = match(i);
  return r;
}

const std::string& ViewRun::str(StrId id) const {
  static const std::string kEmpty;
  return id < strings.size() ? strings[id] : kEmpty;
}

std::string ViewRun::run_title() const {
  std::string t = "run " + std::to_string(run.run_id) + " (" + std::string(to_string(run.kind));
  if (!run.backend.empty()) t += ", " + run.backend;
  t += ")";
  if (!run.label.empty()) t += " " + run.label;
  return t;
}

int ViewRun::lane_of(int32_t rank, int64_t stream) const {
  for (size_t i = 0; i < lanes.size(); ++i)
    if (lanes[i].rank == rank && lanes[i].stream == stream) return static_cast<int>(i);
  return -1;
}

int ViewRun::lane_of(int32_t rank, int64_t stream, bool gpu) const {
  for (size_t i = 0; i < lanes.size(); ++i)
    if (lanes[i].rank == rank && lanes[i].stream == stream && lanes[i].gpu == gpu)
      return static_cast<int>(i);
  return -1;
}

std::optional<EventRef> ViewRun::place(int32_t ci) const {
  if (ci < 0 || static_cast<size_t>(ci) >= colls.size()) return std::nullopt;
  const CollRec rec = colls[ci];
  const Collective& c = rec.c;
  // The loader attaches a collective to the kernel that starts with it or the first one inside
  // it (core/loader.cc), else gives it an event of its own at its start, on its stream's lane
  // or its rank's host lane (stream -1).
  const int lane = lane_of(c.rank, c.stream, c.stream >= 0);
  if (lane < 0) return std::nullopt;
  const Ns last = std::max(c.end, c.start + 1);
  for (size_t r = 0; r < lanes[lane].rows.size(); ++r) {
    const Row& row = lanes[lane].rows[r];
    for (int64_t i = first_starting_at(row, c.start);
         i < static_cast<int64_t>(row.size()) && row.start(i) < last; ++i)
      if (row.coll(i) == ci) return EventRef{lane, static_cast<int>(r), i};
  }
  return std::nullopt;
}

}  // namespace braid::view

#include "app/view/core/view_run.h"

#include <algorithm>

namespace braid::view {

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
    const auto& ev = lanes[lane].rows[r].events;
    auto it = std::lower_bound(ev.begin(), ev.end(), c.start,
                               [](const Event& e, Ns t) { return e.start < t; });
    for (; it != ev.end() && it->start < last; ++it)
      if (it->coll == ci) return EventRef{lane, static_cast<int>(r), it - ev.begin()};
  }
  return std::nullopt;
}

}  // namespace braid::view

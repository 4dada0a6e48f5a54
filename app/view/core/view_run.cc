#include "app/view/core/view_run.h"

namespace braid::view {

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

}  // namespace braid::view

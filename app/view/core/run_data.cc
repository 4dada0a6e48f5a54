#include "app/view/core/run_data.h"

namespace braid::view {

const std::string& RunData::str(StrId id) const {
  static const std::string kEmpty;
  return id < strings.size() ? strings[id] : kEmpty;
}

std::string RunData::run_title() const {
  std::string t = "run " + std::to_string(run.run_id) + " (" + std::string(to_string(run.kind));
  if (!run.backend.empty()) t += ", " + run.backend;
  t += ")";
  if (!run.label.empty()) t += " " + run.label;
  return t;
}

int RunData::lane_of(int32_t rank, int64_t stream) const {
  for (size_t i = 0; i < lanes.size(); ++i)
    if (lanes[i].rank == rank && lanes[i].stream == stream) return static_cast<int>(i);
  return -1;
}

}  // namespace braid::view

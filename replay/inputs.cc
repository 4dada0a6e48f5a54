#include "replay/inputs.h"

#include <cstdio>
#include <cstring>

#include "fusion/symmetry.h"
#include "trace/error.h"

namespace braid::replay {

bool is_store_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(ErrorCode::NotFound, path + ": cannot open");
  char head[16] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  return n == sizeof head && std::memcmp(head, "SQLite format 3", 15) == 0;
}

namespace {

std::string stored_list(const std::vector<fusion::StoredSchedule>& all) {
  std::string t;
  for (const auto& s : all)
    t += (t.empty() ? "" : ", ") + std::to_string(s.id) + " '" + s.name + "'" +
         (s.parent_id >= 0 ? " (from " + std::to_string(s.parent_id) + ")" : "");
  return t.empty() ? "none" : t;
}

ScheduleInput from_store(const std::string& path, const fusion::StoredSchedule& st, bool classes) {
  ScheduleInput in;
  in.schedule = fusion::load_stored_schedule(path, st.id, classes);
  in.stored = st;
  in.in_store = true;
  return in;
}

}  // namespace

ScheduleInput load_schedule_input(const std::string& path, int64_t id, bool classes) {
  if (!is_store_file(path)) {
    if (id >= 0)
      throw Error(ErrorCode::Usage, path + " is a schedule JSON file; --schedule applies to .braid files");
    ScheduleInput in;
    in.schedule = fusion::load_schedule(path);
    if (!classes) in.schedule = fusion::expand(in.schedule);
    in.stored.name = in.schedule.name;
    return in;
  }
  const std::vector<fusion::StoredSchedule> all = fusion::list_schedules(path);
  if (all.empty())
    throw Error(ErrorCode::NotFound, path +
                                         " holds no schedules: make one with `braid synth -o` "
                                         "or lift a run with `braid lift`");
  const fusion::StoredSchedule* pick = &all.back();
  for (const auto& s : all)
    if (id < 0 ? s.id > pick->id : s.id == id) pick = &s;
  if (id >= 0 && pick->id != id)
    throw Error(ErrorCode::NotFound, path + ": no schedule " + std::to_string(id) +
                                         " (stored: " + stored_list(all) + ")");
  return from_store(path, *pick, classes);
}

std::pair<ScheduleInput, ScheduleInput> load_ab_pair(const std::string& path, int64_t baseline_id,
                                                     int64_t fused_id, bool classes) {
  if (!is_store_file(path))
    throw Error(ErrorCode::Usage, path + " is not a .braid file: braid ab compares a fused "
                                         "schedule with its parent stored in a .braid file");
  const std::vector<fusion::StoredSchedule> all = fusion::list_schedules(path);
  auto find = [&](int64_t id) -> const fusion::StoredSchedule* {
    for (const auto& s : all)
      if (s.id == id) return &s;
    return nullptr;
  };
  const fusion::StoredSchedule* fused = nullptr;
  if (fused_id >= 0) {
    fused = find(fused_id);
    if (!fused)
      throw Error(ErrorCode::NotFound, path + ": no schedule " + std::to_string(fused_id) +
                                           " (stored: " + stored_list(all) + ")");
  } else {
    for (const auto& s : all)
      if (s.parent_id >= 0 && (!fused || s.id > fused->id)) fused = &s;
    if (!fused)
      throw Error(ErrorCode::NotFound,
                  path + " holds no fused schedule (one with a parent): run `braid fuse` first, "
                         "or name both with --baseline and --fused (stored: " +
                      stored_list(all) + ")");
  }
  const int64_t base = baseline_id >= 0 ? baseline_id : fused->parent_id;
  const fusion::StoredSchedule* b = find(base);
  if (!b)
    throw Error(ErrorCode::NotFound, path + ": no baseline schedule " + std::to_string(base) +
                                         " (stored: " + stored_list(all) + "); use --baseline");
  return {from_store(path, *b, classes), from_store(path, *fused, classes)};
}

}  // namespace braid::replay

// Which schedules a replay runs: from a `.braid` file (stored schedules) or a schedule JSON
// file, and the baseline / fused pair of an A/B run.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "fusion/ir.h"
#include "fusion/schedule_store.h"

namespace braid::replay {

struct ScheduleInput {
  fusion::Schedule schedule;
  fusion::StoredSchedule stored;  // id -1 for a JSON file
  bool in_store = false;          // the input is a .braid file (replays are stored in it)
};

// `path` is a .braid file (schedule `id`, default the newest) or a braid-schedule JSON file.
// A schedule held as rank classes comes with every rank (fusion::expand) unless `classes`.
ScheduleInput load_schedule_input(const std::string& path, int64_t id = -1, bool classes = false);

// The baseline and fused schedules of an A/B run in a .braid file: by default the newest
// schedule that has a parent, and that parent. Throws braid::Error naming what is stored when
// there is no such pair.
std::pair<ScheduleInput, ScheduleInput> load_ab_pair(const std::string& path,
                                                     int64_t baseline_id = -1,
                                                     int64_t fused_id = -1, bool classes = false);

bool is_store_file(const std::string& path);

}  // namespace braid::replay

// Reads one completed CUPTI activity buffer, record by record (cuptiActivityGetNextRecord, as
// CUPTI lays them out), and hands each record to an ActivityHandler in CUDA-free form. The
// agent's buffer-completed path and the tests on synthetic buffers run this same function.
#pragma once

#include <cstddef>
#include <cstdint>

#include "capture/activity.h"

namespace braid::capture {

struct ParseStats {
  int64_t records = 0;
  int64_t unhandled = 0;
  bool truncated = false;  // the buffer ended inside a record or held an invalid kind
};

ParseStats parse_activity_buffer(const uint8_t* buffer, size_t valid_bytes, ActivityHandler& h);

// The CUPTI activity kinds the agent enables (parse_activity_buffer understands them, and MARKER
// records too, which the agent no longer asks for).
// `with_api`: runtime and driver API records too.
int enabled_activity_kinds(int* kinds, int max, bool with_api);

}  // namespace braid::capture

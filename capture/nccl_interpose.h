// State the NCCL interposer shares with the profiler plugin: the NCCL call the current thread
// is inside (the plugin's API events happen within it).
#pragma once

#include <cstdint>

namespace braid::capture {

// The id of the NCCL call this thread is executing, 0 outside one.
int64_t current_nccl_call();

}  // namespace braid::capture

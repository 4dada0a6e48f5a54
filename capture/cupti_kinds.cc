// The CUPTI activity kinds the agent enables, apart from the parser (cupti_parse.cc) so that the
// capture benchmark's CUPTI floor (bench/cupti_floor.cc) enables the same ones without it.
#include <cupti.h>

#include "capture/cupti_parse.h"

namespace braid::capture {

int enabled_activity_kinds(int* kinds, int max, bool with_api) {
  // No MARKER: the agent records NVTX ranges with its own NVTX handlers (agent/nvtx_hooks.cc).
  static const CUpti_ActivityKind kBase[] = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMCPY2,           CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
  };
  static const CUpti_ActivityKind kApi[] = {CUPTI_ACTIVITY_KIND_RUNTIME,
                                            CUPTI_ACTIVITY_KIND_DRIVER};
  int n = 0;
  for (auto k : kBase)
    if (n < max) kinds[n++] = k;
  if (with_api)
    for (auto k : kApi)
      if (n < max) kinds[n++] = k;
  return n;
}

}  // namespace braid::capture

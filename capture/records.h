// Capture-specific rows that the core `.braid` event tables have no place for: the arguments of
// each NCCL call as the application made it, and the proxy operations NCCL's profiler plugin
// reports. The structs are defined with the event model (trace/model.h), because `braid merge`
// and the readers copy them too; the file sink stores them in the `nccl_calls` and
// `nccl_proxy_ops` tables (docs/capture.md).
#pragma once

#include "trace/model.h"

namespace braid::capture {

using braid::NcclCallRow;
using braid::ProxyOpRow;

}  // namespace braid::capture

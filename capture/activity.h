// Activity records in a CUDA-free form: what the CUPTI buffer parser (cupti_parse.h) reads out
// of CUPTI's structs and the collector turns into `.braid` rows. Device times are in CUPTI's
// clock; host times in the host clock (CLOCK_REALTIME ns). Strings point into CUPTI's or NCCL's
// memory and are only valid during the call that receives them.
#pragma once

#include <cstdint>

#include "trace/model.h"

namespace braid::capture {

// graph_node/graph: the CUDA graph node (and graph) whose launch ran it, 0 outside graphs; then
// `correlation` is that of the graph launch.
struct KernelActivity {
  uint32_t device = 0, context = 0, stream = 0, correlation = 0;
  int64_t start = 0, end = 0;
  const char* name = nullptr;
  uint64_t graph_node = 0;
  uint32_t graph = 0;
};

struct MemActivity {
  MemKind kind = MemKind::Unknown;
  int64_t bytes = 0;
  uint32_t device = 0, context = 0, stream = 0, correlation = 0;
  int64_t start = 0, end = 0;
  uint64_t graph_node = 0;
  uint32_t graph = 0;
};

struct ApiActivity {
  ApiKind kind = ApiKind::Runtime;  // Runtime or Driver
  uint32_t cbid = 0;
  const char* name = nullptr;  // resolved from cbid by the parser
  int64_t start = 0, end = 0;
  uint32_t pid = 0, tid = 0, correlation = 0;
  int32_t result = 0;
};

struct SyncActivity {
  const char* what = "";  // "stream", "event", "context", "stream_wait_event"
  uint32_t context = 0, stream = 0, correlation = 0;
  int64_t start = 0, end = 0;
};

struct MarkerActivity {
  enum Phase : uint8_t { Start, End, Instant } phase = Instant;
  uint32_t id = 0;
  int64_t timestamp = 0;
  bool host_clock = false;       // `timestamp` on the host clock (the agent's own NVTX handlers)
  const char* name = nullptr;    // Start and Instant only
  const char* domain = nullptr;
  uint64_t tid = 0;
};

struct ExternalCorrelationActivity {
  uint32_t kind = 0;  // CUpti_ExternalCorrelationKind
  uint64_t external_id = 0;
  uint32_t correlation = 0;
};

struct DeviceActivity {
  uint32_t id = 0;
  const char* name = nullptr;
};

// The parser's output: one call per record, in buffer order.
class ActivityHandler {
 public:
  virtual ~ActivityHandler() = default;
  virtual void on_kernel(const KernelActivity& k) = 0;
  virtual void on_mem(const MemActivity& m) = 0;
  virtual void on_api(const ApiActivity& a) = 0;
  virtual void on_sync(const SyncActivity& s) = 0;
  virtual void on_marker(const MarkerActivity& m) = 0;
  virtual void on_external_correlation(const ExternalCorrelationActivity& e) = 0;
  virtual void on_device(const DeviceActivity& d) = 0;
  virtual void on_unhandled(uint32_t cupti_kind) = 0;
};

}  // namespace braid::capture

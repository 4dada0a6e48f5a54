#include "capture/cupti_parse.h"

#include <cupti.h>

#include <atomic>
#include <type_traits>

namespace braid::capture {
namespace {

MemKind mem_kind(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return MemKind::HtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return MemKind::DtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return MemKind::DtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return MemKind::HtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return MemKind::PtoP;
    default: return MemKind::Unknown;
  }
}

const char* sync_name(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "stream_wait_event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "stream";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "context";
    default: return "unknown";
  }
}

// API names by (domain, cbid), looked up once each, in tables of plain atomics at namespace
// scope: constant-initialized when the library loads and trivially destructible. The final drain
// runs from the agent's atexit handler, after the destructors of every function-local static
// built later than that handler was registered (a lazily built map here was freed before the
// last buffers were parsed: a use-after-free at the exit of every recorded job).
constexpr uint32_t kNameSlots = 1024;  // above CUPTI_{RUNTIME,DRIVER}_TRACE_CBID_SIZE
static_assert(CUPTI_RUNTIME_TRACE_CBID_SIZE <= kNameSlots &&
              CUPTI_DRIVER_TRACE_CBID_SIZE <= kNameSlots);
static_assert(std::is_trivially_destructible_v<std::atomic<const char*>>);
std::atomic<const char*> g_runtime_names[kNameSlots];
std::atomic<const char*> g_driver_names[kNameSlots];
const char kNoName[] = "";  // looked up, CUPTI has no name for it

const char* api_name(CUpti_CallbackDomain domain, uint32_t cbid) {
  if (cbid >= kNameSlots) return nullptr;
  auto& slot = (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? g_runtime_names : g_driver_names)[cbid];
  const char* name = slot.load(std::memory_order_acquire);
  if (!name) {
    if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) name = kNoName;
    slot.store(name, std::memory_order_release);  // CUPTI's static strings: a race stores the same
  }
  return name == kNoName ? nullptr : name;
}

}  // namespace

ParseStats parse_activity_buffer(const uint8_t* buffer, size_t valid, ActivityHandler& h) {
  ParseStats st;
  if (!buffer || valid == 0) return st;
  CUpti_Activity* rec = nullptr;
  auto* buf = const_cast<uint8_t*>(buffer);
  for (;;) {
    CUptiResult rc = cuptiActivityGetNextRecord(buf, valid, &rec);
    if (rc == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
    if (rc != CUPTI_SUCCESS) {
      st.truncated = true;
      break;
    }
    ++st.records;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* r = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        h.on_kernel({r->deviceId, r->contextId, r->streamId, r->correlationId,
                     static_cast<int64_t>(r->start), static_cast<int64_t>(r->end), r->name,
                     r->graphNodeId, r->graphId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* r = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        h.on_mem({mem_kind(r->copyKind), static_cast<int64_t>(r->bytes), r->deviceId, r->contextId,
                  r->streamId, r->correlationId, static_cast<int64_t>(r->start),
                  static_cast<int64_t>(r->end), r->graphNodeId, r->graphId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        auto* r = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(rec);
        h.on_mem({MemKind::PtoP, static_cast<int64_t>(r->bytes), r->deviceId, r->contextId,
                  r->streamId, r->correlationId, static_cast<int64_t>(r->start),
                  static_cast<int64_t>(r->end), r->graphNodeId, r->graphId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* r = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        h.on_mem({MemKind::Memset, static_cast<int64_t>(r->bytes), r->deviceId, r->contextId,
                  r->streamId, r->correlationId, static_cast<int64_t>(r->start),
                  static_cast<int64_t>(r->end), r->graphNodeId, r->graphId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        auto* r = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
        bool rt = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
        ApiActivity a;
        a.kind = rt ? ApiKind::Runtime : ApiKind::Driver;
        a.cbid = r->cbid;
        a.name = api_name(rt ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, r->cbid);
        a.start = static_cast<int64_t>(r->start);
        a.end = static_cast<int64_t>(r->end);
        a.pid = r->processId;
        a.tid = r->threadId;
        a.correlation = r->correlationId;
        a.result = static_cast<int32_t>(r->returnValue);
        h.on_api(a);
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        auto* r = reinterpret_cast<const CUpti_ActivitySynchronization2*>(rec);
        h.on_sync({sync_name(r->type), r->contextId, r->streamId, r->correlationId,
                   static_cast<int64_t>(r->start), static_cast<int64_t>(r->end)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MARKER: {
        auto* r = reinterpret_cast<const CUpti_ActivityMarker2*>(rec);
        MarkerActivity m;
        if (r->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) m.phase = MarkerActivity::Start;
        else if (r->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) m.phase = MarkerActivity::End;
        else m.phase = MarkerActivity::Instant;
        m.id = r->id;
        m.timestamp = static_cast<int64_t>(r->timestamp);
        m.name = r->name;
        m.domain = r->domain;
        if (r->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ||
            r->objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS)
          m.tid = r->objectId.pt.threadId;
        h.on_marker(m);
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* r = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        h.on_external_correlation({static_cast<uint32_t>(r->externalKind), r->externalId,
                                   r->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_DEVICE: {
        auto* r = reinterpret_cast<const CUpti_ActivityDevice5*>(rec);
        h.on_device({r->id, r->name});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MARKER_DATA:  // colours and categories of markers: not stored
        break;
      default:
        ++st.unhandled;
        h.on_unhandled(static_cast<uint32_t>(rec->kind));
        break;
    }
  }
  return st;
}

}  // namespace braid::capture

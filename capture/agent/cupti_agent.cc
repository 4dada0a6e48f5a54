// CUDA's injection entry point and everything CUPTI: the activity buffers (from the pool, handed
// to the writer thread when complete), the capture window switched by cudaProfilerStart/Stop,
// NVTX ranges, a duration or (attach mode) the node daemon, the device clock for the clock fit, dropped-record counts, and the
// external-correlation ids the NCCL interposer pushes around its launches.
#include <cupti.h>
#include <generated_nvtx_meta.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "capture/agent/agent.h"
#include "capture/cupti_parse.h"

namespace braid::capture::agent {
namespace {

CUpti_SubscriberHandle g_subscriber = nullptr;
std::atomic<bool> g_activity_on{false};
std::atomic<int64_t> g_dropped{0};
std::mutex g_window_mu;
WindowController* g_window = nullptr;
std::chrono::steady_clock::time_point g_start;
thread_local std::vector<std::string> t_nvtx_stack;  // names of this thread's pushed ranges
// (start/end ranges are kept by id in the WindowController, under g_window_mu)

void warn(const char* what, CUptiResult rc) {
  const char* s = nullptr;
  cuptiGetResultString(rc, &s);
  std::fprintf(stderr, "braid capture: %s failed: %s\n", what, s ? s : "unknown CUPTI error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  Agent* a = Agent::running();
  uint8_t* b = a ? a->buffers().acquire() : nullptr;
  *buffer = b;
  *size = b ? a->buffers().buffer_bytes() : 0;  // no buffer: CUPTI drops and counts the records
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) {
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
    g_dropped.fetch_add(static_cast<int64_t>(dropped));
  Agent* a = Agent::running();
  if (!buffer) return;
  if (a) a->pipeline().post_buffer(buffer, valid);  // parsed on the writer thread
}

// Runtime and driver API records only for the calls worth keeping (is_recorded_api), chosen
// by name from every callback id CUPTI knows.
void set_api_activity(bool on) {
  static std::vector<CUpti_CallbackId> runtime, driver;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* name = nullptr;
    for (uint32_t id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id)
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, id, &name) == CUPTI_SUCCESS && name &&
          is_recorded_api(name))
        runtime.push_back(id);
    for (uint32_t id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id)
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, id, &name) == CUPTI_SUCCESS && name &&
          is_recorded_api(name))
        driver.push_back(id);
  });
  for (auto id : runtime) cuptiActivityEnableRuntimeApi(id, on ? 1 : 0);
  for (auto id : driver) cuptiActivityEnableDriverApi(id, on ? 1 : 0);
}

void set_activity(bool on) {
  if (g_activity_on.exchange(on) == on) return;
  set_api_activity(on);
  int kinds[16];
  int n = enabled_activity_kinds(kinds, 16, false);
  for (int i = 0; i < n; ++i) {
    auto k = static_cast<CUpti_ActivityKind>(kinds[i]);
    CUptiResult rc = on ? cuptiActivityEnable(k) : cuptiActivityDisable(k);
    if (rc != CUPTI_SUCCESS && rc != CUPTI_ERROR_NOT_COMPATIBLE) warn("cuptiActivityEnable", rc);
  }
  if (on) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DEVICE);
  if (Agent* a = Agent::running()) {
    a->set_window_open(on);
    a->pipeline().request_flush();
  }
}

void apply(std::optional<bool> change) {
  if (!change) return;
  set_activity(*change);
  // Attach mode: a steps window that ended by itself (its last step ended) is done.
  if (!*change && g_window && g_window->finished())
    if (Agent* a = Agent::running(); a && a->config().attach()) a->window_finished();
}

// Attach mode: the daemon's windows (Agent calls these from its daemon thread, never from a
// CUPTI callback).
void attach_open_duration() {
  std::lock_guard lk(g_window_mu);
  if (g_window) apply(g_window->open_duration());
}
void attach_open_steps(int64_t n) {
  // Step ranges arrive as NVTX callbacks; enabled outside our lock (callbacks take it).
  cuptiEnableDomain(1, g_subscriber, CUPTI_CB_DOMAIN_NVTX);
  std::lock_guard lk(g_window_mu);
  if (g_window) g_window->open_steps(n);
}
void attach_close() {
  std::lock_guard lk(g_window_mu);
  if (g_window) apply(g_window->close());
}
const WindowOps kAttachOps{attach_open_duration, attach_open_steps, attach_close};

const char* nvtx_push_name(CUpti_CallbackId cbid, const void* params) {
  const nvtxEventAttributes_t* attr = nullptr;
  switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA:
    case CUPTI_CBID_NVTX_nvtxRangeStartA:  // same parameter layout: one message
      return static_cast<const nvtxRangePushA_params*>(params)->message;
    case CUPTI_CBID_NVTX_nvtxRangePushEx:
    case CUPTI_CBID_NVTX_nvtxRangeStartEx:
      attr = static_cast<const nvtxRangePushEx_params*>(params)->eventAttrib;
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx:
    case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx:
      attr = static_cast<const nvtxDomainRangePushEx_params*>(params)->core.eventAttrib;
      break;
    default:
      return nullptr;
  }
  if (attr && attr->messageType == NVTX_MESSAGE_TYPE_ASCII) return attr->message.ascii;
  return "";
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* data) {
  std::lock_guard lk(g_window_mu);
  if (!g_window) return;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    auto* info = static_cast<const CUpti_CallbackData*>(data);
    bool start = domain == CUPTI_CB_DOMAIN_RUNTIME_API
                     ? cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000
                     : cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart;
    // Open before the start call returns; close once the stop call has returned.
    if (start && info->callbackSite == CUPTI_API_ENTER) apply(g_window->on_profiler_api(true));
    if (!start && info->callbackSite == CUPTI_API_EXIT) apply(g_window->on_profiler_api(false));
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_NVTX) return;
  auto* nv = static_cast<const CUpti_NvtxData*>(data);
  switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA:
    case CUPTI_CBID_NVTX_nvtxRangePushEx:
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
      const char* name = nvtx_push_name(cbid, nv->functionParams);
      t_nvtx_stack.emplace_back(name ? name : "");
      apply(g_window->on_range_start(t_nvtx_stack.back()));
      break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePop:
    case CUPTI_CBID_NVTX_nvtxDomainRangePop:
      if (!t_nvtx_stack.empty()) {
        std::string name = std::move(t_nvtx_stack.back());
        t_nvtx_stack.pop_back();
        apply(g_window->on_range_end(name));
      }
      break;
    // Start/end ranges: keyed by the id nvtxRangeStart* returns (they may end on another thread).
    case CUPTI_CBID_NVTX_nvtxRangeStartA:
    case CUPTI_CBID_NVTX_nvtxRangeStartEx:
    case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx:
      if (nv->functionReturnValue) {
        const char* name = nvtx_push_name(cbid, nv->functionParams);
        auto id = *static_cast<const nvtxRangeId_t*>(nv->functionReturnValue);
        apply(g_window->on_range_start_id(id, name ? name : ""));
      }
      break;
    case CUPTI_CBID_NVTX_nvtxRangeEnd:
      apply(g_window->on_range_end_id(static_cast<const nvtxRangeEnd_params*>(nv->functionParams)->id));
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangeEnd:
      apply(g_window->on_range_end_id(
          static_cast<const nvtxDomainRangeEnd_params*>(nv->functionParams)->core.id));
      break;
    default:
      break;
  }
}

void push_ext(uint64_t id) {
  if (g_activity_on.load(std::memory_order_relaxed))
    cuptiActivityPushExternalCorrelationId(
        static_cast<CUpti_ExternalCorrelationKind>(kNcclExternalKind), id);
}

void pop_ext() {
  if (!g_activity_on.load(std::memory_order_relaxed)) return;
  uint64_t last = 0;
  cuptiActivityPopExternalCorrelationId(
      static_cast<CUpti_ExternalCorrelationKind>(kNcclExternalKind), &last);
}

bool start_cupti(Agent& a) {
  auto fail = [&](const char* what, CUptiResult rc) {
    const char* s = nullptr;
    cuptiGetResultString(rc, &s);
    std::string detail = std::string(what) + " failed: " + (s ? s : "unknown CUPTI error");
    if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      detail += " (another profiler, e.g. Nsight Systems or the PyTorch profiler, holds CUPTI)";
    std::fprintf(stderr, "braid capture: %s\n", detail.c_str());
    Diagnostic d;
    d.rank = -1;
    d.severity = Severity::Error;
    d.code = "capture.cupti_unavailable";
    d.detail = "no CUDA activity captured: " + detail;
    a.pipeline().post(d);
    return false;
  };
  CUptiResult rc = cuptiSubscribe(&g_subscriber, on_callback, nullptr);
  if (rc != CUPTI_SUCCESS) return fail("cuptiSubscribe", rc);
  rc = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (rc != CUPTI_SUCCESS) return fail("cuptiActivityRegisterCallbacks", rc);
  const WindowSpec& w = a.config().window;
  {
    std::lock_guard lk(g_window_mu);
    g_window = new WindowController(w);
    g_start = std::chrono::steady_clock::now();
  }
  if (w.kind == WindowKind::ProfilerApi) {
    cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                        CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000);
    cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                        CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000);
    cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                        CUPTI_DRIVER_TRACE_CBID_cuProfilerStart);
    cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                        CUPTI_DRIVER_TRACE_CBID_cuProfilerStop);
  } else if (w.kind == WindowKind::Nvtx || w.kind == WindowKind::Steps) {
    cuptiEnableDomain(1, g_subscriber, CUPTI_CB_DOMAIN_NVTX);
  }

  PipelineHooks hooks;
  hooks.parse = [](const uint8_t* buf, size_t valid, ActivityHandler& h) {
    ParseStats st = parse_activity_buffer(buf, valid, h);
    (void)st;
  };
  hooks.request_flush = [](bool forced) {
    cuptiActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  };
  hooks.device_clock = [] {
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    return static_cast<int64_t>(t);
  };
  hooks.update_counters = [](Collector& c) {
    int64_t d = g_dropped.load();
    if (d)
      c.set_count("capture.dropped_records", d, Severity::Warning,
                  "activity records CUPTI dropped for lack of buffer space (CUPTI's own count)");
  };
  hooks.on_tick = [] {
    std::lock_guard lk(g_window_mu);
    if (!g_window) return;
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
    apply(g_window->on_tick(t));
  };
  a.attach_cupti(std::move(hooks), push_ext, pop_ext);
  if (w.kind == WindowKind::Daemon) {
    // A duration window the daemon opened before this process initialized CUDA is open now.
    a.set_window_ops(&kAttachOps);  // first: a later open goes through them
    std::lock_guard lk(g_window_mu);
    if (a.window_open()) apply(g_window->open_duration());
    return true;
  }
  std::lock_guard lk(g_window_mu);
  a.set_window_open(g_window->enabled());
  if (g_window->enabled()) set_activity(true);
  return true;
}

}  // namespace
}  // namespace braid::capture::agent

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  using namespace braid::capture::agent;
  Agent* a = Agent::get();
  if (!a) return 1;  // no capture asked for: stay out of the way
  static std::once_flag once;
  std::call_once(once, [a] {
    start_cupti(*a);
  });
  return 1;
}

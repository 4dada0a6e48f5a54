// CUDA's injection entry point and everything CUPTI: the activity buffers (from the pool, handed
// to the writer thread when complete), the capture window switched by cudaProfilerStart/Stop,
// NVTX ranges, a duration or (attach mode) the node daemon, the device clock for the clock fit,
// dropped-record counts, and the external-correlation ids the NCCL interposer pushes around its
// launches.
//
// What is on for the run and what follows the window: CUPTI's thread ids are the system's
// (cuptiSetThreadIdType before any kind), API records of the kept calls and external correlation
// are on from the start, and so are NVTX markers in nvtx/steps windows (the range that opens the
// window is recorded before its callback runs); the collector keeps only their rows inside the
// window, whose edges the agent posts in the host clock. Kernels, copies, memsets and
// synchronization are switched with the window.
//
// Locking: g_window_mu guards the window controller and is never held across a CUPTI call (CUPTI
// may hold its own locks while it calls us back); the CUPTI kinds are switched afterwards by
// whichever thread finds them out of date (reconcile()).
#include <cupti.h>
#include <generated_nvtx_meta.h>
#include <pthread.h>
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
std::atomic<bool> g_activity_on{false};  // the window's kinds, as last switched
std::atomic<bool> g_want_on{false};      // as the window controller last decided
std::atomic<bool> g_switching{false};
std::atomic<bool> g_markers_for_run{false};
bool g_trace_cuda = true, g_trace_nvtx = true;  // --trace, set before any kind is enabled
std::atomic<int64_t> g_dropped{0};
std::mutex g_window_mu;  // guards g_window; never held across a CUPTI call
WindowController* g_window = nullptr;
std::chrono::steady_clock::time_point g_start;

// This thread's pushed NVTX range names. A plain pointer, so an NVTX call made during exit,
// after the thread's thread_local destructors ran, still finds valid memory; freed at thread
// exit through a pthread key.
thread_local std::vector<std::string>* t_nvtx_stack = nullptr;
pthread_key_t g_nvtx_key;
std::vector<std::string>& nvtx_stack() {
  if (!t_nvtx_stack) {
    t_nvtx_stack = new std::vector<std::string>();
    pthread_setspecific(g_nvtx_key, t_nvtx_stack);
  }
  return *t_nvtx_stack;
}
void free_nvtx_stack(void* p) {
  delete static_cast<std::vector<std::string>*>(p);
  t_nvtx_stack = nullptr;
}

// Runtime and driver callback ids whose API records are kept (is_recorded_api). Namespace scope
// and trivially destructible: nothing here is destroyed before the agent's exit handler runs.
constexpr size_t kMaxApis = 256;
CUpti_CallbackId g_runtime_apis[kMaxApis], g_driver_apis[kMaxApis];
size_t g_n_runtime = 0, g_n_driver = 0;

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

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
    g_dropped.fetch_add(static_cast<int64_t>(dropped));
  Agent* a = Agent::running();
  if (!buffer) return;
  if (a) a->pipeline().post_buffer(buffer, valid);  // parsed on the writer thread
}

// API records for the kept calls, chosen by name from every callback id CUPTI knows; on for the
// run (switching them inside a window lost them on a real H100).
void enable_api_records() {
  const char* name = nullptr;
  for (uint32_t id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE && g_n_runtime < kMaxApis; ++id)
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, id, &name) == CUPTI_SUCCESS && name &&
        is_recorded_api(name))
      g_runtime_apis[g_n_runtime++] = id;
  for (uint32_t id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE && g_n_driver < kMaxApis; ++id)
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, id, &name) == CUPTI_SUCCESS && name &&
        is_recorded_api(name))
      g_driver_apis[g_n_driver++] = id;
  for (size_t i = 0; i < g_n_runtime; ++i) cuptiActivityEnableRuntimeApi(g_runtime_apis[i], 1);
  for (size_t i = 0; i < g_n_driver; ++i) cuptiActivityEnableDriverApi(g_driver_apis[i], 1);
}

void enable_for_run(CUpti_ActivityKind k) {
  CUptiResult rc = cuptiActivityEnable(k);
  if (rc != CUPTI_SUCCESS && rc != CUPTI_ERROR_NOT_COMPATIBLE) warn("cuptiActivityEnable", rc);
}

// The kinds that follow the window.
void switch_kinds(bool on) {
  int kinds[16];
  int n = enabled_activity_kinds(kinds, 16, false);
  bool markers_for_run = g_markers_for_run.load();
  for (int i = 0; i < n; ++i) {
    auto k = static_cast<CUpti_ActivityKind>(kinds[i]);
    if (k == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) continue;  // on for the run
    if (k == CUPTI_ACTIVITY_KIND_MARKER) {
      if (markers_for_run || !g_trace_nvtx) continue;
    } else if (!g_trace_cuda) {
      continue;
    }
    CUptiResult rc = on ? cuptiActivityEnable(k) : cuptiActivityDisable(k);
    if (rc != CUPTI_SUCCESS && rc != CUPTI_ERROR_NOT_COMPATIBLE) warn("cuptiActivityEnable", rc);
  }
}

// Brings CUPTI's kinds to the state the window controller wants. Called with no lock of ours
// held; when two threads get here at once, the one switching applies the other's wish too.
void reconcile() {
  for (;;) {
    if (g_switching.exchange(true, std::memory_order_acquire)) return;
    for (bool want; (want = g_want_on.load()) != g_activity_on.load();) {
      switch_kinds(want);
      g_activity_on.store(want);
      if (Agent* a = Agent::running()) {
        a->set_window_open(want);
        a->pipeline().request_flush();
      }
    }
    g_switching.store(false, std::memory_order_release);
    if (g_want_on.load() == g_activity_on.load()) return;
  }
}

// A window change the controller decided, under g_window_mu: the edge goes to the collector (in
// order with every other edge, hence under the lock) and the kinds are switched after it.
struct Change {
  bool changed = false, finished = false;
};
Change decide(std::optional<bool> change, const std::string& opener = "") {
  Change c;
  if (!change) return c;
  c.changed = true;
  c.finished = !*change && g_window && g_window->finished();
  g_want_on.store(*change);
  if (Agent* a = Agent::running()) {
    bool on = *change;
    int64_t ts = host_now_ns();
    std::string name = on ? opener : "";
    a->pipeline().post_control([on, ts, name](Collector& col) { col.window_edge(on, ts, name); });
  }
  return c;
}

// After the lock is let go.
void carry_out(const Change& c) {
  if (!c.changed) return;
  reconcile();
  // Attach mode: a steps window that ended by itself (its last step ended) is done.
  if (c.finished)
    if (Agent* a = Agent::running(); a && a->config().attach()) a->window_finished();
}

// Attach mode: the daemon's windows (Agent calls these from its daemon thread, never from a
// CUPTI callback).
void attach_open_duration() {
  Change c;
  {
    std::lock_guard lk(g_window_mu);
    if (g_window) c = decide(g_window->open_duration());
  }
  carry_out(c);
}
void attach_open_steps(int64_t n) {
  // Step ranges arrive as NVTX callbacks and markers; both stay on from now.
  if (g_trace_nvtx && !g_markers_for_run.exchange(true)) enable_for_run(CUPTI_ACTIVITY_KIND_MARKER);
  cuptiEnableDomain(1, g_subscriber, CUPTI_CB_DOMAIN_NVTX);
  std::lock_guard lk(g_window_mu);
  if (g_window) g_window->open_steps(n);
}
void attach_close() {
  Change c;
  {
    std::lock_guard lk(g_window_mu);
    if (g_window) c = decide(g_window->close());
  }
  carry_out(c);
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
  // A forked child (no agent there) must not take a lock another thread of its parent may have
  // held at the fork.
  if (!Agent::running()) return;
  Change change;
  {
    std::lock_guard lk(g_window_mu);
    if (!g_window) return;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
      auto* info = static_cast<const CUpti_CallbackData*>(data);
      bool start = domain == CUPTI_CB_DOMAIN_RUNTIME_API
                       ? cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000
                       : cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart;
      // Open before the start call returns; close once the stop call has returned.
      if (start && info->callbackSite == CUPTI_API_ENTER)
        change = decide(g_window->on_profiler_api(true));
      if (!start && info->callbackSite == CUPTI_API_EXIT)
        change = decide(g_window->on_profiler_api(false));
    } else if (domain == CUPTI_CB_DOMAIN_NVTX) {
      auto* nv = static_cast<const CUpti_NvtxData*>(data);
      switch (cbid) {
        case CUPTI_CBID_NVTX_nvtxRangePushA:
        case CUPTI_CBID_NVTX_nvtxRangePushEx:
        case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
          const char* name = nvtx_push_name(cbid, nv->functionParams);
          auto& stack = nvtx_stack();
          stack.emplace_back(name ? name : "");
          change = decide(g_window->on_range_start(stack.back()), stack.back());
          break;
        }
        case CUPTI_CBID_NVTX_nvtxRangePop:
        case CUPTI_CBID_NVTX_nvtxDomainRangePop: {
          auto& stack = nvtx_stack();
          if (!stack.empty()) {
            std::string name = std::move(stack.back());
            stack.pop_back();
            change = decide(g_window->on_range_end(name));
          }
          break;
        }
        // Start/end ranges: keyed by the id nvtxRangeStart* returns (they may end on another
        // thread).
        case CUPTI_CBID_NVTX_nvtxRangeStartA:
        case CUPTI_CBID_NVTX_nvtxRangeStartEx:
        case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx:
          if (nv->functionReturnValue) {
            const char* name = nvtx_push_name(cbid, nv->functionParams);
            auto id = *static_cast<const nvtxRangeId_t*>(nv->functionReturnValue);
            change = decide(g_window->on_range_start_id(id, name ? name : ""), name ? name : "");
          }
          break;
        case CUPTI_CBID_NVTX_nvtxRangeEnd:
          change = decide(g_window->on_range_end_id(
              static_cast<const nvtxRangeEnd_params*>(nv->functionParams)->id));
          break;
        case CUPTI_CBID_NVTX_nvtxDomainRangeEnd:
          change = decide(g_window->on_range_end_id(
              static_cast<const nvtxDomainRangeEnd_params*>(nv->functionParams)->core.id));
          break;
        default:
          break;
      }
    }
  }
  carry_out(change);
}

bool push_ext(uint64_t id) {
  if (!g_activity_on.load(std::memory_order_relaxed)) return false;
  return cuptiActivityPushExternalCorrelationId(
             static_cast<CUpti_ExternalCorrelationKind>(kNcclExternalKind), id) == CUPTI_SUCCESS;
}

// Pops what push_ext pushed, whatever the window did in between (a stale id left on a thread's
// stack would be taken by every later launch of that thread).
void pop_ext() {
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
  // Before any kind is enabled (CUPTI's rule): API and marker records then carry gettid(), the
  // thread ids the NCCL rows and the rest of the system use, instead of pthread_self().
  rc = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  if (rc != CUPTI_SUCCESS) warn("cuptiSetThreadIdType", rc);
  rc = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (rc != CUPTI_SUCCESS) return fail("cuptiActivityRegisterCallbacks", rc);
  pthread_key_create(&g_nvtx_key, free_nvtx_stack);
  const WindowSpec& w = a.config().window;
  {
    std::lock_guard lk(g_window_mu);
    g_window = new WindowController(w);
    g_start = std::chrono::steady_clock::now();
  }
  // On for the run; the collector keeps the window's rows. External correlation comes only with
  // API records, so it goes with `api`.
  const TraceSet& trace = a.config().trace;
  g_trace_cuda = trace.cuda;
  g_trace_nvtx = trace.nvtx;
  if (trace.api) {
    enable_api_records();
    enable_for_run(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  }
  enable_for_run(CUPTI_ACTIVITY_KIND_DEVICE);
  if (trace.nvtx && (w.kind == WindowKind::Nvtx || w.kind == WindowKind::Steps)) {
    g_markers_for_run.store(true);
    enable_for_run(CUPTI_ACTIVITY_KIND_MARKER);
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
    Change c;
    {
      std::lock_guard lk(g_window_mu);
      if (!g_window) return;
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
      c = decide(g_window->on_tick(t));
    }
    carry_out(c);
  };
  a.attach_cupti(std::move(hooks), push_ext, pop_ext);
  Change c;
  {
    std::lock_guard lk(g_window_mu);
    if (w.kind == WindowKind::Daemon) {
      // A duration window the daemon opened before this process initialized CUDA is open now.
      a.set_window_ops(&kAttachOps);  // first: a later open goes through them
      c = decide(a.window_open() ? g_window->open_duration() : std::optional<bool>(false));
    } else {
      c = decide(g_window->enabled());  // the first edge: the collector filters from here
    }
  }
  if (c.changed && !g_want_on.load()) a.set_window_open(false);
  carry_out(c);
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
  std::call_once(once, [a] { start_cupti(*a); });
  return 1;
}

// CUDA's injection entry point and everything CUPTI: the activity buffers (from the pool, handed
// to the writer thread when complete), the capture window switched by cudaProfilerStart/Stop,
// NVTX ranges (told by the agent's own NVTX handlers, nvtx_hooks.cc), a duration or (attach mode)
// the node daemon, the device clock for the clock fit, dropped-record counts, and the
// external-correlation ids the NCCL interposer pushes around its launches.
//
// What is on for the run and what follows the window: CUPTI's thread ids are the system's
// (cuptiSetThreadIdType before any kind), API records of the kept calls and external correlation
// are on from the start; the collector keeps only their rows inside the window, whose edges the
// agent posts in the host clock. Kernels, copies, memsets and synchronization are switched with
// the window.
//
// Locking: g_window_mu guards the window controller and is never held across a CUPTI call (CUPTI
// may hold its own locks while it calls us back); the CUPTI kinds are switched afterwards by
// whichever thread finds them out of date (reconcile()).
//
// Other CUPTI clients (torch.profiler's Kineto, Nsight Systems): CUDA 13.0's CUPTI has one
// subscriber and one set of activity buffers per process. The agent subscribes under its name
// (cuptiSubscribe_v2, asking for several subscribers where CUPTI is 13.2 or later), so a refusal
// names the holder; the CUPTI calls by which another client takes CUPTI or lets it go come
// through this library (cupti_clients.cc), which hands CUPTI over to the job's own profiler and
// takes it back (--cupti yield, the default: yield_to, try_take_back below) or keeps it and says
// who lost (--cupti hold); and, for clients that reach CUPTI by other ways, it checks while a
// window is open that its own buffers still arrive (a DEVICE record dumped every recalibration).
// The agent's own calls of the exported functions go to the libcupti it loaded directly (real()).
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "capture/agent/agent.h"
#include "capture/agent/cupti_state.h"
#include "capture/agent/nccl_interpose.h"
#include "capture/cupti_parse.h"
#include "capture/cupti_subscriber.h"
#include "trace/diagnostics.h"

namespace braid::capture::agent {
namespace {

CUpti_SubscriberHandle g_subscriber = nullptr;
std::atomic<bool> g_activity_on{false};  // the window's kinds, as last switched
std::atomic<bool> g_want_on{false};      // as the window controller last decided
std::atomic<bool> g_switching{false};
bool g_trace_cuda = true;  // --trace cuda, set before any kind is enabled
std::atomic<int64_t> g_dropped{0};
std::mutex g_window_mu;  // guards g_window; never held across a CUPTI call
WindowController* g_window = nullptr;
// The window's kind and range name, for the NVTX handlers' lock-free check (set before they go
// live).
WindowKind g_nvtx_window_kind = WindowKind::All;
std::string g_nvtx_window_name;
std::chrono::steady_clock::time_point g_start;

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

}  // namespace

static_assert(std::is_trivially_destructible_v<RealCupti>);  // used during exit
const RealCupti& real() {
  static const RealCupti r = [] {
    RealCupti c;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cuptiGetTimestamp), &info) && info.dli_fname) {
      c.path = info.dli_fname;
      c.handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    }
    if (!c.handle) return c;
    auto get = [&](const char* n) { return dlsym(c.handle, n); };
    c.subscribe = reinterpret_cast<decltype(c.subscribe)>(get("cuptiSubscribe"));
    c.subscribe_v2 = reinterpret_cast<decltype(c.subscribe_v2)>(get("cuptiSubscribe_v2"));
    c.unsubscribe = reinterpret_cast<decltype(c.unsubscribe)>(get("cuptiUnsubscribe"));
    c.register_callbacks =
        reinterpret_cast<decltype(c.register_callbacks)>(get("cuptiActivityRegisterCallbacks"));
    c.disable = reinterpret_cast<decltype(c.disable)>(get("cuptiActivityDisable"));
    c.finalize = reinterpret_cast<decltype(c.finalize)>(get("cuptiFinalize"));
    c.nvtx_init = reinterpret_cast<decltype(c.nvtx_init)>(get("InitializeInjectionNvtx2"));
    return c;
  }();
  return r;
}

namespace {
std::atomic<bool> g_registered{false};  // braid's activity buffers are registered
}  // namespace

namespace {

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

// API records for the kept calls, chosen by name from every callback id CUPTI knows (once); on
// for the run (switching them inside a window lost them on a real H100), off when braid hands
// CUPTI over.
void choose_api_records() {
  const char* name = nullptr;
  for (uint32_t id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE && g_n_runtime < kMaxApis; ++id)
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, id, &name) == CUPTI_SUCCESS && name &&
        is_recorded_api(name))
      g_runtime_apis[g_n_runtime++] = id;
  for (uint32_t id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE && g_n_driver < kMaxApis; ++id)
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, id, &name) == CUPTI_SUCCESS && name &&
        is_recorded_api(name))
      g_driver_apis[g_n_driver++] = id;
}
void switch_api_records(bool on) {
  for (size_t i = 0; i < g_n_runtime; ++i) cuptiActivityEnableRuntimeApi(g_runtime_apis[i], on);
  for (size_t i = 0; i < g_n_driver; ++i) cuptiActivityEnableDriverApi(g_driver_apis[i], on);
}

void enable_for_run(CUpti_ActivityKind k) {
  CUptiResult rc = cuptiActivityEnable(k);
  if (rc != CUPTI_SUCCESS && rc != CUPTI_ERROR_NOT_COMPATIBLE) warn("cuptiActivityEnable", rc);
}

// The kinds that follow the window.
void switch_kinds(bool on) {
  int kinds[16];
  int n = enabled_activity_kinds(kinds, 16, false);
  for (int i = 0; i < n; ++i) {
    auto k = static_cast<CUpti_ActivityKind>(kinds[i]);
    if (k == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) continue;  // on for the run
    if (!g_trace_cuda) continue;
    CUptiResult rc = on ? cuptiActivityEnable(k) : real().disable(k);
    if (rc != CUPTI_SUCCESS && rc != CUPTI_ERROR_NOT_COMPATIBLE) warn("cuptiActivityEnable", rc);
  }
}

// Who holds CUPTI (cupti_state.h). g_owner_mu orders handing CUPTI over and taking it back; it is
// never held inside a CUPTI callback of braid's, and the window lock is never taken while waiting
// for it.
std::atomic<int> g_owner{static_cast<int>(Owner::None)};
std::atomic<bool> g_yielded{false};  // Owner::Yielded, read where braid would call CUPTI
std::atomic<bool> g_want_back{false};
// Braid handed only its subscription (its callbacks) to a client and still records: it takes the
// subscription back when a client unsubscribes (yield_subscription, try_take_back).
std::atomic<bool> g_sub_handed{false};
bool g_yield = true;  // --cupti yield; set before braid holds CUPTI
std::mutex g_owner_mu;
std::string g_gap_detail;  // under g_owner_mu: the hand-over, said again when it ends
// How the client let go: written where it does (maybe inside its CUPTI callback, so under a lock
// never held across a CUPTI call), read when braid takes CUPTI back.
std::mutex g_how_mu;
std::string g_back_how;
// Another client's cuptiFinalize in progress, and how many have finished: taking CUPTI back
// while one runs would lose braid's fresh subscription to it.
std::atomic<int> g_finalizing{0};
std::atomic<uint64_t> g_finalized{0};
// Not before this (steady clock, ns): a client that unsubscribes usually finalizes next (Kineto's
// teardown does both in one callback), and braid should come back once, after both.
std::atomic<int64_t> g_back_not_before{0};
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double seconds_in() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
}
std::string at_seconds() {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f s", seconds_in());
  return b;
}

// Brings CUPTI's kinds to the state the window controller wants. Called with no lock of ours
// held; when two threads get here at once, the one switching applies the other's wish too. While
// CUPTI is handed over nothing is switched (taking it back reconciles).
void reconcile() {
  for (;;) {
    if (g_switching.exchange(true, std::memory_order_acquire)) return;
    for (bool want; !g_yielded.load() && (want = g_want_on.load()) != g_activity_on.load();) {
      switch_kinds(want);
      g_activity_on.store(want);
      if (Agent* a = Agent::running()) {
        a->set_window_open(want);
        a->pipeline().request_flush();
      }
    }
    g_switching.store(false, std::memory_order_release);
    if (g_yielded.load() || g_want_on.load() == g_activity_on.load()) return;
  }
}

// A window change the controller decided, under g_window_mu: the edge goes to the collector (in
// order with every other edge, hence under the lock) and the kinds are switched after it. While
// CUPTI is handed over the edge waits: the window the controller wants opens when braid takes
// CUPTI back.
struct Change {
  bool changed = false, finished = false;
};
Change decide(std::optional<bool> change, const std::string& opener = "") {
  Change c;
  if (!change) return c;
  c.changed = true;
  c.finished = !*change && g_window && g_window->finished();
  g_want_on.store(*change);
  if (Agent* a = Agent::running(); a && !g_yielded.load()) {
    bool on = *change;
    int64_t ts = host_now_ns();
    std::string name = on ? opener : "";
    // The whole run's window (no --window) is not stored: the GUI opens on the GPU work then.
    const bool store = a->config().window.kind != WindowKind::All || a->config().attach();
    a->pipeline().post_control(
        [on, ts, name, store](Collector& col) { col.window_edge(on, ts, name, store); });
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
  // Step ranges reach the controller through the agent's NVTX handlers (nvtx_hooks.cc).
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

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* data) {
  // A forked child (no agent there) must not take a lock another thread of its parent may have
  // held at the fork.
  if (!Agent::running()) return;
  // Graph bookkeeping takes no window lock.
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) return on_graph_resource(cbid, data);
  if (is_graph_launch(domain, cbid))
    return on_graph_launch(domain, static_cast<const CUpti_CallbackData*>(data));
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

uint32_t g_cupti_version = 0;

// Subscribes braid under its name (a client refused later is told who holds CUPTI: "CUPTI for
// braid"; braid is told who holds it when refused). Where CUPTI is 13.2 or later braid asks for
// several subscribers, so a client that comes later may subscribe beside it (when the driver
// allows it). The subscription carries braid's callbacks only: the activity API (buffers, kinds)
// does not need one (register_buffers).
CUptiResult subscribe_callbacks(char* holder, size_t holder_size, const char** what) {
  *what = "finding libcupti's functions";
  if (!real().subscribe_v2 || !real().register_callbacks || !real().disable || !real().unsubscribe)
    return CUPTI_ERROR_NOT_INITIALIZED;
  if (!g_cupti_version && cuptiGetVersion(&g_cupti_version) != CUPTI_SUCCESS) g_cupti_version = 0;
  SubscriberParams132 params{};
  params.structSize = g_cupti_version >= kCuptiWithSeveralSubscribers
                          ? offsetof(SubscriberParams132, allowMultipleSubscribers) + 1
                          : CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "braid";
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = holder_size;
  params.allowMultipleSubscribers = 1;
  *what = "cuptiSubscribe";
  return real().subscribe_v2(&g_subscriber, on_callback, nullptr,
                             reinterpret_cast<CUpti_SubscriberParams*>(&params));
}

// Registers braid's activity buffers, with the thread ids braid wants (CUPTI's rule: before any
// kind is enabled): API and marker records then carry gettid(), the thread ids the NCCL rows and
// the rest of the system use, instead of pthread_self().
CUptiResult register_buffers(const char** what) {
  CUptiResult tid = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  if (tid != CUPTI_SUCCESS) warn("cuptiSetThreadIdType", tid);
  *what = "cuptiActivityRegisterCallbacks";
  CUptiResult rc = real().register_callbacks(buffer_requested, buffer_completed);
  if (rc == CUPTI_SUCCESS) g_registered.store(true);
  return rc;
}

// Both, as braid starts: its subscription, then its buffers.
CUptiResult subscribe_braid(char* holder, size_t holder_size, const char** what) {
  CUptiResult rc = subscribe_callbacks(holder, holder_size, what);
  if (rc != CUPTI_SUCCESS) return rc;
  rc = register_buffers(what);
  if (rc != CUPTI_SUCCESS) {
    real().unsubscribe(g_subscriber);
    g_subscriber = nullptr;
  }
  return rc;
}

// What braid records for the whole run and the callbacks it needs, switched on (after its
// subscription) or off (before it hands CUPTI over). The window's kinds follow reconcile().
void enable_callbacks(const CaptureConfig& cfg);
void switch_for_run(const CaptureConfig& cfg, bool on) {
  // External correlation comes only with API records, so it goes with `api`.
  auto kind_for_run = [on](CUpti_ActivityKind k) {
    if (on)
      enable_for_run(k);
    else
      real().disable(k);
  };
  if (cfg.trace.api) {
    switch_api_records(on);
    kind_for_run(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  }
  kind_for_run(CUPTI_ACTIVITY_KIND_DEVICE);
  if (on) enable_callbacks(cfg);  // off: braid's callbacks end with its subscription
}

// The callbacks braid needs, on its subscription (none while a client holds it).
void enable_callbacks(const CaptureConfig& cfg) {
  if (!g_subscriber) return;
  const WindowKind kind = cfg.window.kind;
  // CUDA graphs holding NCCL calls: node creation and cloning, graph launches (rare calls; the
  // launch callback numbers the replays in program order).
  if (cfg.trace.nccl) {
    for (CUpti_CallbackId id :
         {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
          CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING, CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED})
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, id);
    for (CUpti_CallbackId id : {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
                                CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000})
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    for (CUpti_CallbackId id :
         {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz})
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  if (kind == WindowKind::ProfilerApi) {
    cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                        CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000);
    cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                        CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000);
    cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                        CUPTI_DRIVER_TRACE_CBID_cuProfilerStart);
    cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                        CUPTI_DRIVER_TRACE_CBID_cuProfilerStop);
  }
}

// The gap in braid's records: the window open now closes (a whole-run window becomes a stored
// one), and at its end the window the controller wants opens again. Under g_window_mu, in order
// with the window's edges.
void post_gap(bool begins) {
  Agent* a = Agent::running();
  if (!a) return;
  int64_t ts = host_now_ns();
  bool reopen = !begins && g_want_on.load();
  a->pipeline().post_control(
      [begins, ts, reopen](Collector& col) { col.cupti_gap(begins, ts, reopen); });
}

void say_gap(const std::string& line, const std::string& detail, int64_t count) {
  std::fprintf(stderr, "braid capture: %s\n", line.c_str());
  if (Agent* a = Agent::running())
    a->pipeline().post(diag::make(diag::Code::capture_cupti_yielded, count, detail));
}

// The gap begins (g_owner_mu held): no window edges or kind switches until braid takes CUPTI
// back; a switch in progress on another thread finishes first.
void begin_gap(const std::string& tool, const std::string& how) {
  {
    std::lock_guard lk(g_window_mu);
    g_yielded.store(true);
    post_gap(true);
  }
  while (g_switching.load(std::memory_order_acquire)) std::this_thread::yield();
  g_owner.store(static_cast<int>(Owner::Yielded));
  g_gap_detail = "braid handed CUPTI to " + tool + " (its " + how + ") at " + at_seconds();
  say_gap("handed CUPTI to " + tool + " (its " + how +
              "): braid records no CUDA activity until that client lets CUPTI go (--cupti yield; "
              "--cupti hold keeps CUPTI)",
          g_gap_detail + "; not handed back by the end of the capture", 1);
}

void try_take_back();

PipelineHooks make_hooks(int canary_ms) {
  PipelineHooks hooks;
  hooks.parse = parse_with_canary;
  hooks.request_flush = [](bool forced) {
    if (g_yielded.load()) return;  // the buffers CUPTI holds now are the other client's
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
      c.set_count(diag::Code::capture_dropped_records, d,
                  "activity records CUPTI dropped for lack of buffer space (CUPTI's own count)");
  };
  hooks.on_tick = [canary_ms] {
    try_take_back();
    canary_tick(canary_ms);
    Change c;
    {
      std::lock_guard lk(g_window_mu);
      if (!g_window) return;
      c = decide(g_window->on_tick(seconds_in()));
    }
    carry_out(c);
  };
  return hooks;
}

bool start_cupti(Agent& a) {
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {0};
  const char* what = "";
  CUptiResult rc = subscribe_braid(holder, sizeof holder - 1, &what);
  if (rc != CUPTI_SUCCESS) {
    std::string detail = std::string(what) + " failed: " + result_name(rc);
    if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      detail += std::string(" (another profiler holds CUPTI: ") +
                (holder[0] ? holder : "e.g. Nsight Systems or the PyTorch profiler") + ")";
    std::fprintf(stderr, "braid capture: %s\n", detail.c_str());
    a.pipeline().post(diag::make(diag::Code::capture_cupti_unavailable, 1,
                                 "no CUDA activity captured: " + detail));
    return false;
  }
  g_yield = a.config().cupti == CuptiPolicy::Yield;
  g_owner.store(static_cast<int>(Owner::Holding));
  // Several subscribers granted, and one there before braid: both record.
  if (holder[0]) note_shared(holder);
  const WindowSpec& w = a.config().window;
  {
    std::lock_guard lk(g_window_mu);
    g_window = new WindowController(w);
    g_start = std::chrono::steady_clock::now();
  }
  // On for the run; the collector keeps the window's rows.
  const TraceSet& trace = a.config().trace;
  g_trace_cuda = trace.cuda;
  if (trace.api) choose_api_records();
  switch_for_run(a.config(), true);
  a.attach_cupti(make_hooks(a.config().recalibrate_ms), push_ext, pop_ext);
  g_nvtx_window_kind = w.kind;
  g_nvtx_window_name = w.nvtx_name;
  nvtx_hooks_start(trace.nvtx);
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

// Braid takes CUPTI back on its writer thread once the client it yielded to let go (never inside
// a CUPTI callback: that client may finalize CUPTI from one of its own). Its records come back
// with its buffers; its subscription too, unless the client holds one again (Kineto subscribes
// again right after its teardown unless CUPTI_LAZY_REINIT=1): braid then records without its
// callbacks and takes the subscription when a client next unsubscribes.
void try_take_back() {
  if (!g_want_back.load() || steady_ns() < g_back_not_before.load()) return;
  Agent* a = Agent::running();
  if (!a) return;
  std::string how;
  {
    std::lock_guard lk(g_how_mu);
    how = g_back_how;
  }
  {
    std::unique_lock ok(g_owner_mu);
    const Owner was = owner();
    const bool records = was == Owner::Yielded;  // else only the subscription is wanted back
    if (!records && !(was == Owner::Holding && g_sub_handed.load())) {
      g_want_back.store(false);
      return;
    }
    const uint64_t finalized = g_finalized.load();
    if (g_finalizing.load()) return;  // next tick
    g_want_back.store(false);
    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {0};
    const char* what = "";
    CUptiResult rc =
        g_subscriber ? CUPTI_SUCCESS : subscribe_callbacks(holder, sizeof holder - 1, &what);
    const bool subscribed = rc == CUPTI_SUCCESS;
    // Refused the subscription: the records alone come back.
    if (records && rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      rc = register_buffers(&what);
    else if (records && subscribed)
      rc = register_buffers(&what);
    if (rc != CUPTI_SUCCESS) {
      if (subscribed && g_subscriber) real().unsubscribe(g_subscriber);
      if (subscribed) g_subscriber = nullptr;
      std::string why = std::string(what) + ": " + result_name(rc) +
                        (holder[0] ? std::string(", held by ") + holder : std::string());
      if (records)
        say_gap("could not take CUPTI back after " + how + " (" + why + ")",
                g_gap_detail + "; braid could not take it back after " + how + " (" + why + ")", 0);
      return;
    }
    if (records)
      switch_for_run(a->config(), true);
    else
      enable_callbacks(a->config());
    if (g_finalizing.load() || g_finalized.load() != finalized) {
      // Finalized under braid meanwhile (the client's teardown unsubscribes, then finalizes):
      // the subscription and buffers are gone again; braid tries once the finalize is over.
      if (records) g_registered.store(false);
      g_subscriber = nullptr;
      g_want_back.store(true);
      return;
    }
    g_sub_handed.store(!subscribed);
    const std::string kept =
        subscribed ? std::string()
                   : "; its subscription stays with " +
                         (holder[0] ? std::string(holder) : std::string("that client")) +
                         ", so CUDA-graph launches of NCCL calls are not linked until it "
                         "unsubscribes";
    if (!records) {
      std::fprintf(stderr, "braid capture: took its CUPTI subscription back (%s)\n", how.c_str());
      return;
    }
    g_owner.store(static_cast<int>(holder[0] && subscribed ? Owner::Shared : Owner::Holding));
    {
      std::lock_guard lk(g_window_mu);
      g_yielded.store(false);
      post_gap(false);
    }
    say_gap("took CUPTI back (" + how + "): braid records again" + kept,
            g_gap_detail + "; took it back at " + at_seconds() + " (" + how + ")" + kept, 0);
  }
  reconcile();  // the window's kinds, as the controller wants them now
}

}  // namespace

Owner owner() { return static_cast<Owner>(g_owner.load()); }
bool yield_policy() { return g_yield; }
bool braid_registered() { return g_registered.load(); }
bool window_kinds_on() { return g_activity_on.load(); }

bool yield_to(const std::string& tool, const std::string& how) {
  std::lock_guard ok(g_owner_mu);
  Agent* a = Agent::running();
  if (owner() != Owner::Holding || !a) return false;
  begin_gap(tool, how);
  // Everything braid switched on goes off, then its records come out (the complete ones, then
  // the rest: a kernel still running has no end and is counted incomplete), then it unsubscribes.
  if (g_activity_on.exchange(false)) switch_kinds(false);
  a->set_window_open(false);
  switch_for_run(a->config(), false);
  cuptiActivityFlushAll(0);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_registered.store(false);
  if (g_subscriber) real().unsubscribe(g_subscriber);
  g_subscriber = nullptr;
  g_sub_handed.store(false);  // taking the records back takes the subscription too
  return true;
}

bool yield_subscription(const std::string& tool, const std::string& how) {
  std::lock_guard ok(g_owner_mu);
  Agent* a = Agent::running();
  // A cudaProfilerStart window needs braid's callbacks: there the client gets all of CUPTI.
  if (owner() != Owner::Holding || !a || !g_subscriber ||
      a->config().window.kind == WindowKind::ProfilerApi)
    return false;
  real().unsubscribe(g_subscriber);
  g_subscriber = nullptr;
  g_sub_handed.store(true);
  const std::string line =
      "handed its CUPTI subscription to " + tool + " (its " + how +
      "): braid still records CUDA activity; CUDA-graph launches of NCCL calls are not linked "
      "until that client unsubscribes (--cupti yield; --cupti hold keeps CUPTI)";
  std::fprintf(stderr, "braid capture: %s\n", line.c_str());
  a->pipeline().post(
      diag::make(diag::Code::capture_cupti_callbacks_yielded, 1, line + " at " + at_seconds()));
  return true;
}

bool subscription_handed() { return g_sub_handed.load(); }

void lost_to(const std::string& tool, const std::string& how) {
  if (owner() != Owner::Holding && owner() != Owner::Shared) return;
  std::lock_guard ok(g_owner_mu);
  Agent* a = Agent::running();
  if ((owner() != Owner::Holding && owner() != Owner::Shared) || !a) return;
  begin_gap(tool, how);
  g_activity_on.store(false);
  a->set_window_open(false);
  g_registered.store(false);
  g_subscriber = nullptr;  // finalize ends every subscription
}

// May run inside the client's CUPTI callback: no lock that is held across a CUPTI call.
void take_back_soon(const std::string& how, int after_ms) {
  if (owner() != Owner::Yielded && !g_sub_handed.load()) return;
  {
    std::lock_guard lk(g_how_mu);
    g_back_how = "its client " + how;
  }
  g_back_not_before.store(steady_ns() + int64_t{after_ms} * 1000000);
  g_want_back.store(true);
  if (Agent* a = Agent::running()) a->pipeline().request_flush();  // the writer thread wakes
}

void finalize_begins() { g_finalizing.fetch_add(1); }
void finalize_ends() {
  g_finalized.fetch_add(1);
  g_finalizing.fetch_sub(1);
}

void note_shared(const std::string& tool) {
  int holding = static_cast<int>(Owner::Holding);
  if (!g_owner.compare_exchange_strong(holding, static_cast<int>(Owner::Shared))) return;
  std::string line = tool + " subscribed to CUPTI beside braid (CUPTI " +
                     std::to_string(g_cupti_version) +
                     " serves several subscribers): both record, and --cupti has nothing to decide";
  std::fprintf(stderr, "braid capture: %s\n", line.c_str());
  if (Agent* a = Agent::running())
    a->pipeline().post(diag::make(diag::Code::capture_cupti_shared, 1, line));
}

void shared_client_left() {
  int shared = static_cast<int>(Owner::Shared);
  g_owner.compare_exchange_strong(shared, static_cast<int>(Owner::Holding));
}

// ---- the window, for the agent's own NVTX handlers (nvtx_hooks.cc) ----

bool nvtx_window_cares(std::string_view name) {
  switch (g_nvtx_window_kind) {
    case WindowKind::Nvtx:
      return name == g_nvtx_window_name;
    case WindowKind::Steps:
    case WindowKind::Daemon:  // attach mode's steps windows
      return step_from_range_name(name).has_value();
    default:
      return false;
  }
}

void nvtx_window_range(bool start, std::string_view name) {
  Change c;
  {
    std::lock_guard lk(g_window_mu);
    if (!g_window) return;
    c = start ? decide(g_window->on_range_start(name), std::string(name))
              : decide(g_window->on_range_end(name));
  }
  carry_out(c);
}

bool nvtx_window_range_id(bool start, uint64_t id, std::string_view name) {
  Change c;
  bool followed = start;
  {
    std::lock_guard lk(g_window_mu);
    if (!g_window) return false;
    if (start)
      c = decide(g_window->on_range_start_id(id, name), std::string(name));
    else if ((followed = g_window->has_range(id)))
      c = decide(g_window->on_range_end_id(id));
  }
  carry_out(c);
  return followed;
}

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

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
//
// Other CUPTI clients (torch.profiler's Kineto, Nsight Systems): CUDA 13.0's CUPTI has one
// subscriber and one set of activity buffers per process. The agent subscribes under its name
// (cuptiSubscribe_v2), so a refusal names the holder; it exports the CUPTI calls by which another
// client takes CUPTI (subscribe, buffer registration, disabling a kind, finalize) and forwards them
// to the libcupti it loaded, saying when one refused that client (its trace has no GPU activity)
// or took records from braid; and, for clients that reach CUPTI by other ways, it checks while a
// window is open that its own buffers still arrive (a DEVICE record dumped every recalibration).
// The agent's own calls of those functions go to that libcupti directly (real()).
#include <cupti.h>
#include <dlfcn.h>
#include <generated_nvtx_meta.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "capture/agent/agent.h"
#include "capture/cupti_parse.h"
#include "capture/nccl_interpose.h"
#include "trace/diagnostics.h"

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
    if (Agent* a = Agent::running()) a->name_this_thread();  // a thread of NVTX ranges only
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

// The libcupti this library loaded (found from a CUPTI function it does not define) and the
// functions of it that this library also exports for other clients.
struct RealCupti {
  void* handle = nullptr;
  const char* path = nullptr;
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiSubscribe_v2) subscribe_v2 = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiFinalize) finalize = nullptr;
  int (*nvtx_init)(void*) = nullptr;  // InitializeInjectionNvtx2
};
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
    c.register_callbacks =
        reinterpret_cast<decltype(c.register_callbacks)>(get("cuptiActivityRegisterCallbacks"));
    c.disable = reinterpret_cast<decltype(c.disable)>(get("cuptiActivityDisable"));
    c.finalize = reinterpret_cast<decltype(c.finalize)>(get("cuptiFinalize"));
    c.nvtx_init = reinterpret_cast<decltype(c.nvtx_init)>(get("InitializeInjectionNvtx2"));
    return c;
  }();
  return r;
}

// What another CUPTI client did, said once per code on stderr and counted in diagnostics.
std::atomic<bool> g_said_contended{false}, g_said_taken{false};
std::atomic<bool> g_registered{false};  // braid's activity buffers are registered
void report_other_client(bool taken, const std::string& detail) {
  std::atomic<bool>& said = taken ? g_said_taken : g_said_contended;
  if (!said.exchange(true)) std::fprintf(stderr, "braid capture: %s\n", detail.c_str());
  Agent* a = Agent::running();
  if (!a) return;
  Diagnostic d;
  diag::set_code(d, taken ? diag::Code::capture_cupti_taken : diag::Code::capture_cupti_contended);
  d.detail = detail;
  a->pipeline().post(d);
}
std::string result_name(CUptiResult rc) {
  const char* s = nullptr;
  cuptiGetResultString(rc, &s);
  return s ? s : "CUPTI error " + std::to_string(static_cast<int>(rc));
}

// Canary: while a window is open, a DEVICE record dumped into braid's buffers every
// recalibration period must come back through them; two in a row that do not mean another
// client took the activity API by a way the exported functions do not see.
std::atomic<bool> g_canary_out{false};
int g_canary_misses = 0;                              // writer thread only
std::chrono::steady_clock::time_point g_last_canary;  // writer thread only
void canary_tick(int period_ms) {
  if (!g_activity_on.load() || !g_registered.load() || g_said_taken.load()) {
    g_canary_out.store(false);
    g_canary_misses = 0;
    return;
  }
  auto now = std::chrono::steady_clock::now();
  if (now - g_last_canary < std::chrono::milliseconds(period_ms)) return;
  g_last_canary = now;
  if (g_canary_out.load()) {
    if (++g_canary_misses >= 2) {
      report_other_client(true,
                          "no activity buffer has reached braid for two checks although its window "
                          "is open: another CUPTI client took CUPTI's activity buffers (braid's "
                          "kernel, copy and API records stop here)");
      return;
    }
  } else {
    g_canary_misses = 0;
  }
  g_canary_out.store(true);
  cuptiActivityEnableAndDump(CUPTI_ACTIVITY_KIND_DEVICE);
}

// Hands parsed records on, noting the canary's DEVICE record.
class CanaryHandler final : public ActivityHandler {
 public:
  explicit CanaryHandler(ActivityHandler& h) : h_(h) {}
  void on_kernel(const KernelActivity& k) override { h_.on_kernel(k); }
  void on_mem(const MemActivity& m) override { h_.on_mem(m); }
  void on_api(const ApiActivity& a) override { h_.on_api(a); }
  void on_sync(const SyncActivity& s) override { h_.on_sync(s); }
  void on_marker(const MarkerActivity& m) override { h_.on_marker(m); }
  void on_external_correlation(const ExternalCorrelationActivity& e) override {
    h_.on_external_correlation(e);
  }
  void on_device(const DeviceActivity& d) override {
    g_canary_out.store(false);
    h_.on_device(d);
  }
  void on_unhandled(uint32_t kind) override { h_.on_unhandled(kind); }

 private:
  ActivityHandler& h_;
};

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
    CUptiResult rc = on ? cuptiActivityEnable(k) : real().disable(k);
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

// CUDA graphs holding NCCL calls (GraphBook): nodes created inside an NCCL call, their clones at
// instantiation, and each graph launch, turned into replayed calls on the launching thread (so
// they take their sequence numbers in program order, as ordinary calls do).
void on_graph_resource(CUpti_CallbackId cbid, const void* data) {
  auto* res = static_cast<const CUpti_ResourceData*>(data);
  auto* g = res ? static_cast<const CUpti_GraphData*>(res->resourceDescriptor) : nullptr;
  Agent* a = Agent::running();
  if (!g || !a) return;
  uint64_t node = 0, original = 0;
  uint32_t graph = 0, exec = 0;
  switch (cbid) {
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:
      if (cuptiGetGraphNodeId(g->node, &node) == CUPTI_SUCCESS &&
          cuptiGetGraphId(g->graph, &graph) == CUPTI_SUCCESS)
        note_graph_node(graph, node);
      break;
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED:
      if (g->originalNode && g->graphExec &&
          cuptiGetGraphNodeId(g->originalNode, &original) == CUPTI_SUCCESS &&
          cuptiGetGraphNodeId(g->node, &node) == CUPTI_SUCCESS &&
          cuptiGetGraphExecId(g->graphExec, &exec) == CUPTI_SUCCESS)
        a->graphs().cloned(original, node, exec);
      break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED:
      if (g->graphExec && g->graph && cuptiGetGraphExecId(g->graphExec, &exec) == CUPTI_SUCCESS &&
          cuptiGetGraphId(g->graph, &graph) == CUPTI_SUCCESS)
        a->graphs().exec_created(exec, graph);
      break;
    default:
      break;
  }
}

thread_local bool t_in_runtime_graph_launch = false;  // its driver call is the same launch
void on_graph_launch(CUpti_CallbackDomain domain, const CUpti_CallbackData* info) {
  bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (info->callbackSite != CUPTI_API_ENTER) {
    if (runtime) t_in_runtime_graph_launch = false;
    return;
  }
  if (!runtime && t_in_runtime_graph_launch) return;
  if (runtime) t_in_runtime_graph_launch = true;
  Agent* a = Agent::running();
  if (!a || !info->functionParams) return;
  CUgraphExec exec_handle =
      runtime
          ? reinterpret_cast<CUgraphExec>(
                static_cast<const cudaGraphLaunch_v10000_params*>(info->functionParams)->graphExec)
          : static_cast<const cuGraphLaunch_params*>(info->functionParams)->hGraph;
  uint32_t exec = 0;
  if (!exec_handle || cuptiGetGraphExecId(exec_handle, &exec) != CUPTI_SUCCESS) return;
  int64_t now = host_now_ns();
  auto tid = static_cast<int64_t>(syscall(SYS_gettid));
  bool in_window = a->window_open();
  std::vector<std::pair<NcclCall, std::vector<uint64_t>>> replays;
  a->graphs().launched(exec, [&](const NcclCall& t, const std::vector<uint64_t>& nodes) {
    replays.emplace_back(t, nodes);
  });
  std::map<int64_t, std::pair<int64_t, int32_t>> groups;  // captured group -> this launch's
  for (auto& [t, nodes] : replays)
    if (t.group_id) {
      auto& g = groups[t.group_id];
      if (!g.first) g.first = a->next_id();
      ++g.second;
    }
  for (auto& [t, nodes] : replays) {
    NcclCall r = t;
    r.graph = kGraphReplay;
    r.call_id = a->next_id();
    r.external_id = static_cast<uint64_t>(r.call_id);
    r.seq = take_seq(r);
    r.group_id = t.group_id ? groups[t.group_id].first : 0;
    r.group_size = t.group_id ? groups[t.group_id].second : 1;
    r.tid = tid;
    r.enqueue = r.ret = now;
    r.result = 0;
    r.in_window = in_window;
    a->pipeline().post(r);
    for (uint64_t node : nodes)
      a->pipeline().post(NcclGraphLink{info->correlationId, node, r.external_id});
  }
}

bool is_graph_launch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
    return cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 ||
           cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    return cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch ||
           cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  return false;
}

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
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {0};
  auto fail = [&](const char* what, CUptiResult rc) {
    const char* s = nullptr;
    cuptiGetResultString(rc, &s);
    std::string detail = std::string(what) + " failed: " + (s ? s : "unknown CUPTI error");
    if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      detail += std::string(" (another profiler holds CUPTI: ") +
                (holder[0] ? holder : "e.g. Nsight Systems or the PyTorch profiler") + ")";
    std::fprintf(stderr, "braid capture: %s\n", detail.c_str());
    Diagnostic d;
    d.rank = -1;
    diag::set_code(d, diag::Code::capture_cupti_unavailable);
    d.detail = "no CUDA activity captured: " + detail;
    a.pipeline().post(d);
    return false;
  };
  if (!real().subscribe_v2 || !real().register_callbacks || !real().disable)
    return fail("finding libcupti's functions", CUPTI_ERROR_NOT_INITIALIZED);
  // Under braid's name: a client refused later is told who holds CUPTI ("CUPTI for braid"), and
  // braid is told who holds it when it is refused.
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "braid";
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = sizeof holder - 1;
  CUptiResult rc = real().subscribe_v2(&g_subscriber, on_callback, nullptr, &params);
  if (rc != CUPTI_SUCCESS) return fail("cuptiSubscribe", rc);
  // Before any kind is enabled (CUPTI's rule): API and marker records then carry gettid(), the
  // thread ids the NCCL rows and the rest of the system use, instead of pthread_self().
  rc = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  if (rc != CUPTI_SUCCESS) warn("cuptiSetThreadIdType", rc);
  rc = real().register_callbacks(buffer_requested, buffer_completed);
  if (rc != CUPTI_SUCCESS) return fail("cuptiActivityRegisterCallbacks", rc);
  g_registered.store(true);
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
  // CUDA graphs holding NCCL calls: node creation and cloning, graph launches (rare calls; the
  // launch callback numbers the replays in program order).
  if (trace.nccl) {
    for (CUpti_CallbackId id :
         {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
          CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED})
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, id);
    for (CUpti_CallbackId id : {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
                                CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000})
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    for (CUpti_CallbackId id :
         {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz})
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
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
    CanaryHandler ch(h);
    ParseStats st = parse_activity_buffer(buf, valid, ch);
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
      c.set_count(diag::Code::capture_dropped_records, d,
                  "activity records CUPTI dropped for lack of buffer space (CUPTI's own count)");
  };
  int canary_ms = a.config().recalibrate_ms;
  hooks.on_tick = [canary_ms] {
    canary_tick(canary_ms);
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

// ---- CUPTI as other clients in the process call it (forwarded to the libcupti loaded above) ----
// A client that reaches these by the process's symbol lookup (libcupti linked dynamically, as
// PyTorch's wheels do) is seen here; braid's own calls never come through them.

namespace braid::capture::agent {
namespace {
bool braid_holds() { return g_subscriber != nullptr; }

void other_subscribed(CUptiResult rc) {
  if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && braid_holds())
    report_other_client(false,
                        "another CUPTI client (e.g. torch.profiler) asked for CUPTI and was "
                        "refused because braid holds it (CUDA 13.0 CUPTI takes one subscriber): "
                        "that profiler records no GPU activity in this process; run it without "
                        "braid record to use it");
}
}  // namespace
}  // namespace braid::capture::agent

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  using namespace braid::capture::agent;
  if (!real().subscribe) return CUPTI_ERROR_NOT_INITIALIZED;
  CUptiResult rc = real().subscribe(subscriber, callback, userdata);
  other_subscribed(rc);
  return rc;
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata,
                  CUpti_SubscriberParams* params) {
  using namespace braid::capture::agent;
  if (!real().subscribe_v2) return CUPTI_ERROR_NOT_INITIALIZED;
  CUptiResult rc = real().subscribe_v2(subscriber, callback, userdata, params);
  other_subscribed(rc);
  return rc;
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                               CUpti_BuffersCallbackCompleteFunc completed) {
  using namespace braid::capture::agent;
  if (!real().register_callbacks) return CUPTI_ERROR_NOT_INITIALIZED;
  CUptiResult rc = real().register_callbacks(requested, completed);
  if (g_registered.load()) {
    if (rc == CUPTI_SUCCESS)
      report_other_client(true,
                          "another CUPTI client (e.g. torch.profiler) registered its own activity "
                          "buffers: braid's kernel, copy and API records stop here");
    else
      report_other_client(false, "another CUPTI client's activity buffers were refused (" +
                                     result_name(rc) +
                                     "): that profiler records no GPU activity in this process");
  }
  return rc;
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiActivityDisable(CUpti_ActivityKind kind) {
  using namespace braid::capture::agent;
  if (!real().disable) return CUPTI_ERROR_NOT_INITIALIZED;
  CUptiResult rc = real().disable(kind);
  bool braids = false;
  int kinds[16];
  int n = braid::capture::enabled_activity_kinds(kinds, 16, true);
  for (int i = 0; i < n; ++i) braids = braids || kinds[i] == static_cast<int>(kind);
  // The window's kinds matter while it is open; API, external-correlation and marker records are
  // on for the run.
  bool for_run = kind == CUPTI_ACTIVITY_KIND_RUNTIME || kind == CUPTI_ACTIVITY_KIND_DRIVER ||
                 kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION ||
                 kind == CUPTI_ACTIVITY_KIND_MARKER;
  if (rc == CUPTI_SUCCESS && braids && g_registered.load() && (for_run || g_activity_on.load()))
    report_other_client(true,
                        "another CUPTI client (e.g. torch.profiler stopping) switched off "
                        "CUPTI activity kind " +
                            std::to_string(static_cast<int>(kind)) +
                            ", which braid records: its records of that kind stop here");
  return rc;
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI cuptiFinalize(void) {
  using namespace braid::capture::agent;
  if (!real().finalize) return CUPTI_ERROR_NOT_INITIALIZED;
  if (g_registered.load())
    report_other_client(true,
                        "another CUPTI client finalized CUPTI: braid's CUDA records stop here");
  return real().finalize();
}

// NVTX's injection hook. `braid record` names this library in NVTX_INJECTION64_PATH, and it hands
// NVTX to the libcupti it loaded itself, so NVTX's ranges reach the CUPTI instance braid
// subscribed to whichever libcupti the job's library path finds (a path fixed at build time could
// name another copy, whose CUPTI nobody listens to).
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    void* get_export_table) {
  using namespace braid::capture::agent;
  return real().nvtx_init ? real().nvtx_init(get_export_table) : 0;
}

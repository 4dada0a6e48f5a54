// A CUPTI call recorder for the agent's CPU tests: libbraid_fake_cupti.so exports the CUPTI calls
// the agent makes (cupti.h signatures) and behaves like CUDA 13's CUPTI where the agent depends
// on it, and a small fake CUDA runtime and NVTX (fakecuda_*, fakenvtx_*) that model programs
// (fake_cuda_job.cc) call instead of a GPU:
//  - activity records are written, back to back as CUPTI lays them out (CUPTI's own structs), into
//    the buffers the client's bufferRequested callback hands out; a full buffer goes to
//    bufferCompleted, and cuptiActivityFlushAll hands over the partly filled one;
//  - a CUDA call makes an API record only when its kind (RUNTIME/DRIVER) or its callback id
//    (cuptiActivityEnableRuntimeApi) is enabled, and, with EXTERNAL_CORRELATION enabled, one
//    external-correlation record per kind whose per-thread stack is not empty, before it;
//  - thread ids in records are pthread_self() unless cuptiSetThreadIdType(SYSTEM) was called
//    (then gettid()), as CUPTI documents;
//  - NVTX as NVTX v3 works: a library's NVTX calls (fakenvtx_*) go through a function table whose
//    range slots the injection library fills at the first call (NVTX_INJECTION64_PATH's
//    InitializeInjectionNvtx2, handed NVTX's export table); with no tool the calls do nothing.
//    CUPTI's own InitializeInjectionNvtx2 puts CUPTI's handlers there, which make MARKER records
//    when MARKER is enabled (the record is taken before the callbacks run) and call the
//    subscribers for the NVTX domain when it is enabled;
//  - cuptiSubscribe(_v2) fails with CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED while another
//    subscriber holds CUPTI (FAKE_CUPTI_OTHER_SUBSCRIBER=NAME models a profiler named NAME there
//    first), writing "CUPTI for <holder>" where cuptiSubscribe_v2 asks for the holder's name;
//    cuptiUnsubscribe ends a subscription (its callbacks stop; the activity API is untouched);
//    callbacks are enabled per subscriber;
//  - the activity API is one per process, as CUDA 13.0 documents it (a single subscriber's):
//    cuptiActivityRegisterCallbacks by a second client replaces the first client's buffer
//    callbacks (the partly filled buffer goes back to the first), cuptiActivityDisable switches a
//    kind off for everyone, cuptiActivityEnableAndDump(DEVICE) dumps a DEVICE record;
//  - cuptiFinalize tears CUPTI down as CUPTI documents it: each client gets its partly filled
//    buffer, then every subscription, buffer registration, kind and callback is gone;
//  - several subscribers, modelled on CUPTI 13.2's cuptiSubscribe_v2 (allowMultipleSubscribers:
//    "If multiple subscribers are allowed, [oldSubscriberName] will be the name of the first
//    subscriber, but CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED will not be returned"):
//    with FAKE_CUPTI_VERSION >= 130200 (cuptiGetVersion) and FAKE_CUPTI_MULTI_SUBSCRIBER=1 (a
//    driver that allows it) a subscription is admitted beside subscribers that all asked for
//    several, and a buffer registration made while several are subscribed adds a client that
//    receives every record beside the others (kinds stay process-wide: CUPTI 13.5's
//    per-subscriber activity calls are not modelled);
//  - CUDA graphs (fakecuda_begin_capture ... fakecuda_graph_launch): a launch or copy on a stream
//    being captured makes its API record but no device record; it becomes a graph node, reported
//    through the resource callback GRAPHNODE_CREATED on the capturing thread. Instantiation, as
//    CUPTI 13 reports it on the instantiating thread: GRAPHEXEC_CREATE_STARTING; per node, the
//    executable's copy created (GRAPHNODE_CREATED) and cloned (GRAPHNODE_CLONED with `graph` the
//    copies' graph, whose id is the one the executable gets, `originalGraph`/`originalNode` the
//    captured ones, and no `graphExec`: it does not exist yet); then GRAPHEXEC_CREATED (`graph` the
//    captured graph, `graphExec` the executable). A graph launch makes one API record and, per
//    node, a kernel or copy record carrying the launch's correlation id, the copy's node id
//    (graphNodeId) and the executable's id (graphId). What real CUPTI gives, and the sources
//    (NVIDIA's cuda_graphs_trace sample, Triton's Proton profiler): capture/graph_book.h.
//    cuptiGetGraphNodeId/GraphId/GraphExecId read the ids (the handles are the ids);
//  - NVTX reaches CUPTI only through NVTX's injection: a library named in NVTX_INJECTION64_PATH
//    that does not hand NVTX to this CUPTI (another copy of libcupti, or no such library) leaves
//    CUPTI's handlers out of the table, as a real mismatch does;
//  - a kernel runs 1 us and a copy 0.5 us from its launch; FAKE_CUPTI_KERNEL_NS=N models a GPU
//    behind the host instead: each stream runs its kernels (N ns each) and copies one after the
//    other, so the work of a step ends after the host has moved on (past the NVTX range that
//    closed a capture window, say), as on a real GPU.
// Every CUPTI call is logged, one line per call, to FAKE_CUPTI_LOG when set:
//   "<gettid> <callback depth> <function> <argument>"
// where the depth is how many CUPTI callbacks this thread is inside (the agent holds its window
// lock inside them), so tests can check which thread called what, and what was called from
// inside a callback. Completed buffers are delivered on the thread that filled them (real CUPTI
// also uses a worker thread; the agent must cope with both).
#include <cupti.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <generated_nvtx_meta.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "capture/cupti_subscriber.h"

#define FAKE extern "C" __attribute__((visibility("default")))

namespace {

std::mutex g_mu;  // guards the state below; never held while calling the client
// Subscribers (the handle is the Subscriber's address). CUDA 13.0 admits one; with
// FAKE_CUPTI_MULTI_SUBSCRIBER=1 and FAKE_CUPTI_VERSION >= 130200 (CUPTI 13.2 on a driver that
// allows several) a subscription is admitted beside the others when every one of them asked for
// several subscribers (CUpti_SubscriberParams::allowMultipleSubscribers, CUPTI 13.2's field).
struct Subscriber {
  CUpti_CallbackFunc callback = nullptr;
  void* user = nullptr;
  std::string name;
  bool allow_multiple = false;
  std::set<int> domains;
  std::set<std::pair<int, uint32_t>> callbacks;
};
// Never destroyed (as CUPTI's own state outlives the process's static destructors): a subscription
// a client never ended is still reachable at exit, not a leak of the client's.
std::vector<Subscriber*>& g_subs = *new std::vector<Subscriber*>();
bool g_kinds[CUPTI_ACTIVITY_KIND_COUNT] = {};
std::set<uint32_t> g_runtime_api, g_driver_api;  // per callback id
CUpti_ActivityThreadIdType g_tid_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;
// The activity API's clients: one per process (a second registration replaces the first), or,
// with several subscribers admitted, one per registration, each receiving every record.
struct Client {
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  uint8_t* buf = nullptr;
  size_t size = 0, used = 0;
};
std::vector<Client> g_clients;
uint64_t g_dropped = 0;
std::atomic<uint32_t> g_corr{0};
std::atomic<uint32_t> g_marker_id{0};
std::atomic<bool> g_nvtx_attached{false};  // InitializeInjectionNvtx2 reached this instance
thread_local int t_in_callback = 0;
thread_local std::vector<uint64_t> t_ext[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];
thread_local std::vector<uint32_t> t_ranges;  // ids of this thread's pushed NVTX ranges

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

long gettid_() { return syscall(SYS_gettid); }

// Where a kernel or copy of `ns` (the default run time) launched now on `stream` runs: from its
// launch, or, with FAKE_CUPTI_KERNEL_NS, queued behind the stream's earlier work (kernels taking
// that long).
struct Span {
  uint64_t start, end;
};
Span gpu_span(uint32_t stream, int64_t ns, bool kernel) {
  static const int64_t kernel_ns = [] {
    const char* v = std::getenv("FAKE_CUPTI_KERNEL_NS");
    return v ? std::atoll(v) : 0;
  }();
  const int64_t now = now_ns();
  if (kernel_ns <= 0) return {static_cast<uint64_t>(now), static_cast<uint64_t>(now + ns)};
  static std::mutex mu;
  static std::map<uint32_t, int64_t> tail;  // when each stream's queued work ends
  std::lock_guard lk(mu);
  const int64_t start = std::max(now, tail[stream]);
  tail[stream] = start + (kernel ? kernel_ns : ns);
  return {static_cast<uint64_t>(start), static_cast<uint64_t>(tail[stream])};
}

// As a library that is safe to fork under: the child never inherits g_mu locked.
[[maybe_unused]] const int g_atfork =
    pthread_atfork([] { g_mu.lock(); }, [] { g_mu.unlock(); }, [] { g_mu.unlock(); });

void log_call(const char* fn, const std::string& arg = "") {
  static int fd = [] {
    const char* p = std::getenv("FAKE_CUPTI_LOG");
    return p ? open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  }();
  if (fd < 0) return;
  char line[256];
  int n =
      std::snprintf(line, sizeof line, "%ld %d %s %s\n", gettid_(), t_in_callback, fn, arg.c_str());
  if (n > 0) (void)!write(fd, line, static_cast<size_t>(std::min<int>(n, sizeof line - 1)));
}

// FAKE_CUPTI_PROBE_LOCK=1: a switching call (enable, disable, flush) first has another thread
// call the subscriber, as CUPTI does from its own threads, and waits up to 200 ms for it to
// return. A client holding the lock its callback takes across the call keeps the probe waiting:
// logged as "<function> UNDER_LOCK" (real CUPTI can deadlock there: it may hold its own lock
// while calling back).
void probe_lock(const char* fn) {
  const char* on = std::getenv("FAKE_CUPTI_PROBE_LOCK");
  if (!on || *on != '1') return;
  CUpti_CallbackFunc cb;
  void* user;
  {
    std::lock_guard lk(g_mu);
    if (g_subs.empty()) return;
    cb = g_subs.front()->callback;
    user = g_subs.front()->user;
  }
  struct Probe {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto probe = std::make_shared<Probe>();
  std::thread([probe, cb, user] {
    nvtxMarkA_params p{"braid-fake-cupti-probe"};
    CUpti_NvtxData d{"nvtxMarkA", &p, nullptr};
    cb(user, CUPTI_CB_DOMAIN_NVTX, CUPTI_CBID_NVTX_nvtxMarkA, &d);
    std::lock_guard lk(probe->mu);
    probe->done = true;
    probe->cv.notify_all();
  }).detach();
  std::unique_lock lk(probe->mu);
  if (!probe->cv.wait_for(lk, std::chrono::milliseconds(200), [&] { return probe->done; }))
    log_call(fn, "UNDER_LOCK");
}

uint32_t thread_id() {
  std::lock_guard lk(g_mu);
  return g_tid_type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM ? static_cast<uint32_t>(gettid_())
                                                            : static_cast<uint32_t>(pthread_self());
}

bool kind_on(CUpti_ActivityKind k) {
  std::lock_guard lk(g_mu);
  return g_kinds[k];
}

size_t record_size(CUpti_ActivityKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_MARKER:
      return sizeof(CUpti_ActivityMarker2);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
      return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_DEVICE:
      return sizeof(CUpti_ActivityDevice5);
    default:
      return 0;
  }
}

// Appends one record to every client's buffer; a full buffer is handed to its client after the
// lock is let go.
template <typename T>
void emit(const T& rec) {
  struct Full {
    CUpti_BuffersCallbackCompleteFunc complete;
    uint8_t* buf;
    size_t size, used;
  };
  std::vector<Full> full;
  {
    std::lock_guard lk(g_mu);
    for (Client& c : g_clients) {
      if (!c.request || !c.complete) continue;
      if (c.buf && c.used + sizeof rec > c.size) {
        full.push_back({c.complete, c.buf, c.size, c.used});
        c.buf = nullptr;
      }
      if (!c.buf) {
        size_t max_records = 0;
        c.request(&c.buf, &c.size, &max_records);
        c.used = 0;
        if (c.buf && c.size < sizeof rec) c.buf = nullptr;
      }
      if (c.buf) {
        std::memcpy(c.buf + c.used, &rec, sizeof rec);
        c.used += sizeof rec;
      } else {
        ++g_dropped;
      }
    }
  }
  for (const Full& f : full) f.complete(nullptr, 0, f.buf, f.size, f.used);
}

// Hands every client its partly filled buffer (cuptiActivityFlushAll; also at cuptiFinalize).
void flush_clients() {
  std::vector<Client> out;
  {
    std::lock_guard lk(g_mu);
    for (Client& c : g_clients)
      if (c.buf && c.used > 0) {
        out.push_back(c);
        c.buf = nullptr;
        c.used = 0;
      }
  }
  for (const Client& c : out)
    if (c.complete) c.complete(nullptr, 0, c.buf, c.size, c.used);
}

void deliver(int domain, uint32_t cbid, const void* data) {
  std::vector<std::pair<CUpti_CallbackFunc, void*>> to;
  {
    std::lock_guard lk(g_mu);
    for (Subscriber* sub : g_subs)
      if (sub->callback && (sub->domains.count(domain) || sub->callbacks.count({domain, cbid})))
        to.emplace_back(sub->callback, sub->user);
  }
  ++t_in_callback;
  for (auto& [cb, user] : to) cb(user, static_cast<CUpti_CallbackDomain>(domain), cbid, data);
  --t_in_callback;
}

// One runtime API call: callbacks around it, its API record preceded by the external-correlation
// records of this thread, then its work's device records.
template <typename Work>
void runtime_call(CUpti_runtime_api_trace_cbid cbid, const char* name, Work&& work,
                  const void* params = nullptr) {
  uint32_t corr = ++g_corr;
  CUpti_CallbackData cd{};
  cd.callbackSite = CUPTI_API_ENTER;
  cd.functionName = name;
  cd.functionParams = params;
  cd.correlationId = corr;
  deliver(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &cd);
  int64_t start = now_ns();
  int64_t end = now_ns();
  bool traced;
  {
    std::lock_guard lk(g_mu);
    traced = g_kinds[CUPTI_ACTIVITY_KIND_RUNTIME] || g_runtime_api.count(cbid);
  }
  if (traced) {
    if (kind_on(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) {
      for (int k = 0; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++k) {
        if (t_ext[k].empty()) continue;
        CUpti_ActivityExternalCorrelation e{};
        e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        e.externalKind = static_cast<CUpti_ExternalCorrelationKind>(k);
        e.externalId = t_ext[k].back();
        e.correlationId = corr;
        emit(e);
      }
    }
    CUpti_ActivityAPI a{};
    a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a.cbid = cbid;
    a.start = static_cast<uint64_t>(start);
    a.end = static_cast<uint64_t>(end);
    a.processId = static_cast<uint32_t>(getpid());
    a.threadId = thread_id();
    a.correlationId = corr;
    emit(a);
  }
  work(corr);  // the device's records come after the call's (asynchronous work)
  cd.callbackSite = CUPTI_API_EXIT;
  deliver(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &cd);
}

// Kernel and marker names live as long as CUPTI's own copies do (the process), not as long as
// the caller's.
const char* keep_name(const char* name) {
  if (!name) return nullptr;
  static auto* names = new std::set<std::string>();
  std::lock_guard lk(g_mu);
  return names->insert(name).first->c_str();
}

struct RuntimeName {
  uint32_t cbid;
  const char* name;
};
constexpr RuntimeName kRuntimeNames[] = {
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel_v7000"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, "cudaMemcpyAsync_v3020"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, "cudaStreamSynchronize_v3020"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000, "cudaProfilerStart_v4000"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000, "cudaProfilerStop_v4000"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch_v10000"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020, "cudaGetDevice_v3020"},
};

// CUDA graphs: node, graph and executable-graph ids are the handles' values.
struct Node {
  uint64_t id;
  bool copy;
  const char* name;
  uint64_t bytes;
};
std::mutex g_graph_mu;
std::map<uint32_t, uint32_t> g_capturing;  // stream -> graph being captured
std::map<uint32_t, std::vector<Node>> g_graphs;
std::map<uint32_t, std::pair<uint32_t, std::vector<Node>>> g_execs;  // exec -> graph, clones
uint64_t g_next_node = 100;
uint32_t g_next_graph = 0;

void graph_callback(CUpti_CallbackId cbid, uint32_t graph, uint64_t node, uint64_t original,
                    uint32_t exec, uint32_t original_graph = 0) {
  CUpti_GraphData g{};
  g.graph = reinterpret_cast<CUgraph>(static_cast<uintptr_t>(graph));
  g.originalGraph = reinterpret_cast<CUgraph>(static_cast<uintptr_t>(original_graph));
  g.node = reinterpret_cast<CUgraphNode>(static_cast<uintptr_t>(node));
  g.originalNode = reinterpret_cast<CUgraphNode>(static_cast<uintptr_t>(original));
  g.graphExec = reinterpret_cast<CUgraphExec>(static_cast<uintptr_t>(exec));
  CUpti_ResourceData r{};
  r.resourceDescriptor = &g;
  deliver(CUPTI_CB_DOMAIN_RESOURCE, cbid, &r);
}

// Work on a stream being captured becomes a node of its graph: true when it did.
bool captured(uint32_t stream, bool copy, const char* name, uint64_t bytes) {
  uint32_t graph;
  uint64_t id;
  {
    std::lock_guard lk(g_graph_mu);
    auto it = g_capturing.find(stream);
    if (it == g_capturing.end()) return false;
    graph = it->second;
    id = ++g_next_node;
    g_graphs[graph].push_back({id, copy, name, bytes});
  }
  graph_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, graph, id, 0, 0);
  return true;
}

}  // namespace

// ---- CUPTI ----

FAKE CUptiResult cuptiGetResultString(CUptiResult r, const char** s) {
  *s = r == CUPTI_SUCCESS ? "CUPTI_SUCCESS"
       : r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
           ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
           : "CUPTI_ERROR_UNKNOWN";
  return CUPTI_SUCCESS;
}

namespace {
using braid::capture::kCuptiWithSeveralSubscribers;
using braid::capture::SubscriberParams132;

uint32_t version() {
  const char* v = std::getenv("FAKE_CUPTI_VERSION");
  return v && *v ? static_cast<uint32_t>(std::atoll(v)) : 130001;  // CUDA 13.0.1's CUPTI
}
bool several_subscribers() {
  const char* m = std::getenv("FAKE_CUPTI_MULTI_SUBSCRIBER");
  return version() >= kCuptiWithSeveralSubscribers && m && *m == '1';
}

// Admits a subscriber (g_mu held), or says who holds CUPTI.
CUptiResult subscribe(CUpti_SubscriberHandle* handle, CUpti_CallbackFunc cb, void* user,
                      const std::string& name, bool allow_multiple, std::string* holder) {
  const char* other = std::getenv("FAKE_CUPTI_OTHER_SUBSCRIBER");  // a profiler there first
  if (other && *other) {
    *holder = std::string("CUPTI for ") + other;
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  if (!g_subs.empty()) *holder = "CUPTI for " + g_subs.front()->name;
  bool admitted = g_subs.empty() || several_subscribers();
  for (Subscriber* sub : g_subs) admitted = admitted && sub->allow_multiple;
  if (!admitted) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  auto* sub = new Subscriber();
  sub->callback = cb;
  sub->user = user;
  sub->name = name;
  sub->allow_multiple = allow_multiple;
  g_subs.push_back(sub);
  *handle = reinterpret_cast<CUpti_SubscriberHandle>(sub);
  return CUPTI_SUCCESS;
}

Subscriber* find(CUpti_SubscriberHandle h) {
  for (Subscriber* sub : g_subs)
    if (reinterpret_cast<CUpti_SubscriberHandle>(sub) == h) return sub;
  return nullptr;
}
}  // namespace

FAKE CUptiResult cuptiGetVersion(uint32_t* v) {
  *v = version();
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* s, CUpti_CallbackFunc cb, void* user) {
  log_call("cuptiSubscribe");
  std::lock_guard lk(g_mu);
  std::string holder;
  return subscribe(s, cb, user, "", false, &holder);
}

FAKE CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* s, CUpti_CallbackFunc cb, void* user,
                                   CUpti_SubscriberParams* params) {
  const char* name = params && params->subscriberName ? params->subscriberName : "";
  auto* p132 = reinterpret_cast<SubscriberParams132*>(params);
  const bool allow = version() >= kCuptiWithSeveralSubscribers && p132 &&
                     p132->structSize > offsetof(SubscriberParams132, allowMultipleSubscribers) &&
                     p132->allowMultipleSubscribers;
  log_call("cuptiSubscribe_v2", std::string(name) + (allow ? " allow-multiple" : ""));
  std::lock_guard lk(g_mu);
  std::string holder;
  CUptiResult rc = subscribe(s, cb, user, name, allow, &holder);
  // The holder's name on a refusal; beside others, the first subscriber's (CUPTI 13.2).
  if (params && params->oldSubscriberName && params->oldSubscriberSize > 0 && !holder.empty())
    std::snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", holder.c_str());
  return rc;
}

// As CUPTI: every resource is released (each client gets its partly filled buffer first), every
// subscription ends, every kind and callback is off; the next call starts CUPTI afresh.
FAKE CUptiResult cuptiFinalize() {
  log_call("cuptiFinalize");
  flush_clients();
  std::lock_guard lk(g_mu);
  for (Subscriber* sub : g_subs) delete sub;
  g_subs.clear();
  g_clients.clear();
  for (bool& k : g_kinds) k = false;
  g_runtime_api.clear();
  g_driver_api.clear();
  g_tid_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle h) {
  log_call("cuptiUnsubscribe");
  std::lock_guard lk(g_mu);
  Subscriber* sub = find(h);
  if (!sub) return CUPTI_ERROR_INVALID_PARAMETER;
  g_subs.erase(std::find(g_subs.begin(), g_subs.end(), sub));
  delete sub;
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle h,
                                   CUpti_CallbackDomain d) {
  log_call("cuptiEnableDomain", std::to_string(d) + " " + std::to_string(enable));
  std::lock_guard lk(g_mu);
  Subscriber* sub = find(h);
  if (!sub) return CUPTI_ERROR_INVALID_PARAMETER;
  if (enable)
    sub->domains.insert(d);
  else
    sub->domains.erase(d);
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle h,
                                     CUpti_CallbackDomain d, CUpti_CallbackId cbid) {
  log_call("cuptiEnableCallback", std::to_string(d) + ":" + std::to_string(cbid));
  std::lock_guard lk(g_mu);
  Subscriber* sub = find(h);
  if (!sub) return CUPTI_ERROR_INVALID_PARAMETER;
  if (enable)
    sub->callbacks.insert({d, cbid});
  else
    sub->callbacks.erase({d, cbid});
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain d, uint32_t cbid, const char** name) {
  *name = nullptr;
  if (d == CUPTI_CB_DOMAIN_RUNTIME_API)
    for (auto& n : kRuntimeNames)
      if (n.cbid == cbid) *name = n.name;
  return *name ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

FAKE CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
  log_call("cuptiSetThreadIdType", std::to_string(type));
  std::lock_guard lk(g_mu);
  g_tid_type = type;
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                CUpti_BuffersCallbackCompleteFunc done) {
  log_call("cuptiActivityRegisterCallbacks");
  Client previous;
  {
    std::lock_guard lk(g_mu);
    for (const Client& c : g_clients)
      if (c.complete == done) return CUPTI_SUCCESS;  // registered already
    Client fresh;
    fresh.request = req;
    fresh.complete = done;
    if (g_subs.size() > 1) {  // several subscribers: one set of buffers each
      g_clients.push_back(fresh);
    } else {  // one per process: it replaces the first client's (which gets its partial buffer)
      if (!g_clients.empty()) previous = g_clients.front();
      g_clients.assign(1, fresh);
    }
  }
  if (previous.buf && previous.used > 0)
    previous.complete(nullptr, 0, previous.buf, previous.size, previous.used);
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityEnable(CUpti_ActivityKind k) {
  log_call("cuptiActivityEnable", std::to_string(k));
  probe_lock("cuptiActivityEnable");
  if (k >= CUPTI_ACTIVITY_KIND_COUNT) return CUPTI_ERROR_INVALID_KIND;
  std::lock_guard lk(g_mu);
  g_kinds[k] = true;
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityEnableAndDump(CUpti_ActivityKind k) {
  log_call("cuptiActivityEnableAndDump", std::to_string(k));
  if (k >= CUPTI_ACTIVITY_KIND_COUNT) return CUPTI_ERROR_INVALID_KIND;
  {
    std::lock_guard lk(g_mu);
    g_kinds[k] = true;
  }
  if (k == CUPTI_ACTIVITY_KIND_DEVICE) {  // the existing devices' records
    CUpti_ActivityDevice5 d{};
    d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
    d.id = 0;
    d.name = "Fake GPU";
    emit(d);
  }
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityDisable(CUpti_ActivityKind k) {
  log_call("cuptiActivityDisable", std::to_string(k));
  probe_lock("cuptiActivityDisable");
  if (k >= CUPTI_ACTIVITY_KIND_COUNT) return CUPTI_ERROR_INVALID_KIND;
  std::lock_guard lk(g_mu);
  g_kinds[k] = false;
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  log_call("cuptiActivityEnableRuntimeApi", std::to_string(cbid) + " " + std::to_string(enable));
  probe_lock("cuptiActivityEnableRuntimeApi");
  std::lock_guard lk(g_mu);
  if (enable)
    g_runtime_api.insert(cbid);
  else
    g_runtime_api.erase(cbid);
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
  log_call("cuptiActivityEnableDriverApi", std::to_string(cbid) + " " + std::to_string(enable));
  probe_lock("cuptiActivityEnableDriverApi");
  std::lock_guard lk(g_mu);
  if (enable)
    g_driver_api.insert(cbid);
  else
    g_driver_api.erase(cbid);
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  log_call("cuptiActivityFlushAll", std::to_string(flag));
  probe_lock("cuptiActivityFlushAll");
  flush_clients();
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  std::lock_guard lk(g_mu);
  *dropped = g_dropped;
  g_dropped = 0;  // as CUPTI: the count since the last call
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiGetTimestamp(uint64_t* t) {
  *t = static_cast<uint64_t>(now_ns());
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** rec) {
  size_t off = 0;
  if (*rec) {
    size_t n = record_size((*rec)->kind);
    if (n == 0) return CUPTI_ERROR_INVALID_KIND;
    off = static_cast<size_t>(reinterpret_cast<uint8_t*>(*rec) - buffer) + n;
  }
  if (off >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  auto* next = reinterpret_cast<CUpti_Activity*>(buffer + off);
  size_t n = record_size(next->kind);
  if (n == 0 || off + n > valid) return CUPTI_ERROR_INVALID_KIND;
  *rec = next;
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind k,
                                                        uint64_t id) {
  log_call("cuptiActivityPushExternalCorrelationId", std::to_string(k) + " " + std::to_string(id));
  if (k >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
  t_ext[k].push_back(id);
  return CUPTI_SUCCESS;
}

FAKE CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind k,
                                                       uint64_t* last) {
  log_call("cuptiActivityPopExternalCorrelationId", std::to_string(k));
  if (k >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
  if (t_ext[k].empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (last) *last = t_ext[k].back();
  t_ext[k].pop_back();
  return CUPTI_SUCCESS;
}

// ---- the fake CUDA runtime and NVTX the model programs call ----

// As the CUDA driver at cuInit: loads CUDA_INJECTION64_PATH and calls its InitializeInjection.
FAKE int fakecuda_init() {
  static int rc = [] {
    const char* path = std::getenv("CUDA_INJECTION64_PATH");
    if (!path || !*path) return 0;
    void* h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) return -1;
    auto init = reinterpret_cast<int (*)()>(dlsym(h, "InitializeInjection"));
    return init ? init() : -1;
  }();
  return rc;
}

// How many ids this thread has on its external-correlation stack of `kind`.
FAKE int fakecupti_ext_depth(int kind) {
  if (kind < 0 || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE) return -1;
  return static_cast<int>(t_ext[kind].size());
}

// The thread-id type in force (what the agent chose).
FAKE int fakecupti_thread_id_type() {
  std::lock_guard lk(g_mu);
  return g_tid_type;
}

FAKE void fakecuda_launch(uint32_t stream, const char* kernel) {
  runtime_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel",
               [&](uint32_t corr) {
                 if (captured(stream, false, keep_name(kernel), 0)) return;
                 const Span run = gpu_span(stream, 1000, true);  // recorded or not, it runs
                 if (!kind_on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) return;
                 CUpti_ActivityKernel10 k{};
                 k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
                 k.start = run.start;
                 k.end = run.end;
                 k.deviceId = 0;
                 k.contextId = 1;
                 k.streamId = stream;
                 k.correlationId = corr;
                 k.name = keep_name(kernel);
                 emit(k);
               });
}

FAKE void fakecuda_memcpy(uint32_t stream, uint64_t bytes) {
  runtime_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, "cudaMemcpyAsync",
               [&](uint32_t corr) {
                 if (captured(stream, true, nullptr, bytes)) return;
                 const Span run = gpu_span(stream, 500, false);
                 if (!kind_on(CUPTI_ACTIVITY_KIND_MEMCPY)) return;
                 CUpti_ActivityMemcpy6 m{};
                 m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
                 m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
                 m.bytes = bytes;
                 m.start = run.start;
                 m.end = run.end;
                 m.contextId = 1;
                 m.streamId = stream;
                 m.correlationId = corr;
                 emit(m);
               });
}

FAKE void fakecuda_sync(uint32_t stream) {
  runtime_call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, "cudaStreamSynchronize",
               [&](uint32_t corr) {
                 if (!kind_on(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) return;
                 CUpti_ActivitySynchronization2 s{};
                 s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
                 s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
                 s.start = static_cast<uint64_t>(now_ns());
                 s.end = s.start + 100;
                 s.correlationId = corr;
                 s.contextId = 1;
                 s.streamId = stream;
                 emit(s);
               });
}

FAKE CUptiResult cuptiGetGraphNodeId(CUgraphNode node, uint64_t* id) {
  *id = reinterpret_cast<uintptr_t>(node);
  return CUPTI_SUCCESS;
}
FAKE CUptiResult cuptiGetGraphId(CUgraph graph, uint32_t* id) {
  *id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(graph));
  return CUPTI_SUCCESS;
}
FAKE CUptiResult cuptiGetGraphExecId(CUgraphExec exec, uint32_t* id) {
  *id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(exec));
  return CUPTI_SUCCESS;
}

FAKE void fakecuda_begin_capture(uint32_t stream) {
  std::lock_guard lk(g_graph_mu);
  g_capturing[stream] = ++g_next_graph;
}
FAKE int fakecuda_is_capturing(uint32_t stream) {
  std::lock_guard lk(g_graph_mu);
  return g_capturing.count(stream) ? 1 : 0;
}
FAKE uint32_t fakecuda_end_capture(uint32_t stream) {
  std::lock_guard lk(g_graph_mu);
  uint32_t g = g_capturing[stream];
  g_capturing.erase(stream);
  return g;
}
// The executable's copies of the nodes live in a graph of their own, whose id (from the graph ids)
// the executable takes, as CUPTI numbers them.
FAKE uint32_t fakecuda_graph_instantiate(uint32_t graph) {
  uint32_t exec;
  std::vector<std::pair<uint64_t, uint64_t>> clones;  // original, clone
  {
    std::lock_guard lk(g_graph_mu);
    exec = ++g_next_graph;
    auto& e = g_execs[exec];
    e.first = graph;
    for (const Node& n : g_graphs[graph]) {
      Node c = n;
      c.id = ++g_next_node;
      e.second.push_back(c);
      clones.emplace_back(n.id, c.id);
    }
  }
  graph_callback(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING, graph, 0, 0, 0);
  for (auto& [original, clone] : clones) {
    graph_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, exec, clone, 0, 0);
    graph_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, exec, clone, original, 0, graph);
  }
  graph_callback(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, graph, 0, 0, exec);
  return exec;
}
FAKE void fakecuda_graph_launch(uint32_t exec, uint32_t stream) {
  std::vector<Node> nodes;
  {
    std::lock_guard lk(g_graph_mu);
    nodes = g_execs[exec].second;
  }
  cudaGraphLaunch_v10000_params params{
      reinterpret_cast<cudaGraphExec_t>(static_cast<uintptr_t>(exec)),
      reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream))};
  runtime_call(
      CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch",
      [&](uint32_t corr) {
        for (const Node& n : nodes) {
          int64_t t = now_ns();
          if (n.copy) {
            if (!kind_on(CUPTI_ACTIVITY_KIND_MEMCPY)) continue;
            CUpti_ActivityMemcpy6 m{};
            m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
            m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
            m.bytes = n.bytes;
            m.start = static_cast<uint64_t>(t);
            m.end = m.start + 500;
            m.contextId = 1;
            m.streamId = stream;
            m.correlationId = corr;
            m.graphNodeId = n.id;
            m.graphId = exec;  // the executable's id, though the field says graph
            emit(m);
          } else {
            if (!kind_on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) continue;
            CUpti_ActivityKernel10 k{};
            k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            k.start = static_cast<uint64_t>(t);
            k.end = k.start + 1000;
            k.contextId = 1;
            k.streamId = stream;
            k.correlationId = corr;
            k.name = n.name;
            k.graphNodeId = n.id;
            k.graphId = exec;
            emit(k);
          }
        }
      },
      &params);
}

// A call no capture keeps (its API record is not asked for by the agent).
FAKE void fakecuda_get_device() {
  runtime_call(CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020, "cudaGetDevice", [](uint32_t) {});
}

FAKE void fakecuda_profiler(int start) {
  runtime_call(start ? CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000
                     : CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000,
               start ? "cudaProfilerStart" : "cudaProfilerStop", [](uint32_t) {});
}

// NVTX's injection entry point (libcupti exports it; NVTX_INJECTION64_PATH names libcupti, or a
// library that hands NVTX on to it).
// ---- NVTX: CUPTI's handlers, and NVTX itself as a library compiled with its headers has it ----

namespace {
void marker(CUpti_ActivityFlag flag, uint32_t id, const char* name) {
  if (!kind_on(CUPTI_ACTIVITY_KIND_MARKER)) return;
  CUpti_ActivityMarker2 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MARKER;
  m.flags = flag;
  m.timestamp = static_cast<uint64_t>(now_ns());
  m.id = id;
  m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  m.objectId.pt.processId = static_cast<uint32_t>(getpid());
  m.objectId.pt.threadId = thread_id();
  m.name = keep_name(name);
  m.domain = nullptr;
  emit(m);
}

// CUPTI's NVTX handlers: a MARKER record when the kind is on (taken before the callbacks run),
// then the subscribers' NVTX callbacks.
int NVTX_API cupti_push_a(const char* name) {
  uint32_t id = ++g_marker_id;
  t_ranges.push_back(id);
  marker(CUPTI_ACTIVITY_FLAG_MARKER_START, id, name);
  nvtxRangePushA_params p{name};
  CUpti_NvtxData d{"nvtxRangePushA", &p, nullptr};
  deliver(CUPTI_CB_DOMAIN_NVTX, CUPTI_CBID_NVTX_nvtxRangePushA, &d);
  return static_cast<int>(t_ranges.size()) - 1;
}
int NVTX_API cupti_pop() {
  uint32_t id = 0;
  if (!t_ranges.empty()) {
    id = t_ranges.back();
    t_ranges.pop_back();
  }
  marker(CUPTI_ACTIVITY_FLAG_MARKER_END, id, nullptr);
  CUpti_NvtxData d{"nvtxRangePop", nullptr, nullptr};
  deliver(CUPTI_CB_DOMAIN_NVTX, CUPTI_CBID_NVTX_nvtxRangePop, &d);
  return static_cast<int>(t_ranges.size());
}
nvtxRangeId_t NVTX_API cupti_start_a(const char* name) {
  uint32_t id = ++g_marker_id;
  marker(CUPTI_ACTIVITY_FLAG_MARKER_START, id, name);
  nvtxRangeId_t rid = id;
  nvtxRangeStartA_params p{name};
  CUpti_NvtxData d{"nvtxRangeStartA", &p, &rid};
  deliver(CUPTI_CB_DOMAIN_NVTX, CUPTI_CBID_NVTX_nvtxRangeStartA, &d);
  return rid;
}
void NVTX_API cupti_end(nvtxRangeId_t id) {
  marker(CUPTI_ACTIVITY_FLAG_MARKER_END, static_cast<uint32_t>(id), nullptr);
  nvtxRangeEnd_params p{id};
  CUpti_NvtxData d{"nvtxRangeEnd", &p, nullptr};
  deliver(CUPTI_CB_DOMAIN_NVTX, CUPTI_CBID_NVTX_nvtxRangeEnd, &d);
}
}  // namespace

// NVTX's injection entry point (libcupti exports it; NVTX_INJECTION64_PATH names libcupti, or a
// library that hands NVTX on to it): as CUPTI, fills the range slots of NVTX's table.
FAKE int InitializeInjectionNvtx2(void* get_export_table) {
  log_call("InitializeInjectionNvtx2");
  if (!get_export_table) return 0;
  auto get = reinterpret_cast<NvtxGetExportTableFunc_t>(get_export_table);
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable core = nullptr;
  unsigned n = 0;
  if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n)) return 0;
  auto put = [&](unsigned id, auto fn) {
    if (id < n && core[id]) *core[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
  };
  put(NVTX_CBID_CORE_RangePushA, &cupti_push_a);
  put(NVTX_CBID_CORE_RangePop, &cupti_pop);
  put(NVTX_CBID_CORE_RangeStartA, &cupti_start_a);
  put(NVTX_CBID_CORE_RangeEnd, &cupti_end);
  g_nvtx_attached.store(true);
  return 1;
}

namespace {
// NVTX's function table, one instance: the slots the injection library fills (NVTX's own
// initializing functions are modelled by nvtx_init() before each call), read through NVTX's
// export table as real NVTX hands it out.
NvtxFunctionPointer g_core[NVTX_CBID_CORE_SIZE] = {};
NvtxFunctionPointer g_core2[NVTX_CBID_CORE2_SIZE] = {};
NvtxFunctionPointer* g_core_slots[NVTX_CBID_CORE_SIZE];
NvtxFunctionPointer* g_core2_slots[NVTX_CBID_CORE2_SIZE];
int NVTX_API module_table(NvtxCallbackModule m, NvtxFunctionTable* out, unsigned* size) {
  if (m == NVTX_CB_MODULE_CORE) {
    for (unsigned i = 0; i < NVTX_CBID_CORE_SIZE; ++i) g_core_slots[i] = &g_core[i];
    *out = g_core_slots;
    *size = NVTX_CBID_CORE_SIZE;
    return 1;
  }
  if (m == NVTX_CB_MODULE_CORE2) {
    for (unsigned i = 0; i < NVTX_CBID_CORE2_SIZE; ++i) g_core2_slots[i] = &g_core2[i];
    *out = g_core2_slots;
    *size = NVTX_CBID_CORE2_SIZE;
    return 1;
  }
  return 0;
}
const NvtxExportTableCallbacks g_callbacks_table{sizeof(NvtxExportTableCallbacks), module_table};
const void* NVTX_API nvtx_export_table(uint32_t id) {
  return id == NVTX_ETID_CALLBACKS ? &g_callbacks_table : nullptr;
}

// As NVTX at its first call: loads the injection library and calls its init, once; a refusal
// leaves every slot empty.
void nvtx_init() {
  static const bool once = [] {
    const char* path = std::getenv("NVTX_INJECTION64_PATH");
    void* h = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    auto init = h ? reinterpret_cast<int (*)(NvtxGetExportTableFunc_t)>(
                        dlsym(h, "InitializeInjectionNvtx2"))
                  : nullptr;
    if (!init || init(&nvtx_export_table) == 0) {
      for (auto& f : g_core) f = nullptr;
      for (auto& f : g_core2) f = nullptr;
    }
    return true;
  }();
  (void)once;
}
template <typename Fn>
Fn slot(unsigned id) {
  nvtx_init();
  return reinterpret_cast<Fn>(g_core[id]);
}
}  // namespace

// The model programs' NVTX calls: what nvtxRangePushA & co. do in a library compiled with NVTX's
// headers (call the slot; nothing without a tool).
FAKE int fakenvtx_push(const char* name) {
  auto f = slot<nvtxRangePushA_impl_fntype>(NVTX_CBID_CORE_RangePushA);
  return f ? f(name) : -1;
}
FAKE int fakenvtx_pop() {
  auto f = slot<nvtxRangePop_impl_fntype>(NVTX_CBID_CORE_RangePop);
  return f ? f() : -1;
}
FAKE uint64_t fakenvtx_start(const char* name) {
  auto f = slot<nvtxRangeStartA_impl_fntype>(NVTX_CBID_CORE_RangeStartA);
  return f ? f(name) : 0;
}
FAKE void fakenvtx_end(uint64_t id) {
  if (auto f = slot<nvtxRangeEnd_impl_fntype>(NVTX_CBID_CORE_RangeEnd)) f(id);
}

// NVTX ranges, recorded by the agent itself. `braid record` names this library in
// NVTX_INJECTION64_PATH, so NVTX calls InitializeInjectionNvtx2 here (once per NVTX instance:
// each library compiled with NVTX's headers has its own). The agent first hands NVTX to the
// libcupti it loaded, as before, so CUPTI and the job's other CUPTI clients see NVTX as they would
// without braid; then it puts its own handlers in the range slots of NVTX's function table
// (push/pop, start/end, and their domain forms), each of which records the event and calls the
// handler that was there (CUPTI's), returning its result.
//
// The hot path (a push or pop of a range no capture window cares about) takes no lock and makes
// no system call: the host clock (clock_gettime, in the vDSO), and an append to the calling
// thread's own log (capture/nvtx_log.h), which the writer thread reads. CUPTI's MARKER records,
// which cost about 270 ns a pair on an H100 (issue 32), are no longer asked for. A range whose
// name can open or close the window (--nvtx NAME, step ranges for --steps and attach-mode steps)
// goes to the window controller under its lock, once per such range.
#define NVTX_NO_IMPL
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "capture/agent/agent.h"
#include "capture/agent/cupti_state.h"
#include "capture/nvtx_log.h"

namespace braid::capture::agent {
namespace {

// What the slots held before the agent's handlers (CUPTI's), called after recording.
struct Previous {
  nvtxRangePushA_impl_fntype push_a = nullptr;
  nvtxRangePushEx_impl_fntype push_ex = nullptr;
  nvtxRangePop_impl_fntype pop = nullptr;
  nvtxRangeStartA_impl_fntype start_a = nullptr;
  nvtxRangeStartEx_impl_fntype start_ex = nullptr;
  nvtxRangeEnd_impl_fntype end = nullptr;
  nvtxDomainRangePushEx_impl_fntype d_push = nullptr;
  nvtxDomainRangePop_impl_fntype d_pop = nullptr;
  nvtxDomainRangeStartEx_impl_fntype d_start = nullptr;
  nvtxDomainRangeEnd_impl_fntype d_end = nullptr;
  nvtxDomainCreateA_impl_fntype d_create = nullptr;
  nvtxDomainRegisterStringA_impl_fntype d_string = nullptr;
};
Previous g_prev;

std::atomic<bool> g_on{false};      // the agent runs and records NVTX or has a window on it
std::atomic<bool> g_record{false};  // --trace nvtx
std::atomic<uint64_t> g_own_ids{1ull << 62};  // range ids when no handler was there to give one

// Names of domains and registered strings by handle: written on the rare registration (under a
// lock), read on the hot path without one. Open addressing; a full table names nothing more.
class Names {
 public:
  void add(const void* key, const char* name) {
    if (!key || !name) return;
    std::lock_guard lk(mu_);
    const char* copy = strdup(name);  // lives as long as the process
    for (size_t i = slot(key), n = 0; n < kSlots; ++n, i = (i + 1) % kSlots) {
      const void* k = keys_[i].load(std::memory_order_relaxed);
      if (k && k != key) continue;
      names_[i].store(copy, std::memory_order_relaxed);
      keys_[i].store(key, std::memory_order_release);
      return;
    }
  }
  std::string_view find(const void* key) const {
    if (!key) return {};
    for (size_t i = slot(key), n = 0; n < kSlots; ++n, i = (i + 1) % kSlots) {
      const void* k = keys_[i].load(std::memory_order_acquire);
      if (!k) return {};
      if (k == key) return names_[i].load(std::memory_order_relaxed);
    }
    return {};
  }

 private:
  static constexpr size_t kSlots = 8192;
  static size_t slot(const void* key) {
    return (reinterpret_cast<uintptr_t>(key) >> 4) * 0x9e3779b97f4a7c15ull % kSlots;
  }
  std::mutex mu_;
  std::atomic<const void*> keys_[kSlots] = {};
  std::atomic<const char*> names_[kSlots] = {};
};
Names g_domains, g_strings;

std::string_view message_of(const nvtxEventAttributes_t* a) {
  if (!a) return {};
  if (a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii) return a->message.ascii;
  if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED) return g_strings.find(a->message.registered);
  return {};
}

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);  // the vDSO: no system call
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// This thread's push/pop ranges: how deep it is, whether each open one matters to the window (a
// bit per level; below 64 levels), and the names of those that do. One thread_local, trivially
// destructible, so a handler computes its address once (in a shared library every thread_local
// access goes through __tls_get_addr).
struct ThreadRanges {
  uint64_t window_bits;
  int depth;
  bool named;
  // A plain pointer, so an NVTX call made during exit, after the thread's thread_local
  // destructors ran, still finds valid memory; freed at thread exit through a pthread key.
  std::vector<std::string>* window_names;
};
thread_local ThreadRanges t_ranges{0, 0, false, nullptr};
pthread_key_t g_names_key;
pthread_once_t g_names_once = PTHREAD_ONCE_INIT;

// The names of this thread's open ranges the window cares about (made at the first such range).
std::vector<std::string>& window_names(ThreadRanges& t) {
  if (!t.window_names) {
    pthread_once(&g_names_once, [] {
      pthread_key_create(&g_names_key, [](void* p) {
        t_ranges.window_names = nullptr;  // the exiting thread's: a later push makes a new one
        delete static_cast<std::vector<std::string>*>(p);
      });
    });
    t.window_names = new std::vector<std::string>();
    pthread_setspecific(g_names_key, t.window_names);
  }
  return *t.window_names;
}
std::atomic<int> g_window_ranges_open{0};  // start/end ranges the window follows

// Listening: CUPTI started, and not in a forked child (whose agent is off: it must not take a lock
// another thread of its parent may have held at the fork).
bool live() { return g_on.load(std::memory_order_relaxed) && Agent::running(); }
bool recording() { return g_record.load(std::memory_order_relaxed); }

void name_thread_once(ThreadRanges& t) {
  if (t.named) return;
  t.named = true;
  if (Agent* a = Agent::running()) a->name_this_thread();  // a thread of NVTX ranges only
}

// Each returns the thread's depth before the call (what NVTX returns when no handler was there
// before the agent's). The clock is read only when the event is recorded (--trace nvtx), and the
// event is recorded before the window hears of it.
int on_push(std::string_view name, std::string_view domain) {
  ThreadRanges& t = t_ranges;
  const int level = t.depth++;  // counted even before the agent listens: pops pair with pushes
  if (level < 64) t.window_bits &= ~(1ull << level);
  if (!live()) return level;
  name_thread_once(t);
  if (recording()) NvtxLog::add(NvtxEvent::Push, now_ns(), 0, name, domain);
  if (level >= 64 || !nvtx_window_cares(name)) return level;
  t.window_bits |= 1ull << level;
  window_names(t).emplace_back(name);
  nvtx_window_range(true, name);
  return level;
}

int on_pop(std::string_view domain) {
  ThreadRanges& t = t_ranges;
  const int depth = t.depth;
  if (depth == 0) return depth;  // more pops than pushes: NVTX's error, nothing ends
  const int level = --t.depth;
  if (!live()) return depth;
  if (recording()) NvtxLog::add(NvtxEvent::Pop, now_ns(), 0, {}, domain);
  if (level >= 64 || !(t.window_bits & (1ull << level)) || !t.window_names ||
      t.window_names->empty())
    return depth;
  std::string name = std::move(t.window_names->back());
  t.window_names->pop_back();
  nvtx_window_range(false, name);
  return depth;
}

void on_start(uint64_t id, std::string_view name, std::string_view domain) {
  if (!live()) return;
  name_thread_once(t_ranges);
  if (recording()) NvtxLog::add(NvtxEvent::Start, now_ns(), id, name, domain);
  if (!nvtx_window_cares(name)) return;
  g_window_ranges_open.fetch_add(1, std::memory_order_relaxed);
  nvtx_window_range_id(true, id, name);
}

void on_end(uint64_t id) {
  if (!live()) return;
  if (recording()) NvtxLog::add(NvtxEvent::End, now_ns(), id, {}, {});
  if (g_window_ranges_open.load(std::memory_order_relaxed) > 0 &&
      nvtx_window_range_id(false, id, {}))
    g_window_ranges_open.fetch_sub(1, std::memory_order_relaxed);
}

// ---- the handlers in NVTX's table ----
int NVTX_API h_push_a(const char* m) {
  const int level = on_push(m ? m : "", {});
  return g_prev.push_a ? g_prev.push_a(m) : level;
}
int NVTX_API h_push_ex(const nvtxEventAttributes_t* a) {
  const int level = on_push(message_of(a), {});
  return g_prev.push_ex ? g_prev.push_ex(a) : level;
}
int NVTX_API h_pop() {
  const int depth = on_pop({});
  return g_prev.pop ? g_prev.pop() : depth - 1;
}
nvtxRangeId_t NVTX_API h_start_a(const char* m) {
  nvtxRangeId_t id = g_prev.start_a ? g_prev.start_a(m) : g_own_ids.fetch_add(1);
  on_start(id, m ? m : "", {});
  return id;
}
nvtxRangeId_t NVTX_API h_start_ex(const nvtxEventAttributes_t* a) {
  nvtxRangeId_t id = g_prev.start_ex ? g_prev.start_ex(a) : g_own_ids.fetch_add(1);
  on_start(id, message_of(a), {});
  return id;
}
void NVTX_API h_end(nvtxRangeId_t id) {
  on_end(id);
  if (g_prev.end) g_prev.end(id);
}
int NVTX_API h_d_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const int level = on_push(message_of(a), g_domains.find(d));
  return g_prev.d_push ? g_prev.d_push(d, a) : level;
}
int NVTX_API h_d_pop(nvtxDomainHandle_t d) {
  const int depth = on_pop(g_domains.find(d));
  return g_prev.d_pop ? g_prev.d_pop(d) : depth - 1;
}
nvtxRangeId_t NVTX_API h_d_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  nvtxRangeId_t id = g_prev.d_start ? g_prev.d_start(d, a) : g_own_ids.fetch_add(1);
  on_start(id, message_of(a), g_domains.find(d));
  return id;
}
void NVTX_API h_d_end(nvtxDomainHandle_t d, nvtxRangeId_t id) {
  on_end(id);
  if (g_prev.d_end) g_prev.d_end(d, id);
}
// Without a handler before the agent's, a handle of its own: the name's copy.
nvtxDomainHandle_t NVTX_API h_d_create(const char* name) {
  nvtxDomainHandle_t h = g_prev.d_create
                             ? g_prev.d_create(name)
                             : reinterpret_cast<nvtxDomainHandle_t>(strdup(name ? name : ""));
  g_domains.add(h, name);
  return h;
}
nvtxStringHandle_t NVTX_API h_d_string(nvtxDomainHandle_t d, const char* s) {
  nvtxStringHandle_t h = g_prev.d_string ? g_prev.d_string(d, s)
                                         : reinterpret_cast<nvtxStringHandle_t>(strdup(s ? s : ""));
  g_strings.add(h, s);
  return h;
}

// Whether `fn` is libcupti's. A slot CUPTI left alone still holds the NVTX instance's own
// initializing function, which calls the slot again: never called from the agent's handler.
bool in_cupti(const void* fn) {
  Dl_info info{};
  return fn && real().path && dladdr(fn, &info) && info.dli_fname &&
         std::strcmp(info.dli_fname, real().path) == 0;
}

// Puts `fn` in slot `id` of `table`, keeping CUPTI's handler that was there in `prev` (the first
// instance's: CUPTI fills every instance with the same handlers).
template <typename Fn>
void hook(NvtxFunctionTable table, unsigned size, unsigned id, Fn fn, Fn& prev) {
  if (!table || id >= size || !table[id]) return;
  auto* slot = reinterpret_cast<Fn*>(table[id]);
  if (*slot == fn) return;
  if (!prev && in_cupti(reinterpret_cast<const void*>(*slot))) prev = *slot;
  *slot = fn;
}

bool install(NvtxGetExportTableFunc_t get_export_table) {
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!cb || cb->struct_size < sizeof(NvtxExportTableCallbacks) || !cb->GetModuleFunctionTable)
    return false;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned n_core = 0, n_core2 = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n_core)) return false;
  hook(core, n_core, NVTX_CBID_CORE_RangePushA, &h_push_a, g_prev.push_a);
  hook(core, n_core, NVTX_CBID_CORE_RangePushEx, &h_push_ex, g_prev.push_ex);
  hook(core, n_core, NVTX_CBID_CORE_RangePop, &h_pop, g_prev.pop);
  hook(core, n_core, NVTX_CBID_CORE_RangeStartA, &h_start_a, g_prev.start_a);
  hook(core, n_core, NVTX_CBID_CORE_RangeStartEx, &h_start_ex, g_prev.start_ex);
  hook(core, n_core, NVTX_CBID_CORE_RangeEnd, &h_end, g_prev.end);
  if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &n_core2)) {
    hook(core2, n_core2, NVTX_CBID_CORE2_DomainRangePushEx, &h_d_push, g_prev.d_push);
    hook(core2, n_core2, NVTX_CBID_CORE2_DomainRangePop, &h_d_pop, g_prev.d_pop);
    hook(core2, n_core2, NVTX_CBID_CORE2_DomainRangeStartEx, &h_d_start, g_prev.d_start);
    hook(core2, n_core2, NVTX_CBID_CORE2_DomainRangeEnd, &h_d_end, g_prev.d_end);
    hook(core2, n_core2, NVTX_CBID_CORE2_DomainCreateA, &h_d_create, g_prev.d_create);
    hook(core2, n_core2, NVTX_CBID_CORE2_DomainRegisterStringA, &h_d_string, g_prev.d_string);
  }
  return true;
}

}  // namespace

void nvtx_hooks_start(bool record) {
  // The log's reserve of touched chunks, before the job's first range (4 MiB, once).
  if (record) NvtxLog::reserve();
  g_record.store(record, std::memory_order_relaxed);
  g_on.store(true, std::memory_order_release);
}

}  // namespace braid::capture::agent

// NVTX's injection hook. NVTX goes to the libcupti the agent loaded first (so NVTX reaches the
// CUPTI instance braid subscribed to whichever libcupti the job's library path finds; a path
// fixed at build time could name another copy), then the agent's handlers go over the range
// slots.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    void* get_export_table) {
  using namespace braid::capture::agent;
  static std::mutex mu;  // one instance at a time: the slots' previous handlers are shared
  std::lock_guard lk(mu);
  int cupti = real().nvtx_init ? real().nvtx_init(get_export_table) : 0;
  bool ours =
      get_export_table && install(reinterpret_cast<NvtxGetExportTableFunc_t>(get_export_table));
  return ours || cupti ? 1 : 0;
}

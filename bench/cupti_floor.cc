// CUPTI's floor for the capture overhead benchmark (bench/capture_overhead.sh, docs/BENCHMARKS.md
// "Capture overhead"): the least a CUPTI client asking for braid's records costs, measured in the
// same interleaved run as braid. libbraid_cupti_floor.so is injected as braid's agent is
// (CUDA_INJECTION64_PATH, and NVTX_INJECTION64_PATH, which it hands to libcupti as braid does),
// subscribes, asks for system thread ids, and enables exactly what braid's agent enables for the
// whole run (the same functions choose them: enabled_activity_kinds, is_recorded_api; the same
// BRAID_CAPTURE_TRACE subsets), with buffers of braid's size; it hands every completed buffer back
// untouched (never reads a record) and flushes once at exit. Everything braid costs above this is
// braid's: its callbacks, its NVTX handlers, the NCCL interposer, the writer thread.
#include <cupti.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "capture/config.h"
#include "capture/cupti_parse.h"

namespace {

constexpr size_t kBufferBytes = 8u << 20;  // braid's default (--buffer-mb 8)
std::mutex g_mu;
std::vector<uint8_t*>* g_free = nullptr;  // buffers handed back, reused (never freed: exit)

void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  uint8_t* b = nullptr;
  {
    std::lock_guard lk(g_mu);
    if (g_free && !g_free->empty()) {
      b = g_free->back();
      g_free->pop_back();
    }
  }
  if (!b) b = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *buffer = b;
  *size = b ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t) {
  if (!buffer) return;
  std::lock_guard lk(g_mu);
  if (!g_free) g_free = new std::vector<uint8_t*>();
  g_free->push_back(buffer);  // untouched
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void flush_at_exit() { cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); }

void enable(CUpti_ActivityKind k) {
  CUptiResult rc = cuptiActivityEnable(k);
  if (rc != CUPTI_SUCCESS && rc != CUPTI_ERROR_NOT_COMPATIBLE)
    std::fprintf(stderr, "braid cupti floor: cuptiActivityEnable(%d) failed (%d)\n",
                 static_cast<int>(k), static_cast<int>(rc));
}

// The runtime and driver API records braid keeps, chosen as braid chooses them.
void enable_api_records() {
  const char* name = nullptr;
  for (uint32_t id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id)
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, id, &name) == CUPTI_SUCCESS && name &&
        braid::capture::is_recorded_api(name))
      cuptiActivityEnableRuntimeApi(id, 1);
  for (uint32_t id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id)
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, id, &name) == CUPTI_SUCCESS && name &&
        braid::capture::is_recorded_api(name))
      cuptiActivityEnableDriverApi(id, 1);
}

void start() {
  braid::capture::TraceSet trace;
  if (const char* t = std::getenv("BRAID_CAPTURE_TRACE"); t && *t) {
    try {
      trace = braid::capture::parse_trace(t);
    } catch (const std::exception&) {
    }
  }
  CUpti_SubscriberHandle subscriber = nullptr;
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "braid-floor";
  if (cuptiSubscribe_v2(&subscriber, on_callback, nullptr, &params) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "braid cupti floor: CUPTI is held by another client: no floor here\n");
    return;
  }
  cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  cuptiActivityRegisterCallbacks(requested, completed);
  if (trace.api) {
    enable_api_records();
    enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  }
  enable(CUPTI_ACTIVITY_KIND_DEVICE);
  if (trace.cuda) {
    int kinds[16];
    int n = braid::capture::enabled_activity_kinds(kinds, 16, false);
    for (int i = 0; i < n; ++i)
      if (kinds[i] != CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)
        enable(static_cast<CUpti_ActivityKind>(kinds[i]));
  }
  std::atexit(flush_at_exit);
}

}  // namespace

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::once_flag once;
  std::call_once(once, start);
  return 1;
}

// NVTX's injection hook: NVTX goes to the libcupti this library loaded, as braid's agent hands it.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    void* get_export_table) {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cuptiGetTimestamp), &info) || !info.dli_fname) return 0;
  void* cupti = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  auto init =
      cupti ? reinterpret_cast<int (*)(void*)>(dlsym(cupti, "InitializeInjectionNvtx2")) : nullptr;
  return init ? init(get_export_table) : 0;
}

// A model program for the agent's CPU tests: a "CUDA" job on the fake CUDA runtime, NVTX and
// CUPTI of fake_cupti.cc and the fake NCCL, linked after the agent built against that CUPTI (as
// LD_PRELOAD orders them); the agent comes in through CUDA_INJECTION64_PATH at fakecuda_init, as
// the CUDA driver loads it. Usage: fake_cuda_job SCENARIO [N]
//   exit N     N kernel launches (the first, then a pause longer than the agent's drain period;
//              an NVTX range, a copy and a sync every 1000), the result
//              printed to a buffered stdout, then return from main: the agent's final drain
//              runs at exit with most records still in CUPTI's buffers.
//   steps N    N steps, each an NVTX range "step <i>" with 3 kernels and a copy inside an outer
//              range "train"; prints "steps N".
//   threads    NCCL calls and kernel launches on the main thread and on a second thread, named
//              "braid-main" and "braid-second"; prints each thread's gettid() as "tid <name> <id>".
//   quiet      a kernel on the main thread, then two threads that launch nothing: "braid-nvtx"
//              opens and closes NVTX ranges and stays alive 400 ms, "braid-nccl" makes 3
//              all-reduces on a two-rank communicator and ends at once; prints each thread's
//              gettid() as "tid <name> <id>".
//   onerank    on a one-rank communicator: 3 grouped out-of-place all-reduces, 1 grouped
//              in-place all-reduce, 1 ungrouped out-of-place and 1 ungrouped in-place
//              all-reduce; then on a two-rank one, 2 grouped all-reduces (kernels launch at
//              ncclGroupEnd). NCCL 2.28 copies a one-rank collective inside the call itself.
//   simulate   on a two-rank communicator: a group of 2 all-reduces ended by
//              ncclGroupSimulateEnd (launches nothing), then 1 ungrouped all-reduce and a group
//              of 1.
//   profiler   5 kernels, then a profiler of the job's own starts the way torch.profiler's Kineto
//              does, calling CUPTI through the process's symbols (subscribe, register its buffers,
//              enable kernels), 5 kernels, its flush and its stop (kernels disabled); prints the
//              results CUPTI gave it and the kernel records it received.
//   kineto     torch.profiler's Kineto under braid, call for call as libkineto makes them: 5
//              kernels; then Kineto's init subscribes (cuptiSubscribe), its profile starts
//              (cuptiActivityRegisterCallbacks, CONCURRENT_KERNEL enabled), 5 kernels, its stop
//              flushes (forced) and switches the kind off, and its teardown (TEARDOWN_CUPTI=1)
//              runs from its callback at the exit of the next runtime call: cuptiUnsubscribe,
//              cuptiFinalize; then its teardown thread subscribes again (cuptiSubscribe;
//              "resubscribe N"), unless CUPTI_LAZY_REINIT=1, after FAKE_KINETO_REINIT_MS (default
//              at once); after a pause, 5 more kernels. Prints the results CUPTI gave it and the
//              kernel records it received.
//   markers    a CUPTI client of the job recording NVTX as CUPTI MARKER records: subscribes,
//              registers its buffers, enables MARKER, 3 push/pop ranges and 1 start/end range,
//              a forced flush, then unsubscribes and finalizes CUPTI; prints the results CUPTI
//              gave it and the marker records it received ("profiler markers 8").
//   hidden     kernels for a while, then a client that holds its own handle on libcupti (dlopen +
//              dlsym, as ctypes bindings do) registers its buffers; kernels for a while longer.
//   alone [MS] kernels for MS milliseconds (400), nothing else; prints "alone done".
//   graph      on a two-rank communicator, captures into a CUDA graph an all-reduce, a compute
//              kernel and a group of 2 all-reduces (the group's kernel launches at ncclGroupEnd),
//              instantiates it, makes 1 ordinary all-reduce, then launches the graph 40 times.
//   graph1     the GPU test's graph (capture_cuda_streams_nccl graph N): on a one-rank
//              communicator, captures a compute kernel and an out-of-place all-reduce (NCCL 2.28
//              copies inside the call: a copy node) into a CUDA graph, instantiates it and launches
//              it N times (40).
//   nonblocking  non-blocking communicators (config.blocking = 0; run with NCCL_PROFILER_PLUGIN
//              naming the agent): a two-rank one, 2 all-reduces and a group of 2; a one-rank one
//              split (non-blocking) into a one-rank child, 1 out-of-place all-reduce on the child.
//              NCCL launches their GPU work from its own thread.
//   sqlite     a kernel, a pause while the agent writes it, then says whether a libsqlite3.so.0 is
//              in the job's link namespace before the job loads one, loads one itself (as a
//              Python's _sqlite3 module would) and calls it, and launches a second kernel.
//   stale      an all-reduce on a two-rank communicator inside a capture window that closes while
//              the call runs (run it with a short duration window and FAKE_NCCL_CALL_MS), then
//              prints how many ids this thread still has on CUPTI's external-correlation stack.
//   train N [MS]  one rank of a data-parallel job (the documentation tests' torchrun/python
//              double): rank and world size from RANK / WORLD_SIZE (0 / 1), the world
//              communicator's unique id shared through $FAKE_NCCL_DIR/uid (rank 0 writes it);
//              N steps, each an NVTX range "step <i>" with 3 kernels, an all-reduce on the world
//              communicator and a copy, MS ms apart (0); stops early once $FAKE_NCCL_DIR/stop
//              exists. Prints "train <steps run> steps".
//   nvtxbench N [R] [MS]  R rounds (5) of N NVTX push/pop pairs ("braid-bench", as the GPU
//              benchmark braid-bench-capture-ops does), after a warm-up round, each followed by a
//              pause of MS ms (0); prints "nvtx <wall ns per pair> <the thread's CPU ns per pair>"
//              per round (bench/capture_nvtx_cpu.sh: the agent's own NVTX path on CPU).
//   fork N     a thread opening and closing NVTX ranges "busy" without pause (run it with the
//              window nvtx:busy: each one goes to the agent's window controller, under its lock)
//              while the main thread forks N children that each open and close ranges ("busy"
//              and "child") and make an NCCL call; prints how many children did not finish within
//              5 s (stuck on a lock held at the fork).
#include <cupti.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

extern "C" {
int fakecuda_init();
int fakecupti_ext_depth(int kind);
void fakecuda_begin_capture(uint32_t stream);
uint32_t fakecuda_end_capture(uint32_t stream);
uint32_t fakecuda_graph_instantiate(uint32_t graph);
void fakecuda_graph_launch(uint32_t exec, uint32_t stream);
void fakecuda_launch(uint32_t stream, const char* kernel);
void fakecuda_memcpy(uint32_t stream, uint64_t bytes);
void fakecuda_sync(uint32_t stream);
void fakecuda_get_device();
int fakenvtx_push(const char* name);
int fakenvtx_pop();
uint64_t fakenvtx_start(const char* name);
void fakenvtx_end(uint64_t id);
}

#define CHECK(x)                                                         \
  do {                                                                   \
    ncclResult_t r_ = (x);                                               \
    if (r_ != ncclSuccess) {                                             \
      std::fprintf(stderr, "%s failed: %d\n", #x, static_cast<int>(r_)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

namespace {

ncclComm_t make_comm(int nranks) {
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t c;
  CHECK(ncclCommInitRank(&c, nranks, id, 0));
  return c;
}

int run_exit(long n) {
  // A first launch the agent's periodic drain writes (the parser's state is set up during the
  // run, as in a long job), then the rest with no pause.
  for (long i = 0; i < n; ++i) {
    if (i % 1000 == 0) fakenvtx_push("iteration");
    fakecuda_launch(7, "_Z11emptyKernelv");
    fakecuda_get_device();
    if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (i % 1000 == 999 || i == n - 1) {
      fakecuda_memcpy(7, 4096);
      fakecuda_sync(7);
      fakenvtx_pop();
    }
  }
  // Buffered, not flushed: exit() flushes it after the atexit handlers, unless one crashed.
  std::printf("launched %ld kernels\n", n);
  return 0;
}

int run_steps(long n) {
  fakenvtx_push("train");
  for (long s = 0; s < n; ++s) {
    std::string name = "step " + std::to_string(s);
    fakenvtx_push(name.c_str());
    for (int k = 0; k < 3; ++k) fakecuda_launch(7, "gemm_kernel");
    fakecuda_memcpy(7, 1024);
    fakenvtx_pop();
  }
  fakenvtx_pop();
  fakecuda_sync(7);
  std::printf("steps %ld\n", n);
  return 0;
}

int run_train(long n, long ms) {
  const char* r = std::getenv("RANK");
  const char* w = std::getenv("WORLD_SIZE");
  const int rank = r ? std::atoi(r) : 0, nranks = w ? std::atoi(w) : 1;
  const char* d = std::getenv("FAKE_NCCL_DIR");
  const std::string dir = d ? d : "/tmp", uid = dir + "/uid";
  ncclUniqueId id;
  if (rank == 0) {
    CHECK(ncclGetUniqueId(&id));
    FILE* f = std::fopen((uid + ".tmp").c_str(), "wb");
    if (!f || std::fwrite(id.internal, sizeof id.internal, 1, f) != 1) return 3;
    std::fclose(f);
    std::rename((uid + ".tmp").c_str(), uid.c_str());
  } else {
    for (int i = 0; access(uid.c_str(), R_OK) != 0; ++i) {
      if (i > 3000) return 3;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    FILE* f = std::fopen(uid.c_str(), "rb");
    if (!f || std::fread(id.internal, sizeof id.internal, 1, f) != 1) return 3;
    std::fclose(f);
  }
  ncclComm_t world;
  CHECK(ncclCommInitRank(&world, nranks, id, rank));
  float buf[256];
  cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(7));
  long steps = 0;
  for (; steps < n && access((dir + "/stop").c_str(), F_OK) != 0; ++steps) {
    std::string name = "step " + std::to_string(steps);
    fakenvtx_push(name.c_str());
    for (int k = 0; k < 3; ++k) fakecuda_launch(7, "gemm_kernel");
    CHECK(ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, world, s));
    fakecuda_memcpy(7, 1024);
    fakenvtx_pop();
    fakecuda_sync(7);
    if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  CHECK(ncclCommDestroy(world));
  std::printf("train %ld steps\n", steps);
  return 0;
}

int run_threads() {
  ncclComm_t comm = make_comm(2);
  float buf[64];
  auto work = [&](const char* who, uint32_t stream) {
    pthread_setname_np(pthread_self(), (std::string("braid-") + who).c_str());
    std::printf("tid %s %ld\n", who, static_cast<long>(syscall(SYS_gettid)));
    for (int i = 0; i < 3; ++i) {
      fakecuda_launch(stream, "gemm_kernel");
      CHECK(ncclAllReduce(buf, buf + 32, 32, ncclFloat32, ncclSum, comm,
                          reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream))));
    }
  };
  work("main", 7);
  std::thread t([&] { work("second", 9); });
  t.join();
  CHECK(ncclCommDestroy(comm));
  return 0;
}

int run_quiet() {
  fakecuda_launch(7, "gemm_kernel");
  ncclComm_t comm = make_comm(2);
  float buf[64];
  auto named = [](const char* who) {
    pthread_setname_np(pthread_self(), (std::string("braid-") + who).c_str());
    std::printf("tid %s %ld\n", who, static_cast<long>(syscall(SYS_gettid)));
  };
  std::thread nvtx([&] {
    named("nvtx");
    for (int i = 0; i < 3; ++i) {
      fakenvtx_push("load batch");
      fakenvtx_pop();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  });
  nvtx.join();
  std::thread nccl([&] {
    named("nccl");
    for (int i = 0; i < 3; ++i)
      CHECK(ncclAllReduce(buf, buf + 32, 32, ncclFloat32, ncclSum, comm,
                          reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(9))));
  });
  nccl.join();
  CHECK(ncclCommDestroy(comm));
  return 0;
}

int run_onerank() {
  float a[64], b[64];
  cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(7));
  ncclComm_t one = make_comm(1);
  CHECK(ncclGroupStart());
  for (int i = 0; i < 3; ++i) CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, one, s));
  CHECK(ncclAllReduce(a, a, 64, ncclFloat32, ncclSum, one, s));  // in place: no GPU work
  CHECK(ncclGroupEnd());
  CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, one, s));
  CHECK(ncclAllReduce(b, b, 64, ncclFloat32, ncclSum, one, s));  // in place: no GPU work
  ncclComm_t two = make_comm(2);
  CHECK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two, s));
  CHECK(ncclGroupEnd());
  fakecuda_sync(7);
  CHECK(ncclCommDestroy(two));
  CHECK(ncclCommDestroy(one));
  std::printf("onerank done\n");
  return 0;
}

// The job's own profiler: its buffers, counting the kernel records it receives.
int g_profiler_kernels = 0, g_profiler_markers = 0;
void CUPTIAPI profiler_requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = 1 << 16;
  *buf = static_cast<uint8_t*>(std::malloc(*size));
  *max_records = 0;
}
void CUPTIAPI profiler_completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS)
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      ++g_profiler_kernels;
    else if (rec->kind == CUPTI_ACTIVITY_KIND_MARKER)
      ++g_profiler_markers;
  std::free(buf);
}
void CUPTIAPI profiler_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void launch_for(std::chrono::milliseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
    fakecuda_launch(7, "gemm_kernel");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int run_profiler() {
  for (int i = 0; i < 5; ++i) fakecuda_launch(7, "gemm_kernel");
  fakecuda_sync(7);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // braid drains
  CUpti_SubscriberHandle h = nullptr;
  std::printf("subscribe %d\n", static_cast<int>(cuptiSubscribe(&h, profiler_callback, nullptr)));
  std::printf("register %d\n", static_cast<int>(cuptiActivityRegisterCallbacks(
                                   profiler_requested, profiler_completed)));
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  for (int i = 0; i < 5; ++i) fakecuda_launch(7, "gemm_kernel");
  cuptiActivityFlushAll(0);
  std::printf("profiler kernels %d\n", g_profiler_kernels);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::printf("profiler done\n");
  return 0;
}

// Kineto's teardown: its callback, at the exit of the next runtime API call, unsubscribes and
// finalizes CUPTI (CuptiCallbackApi::__callback_switchboard with teardownCupti_ set).
CUpti_SubscriberHandle g_kineto = nullptr;
std::atomic<bool> g_teardown{false};
void CUPTIAPI kineto_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId,
                              const void* data) {
  auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || info->callbackSite != CUPTI_API_EXIT) return;
  if (!g_teardown.exchange(false)) return;
  cuptiUnsubscribe(g_kineto);
  cuptiFinalize();
}

int run_kineto() {
  for (int i = 0; i < 5; ++i) fakecuda_launch(7, "gemm_kernel");
  fakecuda_sync(7);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // braid drains
  CUptiResult sub = cuptiSubscribe(&g_kineto, kineto_callback, nullptr);
  std::printf("subscribe %d\n", static_cast<int>(sub));
  std::printf("register %d\n", static_cast<int>(cuptiActivityRegisterCallbacks(
                                   profiler_requested, profiler_completed)));
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  for (int i = 0; i < 5; ++i) fakecuda_launch(7, "gemm_kernel");
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::printf("profiler kernels %d\n", g_profiler_kernels);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (sub == CUPTI_SUCCESS) {  // a refused Kineto has no callback to tear down from
    g_teardown.store(true);
    cuptiEnableDomain(1, g_kineto, CUPTI_CB_DOMAIN_RUNTIME_API);
    fakecuda_get_device();
  }
  // Kineto's teardown thread then subscribes again for its callbacks (reenableCuptiCallbacks_),
  // unless CUPTI_LAZY_REINIT=1 leaves that to its next profile; FAKE_KINETO_REINIT_MS delays it.
  const char* lazy = std::getenv("CUPTI_LAZY_REINIT");
  if (sub == CUPTI_SUCCESS && !(lazy && std::string(lazy) == "1")) {
    const char* ms = std::getenv("FAKE_KINETO_REINIT_MS");
    if (ms) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
    std::printf("resubscribe %d\n",
                static_cast<int>(cuptiSubscribe(&g_kineto, kineto_callback, nullptr)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // braid takes CUPTI back
  for (int i = 0; i < 5; ++i) fakecuda_launch(7, "gemm_kernel");
  fakecuda_sync(7);
  std::printf("kineto done\n");
  return 0;
}

// A CUPTI client of the job that records NVTX through CUPTI (MARKER records), as an Nsight-style
// tool does: it takes CUPTI (braid yields), opens 3 push/pop ranges and 1 start/end range, flushes,
// and gives CUPTI back (unsubscribe, finalize).
int run_markers() {
  CUpti_SubscriberHandle h = nullptr;
  std::printf("subscribe %d\n", static_cast<int>(cuptiSubscribe(&h, profiler_callback, nullptr)));
  std::printf("register %d\n", static_cast<int>(cuptiActivityRegisterCallbacks(
                                   profiler_requested, profiler_completed)));
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MARKER);
  for (int i = 0; i < 3; ++i) {
    fakenvtx_push("mine");
    fakenvtx_pop();
  }
  fakenvtx_end(fakenvtx_start("mine async"));
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::printf("profiler markers %d\n", g_profiler_markers);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MARKER);
  cuptiUnsubscribe(h);
  cuptiFinalize();
  std::printf("markers done\n");
  return 0;
}

int run_hidden() {
  launch_for(std::chrono::milliseconds(200));
  // Its own handle on the libcupti the process loaded: braid's exports are not in the way.
  Dl_info info{};
  void* in_cupti = dlsym(RTLD_DEFAULT, "fakecupti_thread_id_type");  // defined only by libcupti
  if (!in_cupti || !dladdr(in_cupti, &info)) return 3;
  void* lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  auto reg = lib ? reinterpret_cast<decltype(&cuptiActivityRegisterCallbacks)>(
                       dlsym(lib, "cuptiActivityRegisterCallbacks"))
                 : nullptr;
  if (!reg || reg(profiler_requested, profiler_completed) != CUPTI_SUCCESS) return 3;
  launch_for(std::chrono::milliseconds(1000));
  std::printf("hidden done\n");
  return 0;
}

int run_alone(long ms) {
  launch_for(std::chrono::milliseconds(ms > 0 ? ms : 400));
  std::printf("alone done\n");
  return 0;
}

int run_graph() {
  float a[64], b[64];
  cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(7));
  ncclComm_t two = make_comm(2);
  fakecuda_begin_capture(7);
  CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two, s));
  fakecuda_launch(7, "gemm_kernel");
  CHECK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(a, b, 32, ncclFloat32, ncclSum, two, s));
  CHECK(ncclGroupEnd());
  uint32_t exec = fakecuda_graph_instantiate(fakecuda_end_capture(7));
  CHECK(ncclAllReduce(a, b, 16, ncclFloat32, ncclSum, two, s));
  for (int i = 0; i < 40; ++i) fakecuda_graph_launch(exec, 7);
  fakecuda_sync(7);
  CHECK(ncclCommDestroy(two));
  std::printf("graph done\n");
  return 0;
}

int run_graph1(long n) {
  float x[64], y[64];
  cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(7));
  ncclComm_t one = make_comm(1);
  fakecuda_begin_capture(7);
  fakecuda_launch(7, "braid_scale");
  CHECK(ncclAllReduce(x, y, 64, ncclFloat32, ncclSum, one, s));
  uint32_t exec = fakecuda_graph_instantiate(fakecuda_end_capture(7));
  for (long i = 0; i < n; ++i) fakecuda_graph_launch(exec, 7);
  fakecuda_sync(7);
  CHECK(ncclCommDestroy(one));
  std::printf("graph %ld\n", n);
  return 0;
}

ncclComm_t wait_ready(ncclComm_t c, ncclResult_t r) {
  if (r != ncclSuccess && r != ncclInProgress) std::exit(1);
  for (ncclResult_t state = ncclInProgress; state == ncclInProgress;)
    CHECK(ncclCommGetAsyncError(c, &state));
  return c;
}

int run_nonblocking() {
  float a[64], b[64];
  cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(7));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t two;
  wait_ready(two, ncclCommInitRankConfig(&two, 2, id, 0, &cfg));
  for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two, s));
  CHECK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(a, b, 32, ncclFloat32, ncclSum, two, s));
  CHECK(ncclGroupEnd());
  ncclUniqueId id1;
  CHECK(ncclGetUniqueId(&id1));
  ncclComm_t one, child;
  wait_ready(one, ncclCommInitRankConfig(&one, 1, id1, 0, &cfg));
  wait_ready(child, ncclCommSplit(one, 0, 0, &child, &cfg));
  CHECK(ncclAllReduce(a, b, 16, ncclFloat32, ncclSum, child, s));
  fakecuda_sync(7);
  CHECK(ncclCommDestroy(child));
  CHECK(ncclCommDestroy(one));
  CHECK(ncclCommDestroy(two));
  std::printf("nonblocking done\n");
  return 0;
}

int run_sqlite() {
  fakecuda_launch(7, "gemm_kernel");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  void* before = dlopen("libsqlite3.so.0", RTLD_LAZY | RTLD_NOLOAD);
  std::printf("sqlite in the job before it loads one: %s\n", before ? "yes" : "no");
  void* own = dlopen("libsqlite3.so.0", RTLD_LAZY | RTLD_LOCAL);
  auto version =
      own ? reinterpret_cast<const char* (*)()>(dlsym(own, "sqlite3_libversion")) : nullptr;
  std::printf("the job's own sqlite works: %s\n", version && version()[0] == '3' ? "yes" : "no");
  fakecuda_launch(7, "gemm_kernel");
  return 0;
}

int run_stale() {
  float a[64], b[64];
  ncclComm_t two = make_comm(2);
  CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two,
                      reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(7))));
  fakecuda_launch(7, "gemm_kernel");
  std::printf("ext depth %d\n", fakecupti_ext_depth(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2));
  CHECK(ncclCommDestroy(two));
  return 0;
}

int run_fork(long n) {
  float a[64], b[64];
  ncclComm_t two = make_comm(2);
  // Everything initialized once before the thread starts (NVTX's injection, the interposer's
  // lookups): a child forked while another thread is inside a one-time initialization of the
  // test's own libraries would wait on it, whatever the agent does.
  fakenvtx_push("warm-up");
  fakenvtx_pop();
  CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two, nullptr));
  std::atomic<bool> stop{false};
  std::thread ranges([&] {
    while (!stop.load()) {
      fakenvtx_push("busy");
      fakenvtx_pop();
    }
  });
  int stuck = 0;
  for (long i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      fakenvtx_push("busy");
      fakenvtx_push("child");
      fakenvtx_pop();
      fakenvtx_pop();
      ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two, nullptr);
      _exit(0);
    }
    int st = 0;
    bool done = false;
    for (int t = 0; t < 500 && !done; ++t) {
      done = waitpid(pid, &st, WNOHANG) == pid;
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!done) {
      ++stuck;
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
    }
  }
  stop.store(true);
  ranges.join();
  CHECK(ncclCommDestroy(two));
  std::printf("stuck %d\n", stuck);
  return 0;
}

double thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

int run_nvtxbench(long n, long rounds, long pause_ms) {
  for (long r = 0; r <= rounds; ++r) {  // round 0 warms up and is not printed
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_ns();
    for (long i = 0; i < n; ++i) {
      fakenvtx_push("braid-bench");
      fakenvtx_pop();
    }
    const double c1 = thread_cpu_ns();
    auto t1 = std::chrono::steady_clock::now();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
    if (r > 0) std::printf("nvtx %.1f %.1f\n", ns, (c1 - c0) / static_cast<double>(n));
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  return 0;
}

int run_simulate() {
  float a[64], b[64];
  cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(7));
  ncclComm_t two = make_comm(2);
  CHECK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two, s));
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  CHECK(ncclGroupSimulateEnd(&info));
  CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two, s));
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, two, s));
  CHECK(ncclGroupEnd());
  fakecuda_sync(7);
  CHECK(ncclCommDestroy(two));
  std::printf("simulate done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  fakecuda_init();  // as cuInit: the driver loads CUDA_INJECTION64_PATH
  std::string scenario = argv[1];
  long n = argc > 2 ? std::atol(argv[2]) : 0;
  if (scenario == "exit") return run_exit(n);
  if (scenario == "steps") return run_steps(n);
  if (scenario == "threads") return run_threads();
  if (scenario == "quiet") return run_quiet();
  if (scenario == "onerank") return run_onerank();
  if (scenario == "simulate") return run_simulate();
  if (scenario == "profiler") return run_profiler();
  if (scenario == "hidden") return run_hidden();
  if (scenario == "kineto") return run_kineto();
  if (scenario == "markers") return run_markers();
  if (scenario == "alone") return run_alone(n);
  if (scenario == "stale") return run_stale();
  if (scenario == "sqlite") return run_sqlite();
  if (scenario == "graph") return run_graph();
  if (scenario == "graph1") return run_graph1(n > 0 ? n : 40);
  if (scenario == "nonblocking") return run_nonblocking();
  if (scenario == "fork") return run_fork(n);
  if (scenario == "nvtxbench")
    return run_nvtxbench(n > 0 ? n : 100000, argc > 3 ? std::atol(argv[3]) : 5,
                         argc > 4 ? std::atol(argv[4]) : 0);
  if (scenario == "train") return run_train(n, argc > 3 ? std::atol(argv[3]) : 0);
  return 2;
}

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
//   threads    NCCL calls and kernel launches on the main thread and on a second thread; prints
//              each thread's gettid() as "tid <name> <id>".
//   onerank    on a one-rank communicator: 3 grouped out-of-place all-reduces, 1 grouped
//              in-place all-reduce, 1 ungrouped out-of-place and 1 ungrouped in-place
//              all-reduce; then on a two-rank one, 2 grouped all-reduces (kernels launch at
//              ncclGroupEnd). NCCL 2.28 copies a one-rank collective inside the call itself.
//   simulate   on a two-rank communicator: a group of 2 all-reduces ended by
//              ncclGroupSimulateEnd (launches nothing), then 1 ungrouped all-reduce and a group
//              of 1.
#include <nccl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

extern "C" {
int fakecuda_init();
void fakecuda_launch(uint32_t stream, const char* kernel);
void fakecuda_memcpy(uint32_t stream, uint64_t bytes);
void fakecuda_sync(uint32_t stream);
void fakecuda_get_device();
void fakenvtx_push(const char* name);
void fakenvtx_pop();
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

int run_threads() {
  ncclComm_t comm = make_comm(2);
  float buf[64];
  auto work = [&](const char* who, uint32_t stream) {
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
  if (scenario == "onerank") return run_onerank();
  if (scenario == "simulate") return run_simulate();
  return 2;
}

// Per-operation cost of capture (bench/capture_overhead.sh runs it with and without
// `braid record`, interleaved). Usage: braid-bench-capture-ops OP [N] [ROUNDS]
//   launch_sync  an empty kernel launch and a stream synchronize
//   copy4k       a 4 KB device-to-device cudaMemcpyAsync and a stream synchronize
//   nvtx         an NVTX push and pop pair
//   allreduce    an in-place 1-float ncclAllReduce on a one-rank communicator and a synchronize
//   launches     N empty kernel launches, one synchronize at the end (the no-crash, no-lost-record
//                check at 10 million launches: the capture must hold exactly N kernels)
//   clock        one clock_gettime(CLOCK_REALTIME): what each host timestamp of braid's hot paths
//                (NVTX handlers, NCCL calls) costs on this machine (a system call where the clock
//                source has no vDSO path)
//   tsc          one read of the TSC, for comparison; neither needs a GPU
// Prints one line per round, "<op> <ns per op>", for ROUNDS rounds of N operations (the
// summarizer, braid-bench-capture-summary, takes the medians); `launches` prints "launches <N>".
#include <cuda_runtime.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>
#include <x86intrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "tests/capture/cuda/check.h"

__global__ void braid_empty() {}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s launch_sync|copy4k|nvtx|allreduce|launches|clock|tsc [N] [ROUNDS]\n",
                 argv[0]);
    return 2;
  }
  std::string op = argv[1];
  long n = argc > 2 ? std::atol(argv[2]) : 10000;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  if (op == "clock" || op == "tsc") {
    for (int r = 0; r < rounds + 1; ++r) {
      volatile long long sink = 0;
      auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) {
        if (op == "clock") {
          timespec ts;
          clock_gettime(CLOCK_REALTIME, &ts);
          sink = sink + ts.tv_nsec;
        } else {
          sink = sink + static_cast<long long>(__rdtsc());
        }
      }
      auto t1 = std::chrono::steady_clock::now();
      double ns =
          std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
      if (r > 0) std::printf("%s %.1f\n", op.c_str(), ns);
    }
    return 0;
  }
  cudaStream_t s;
  CUDA(cudaStreamCreate(&s));
  void *a, *b;
  CUDA(cudaMalloc(&a, 4096));
  CUDA(cudaMalloc(&b, 4096));
  ncclComm_t comm = nullptr;
  if (op == "allreduce") {
    int dev = 0;
    NCCL(ncclCommInitAll(&comm, 1, &dev));
  }
  if (op == "launches") {
    for (long i = 0; i < n; ++i) braid_empty<<<1, 1, 0, s>>>();
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaGetLastError());
    std::printf("launches %ld\n", n);
    return 0;
  }
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up and is not printed
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) {
      if (op == "launch_sync") {
        braid_empty<<<1, 1, 0, s>>>();
        CUDA(cudaStreamSynchronize(s));
      } else if (op == "copy4k") {
        CUDA(cudaMemcpyAsync(b, a, 4096, cudaMemcpyDeviceToDevice, s));
        CUDA(cudaStreamSynchronize(s));
      } else if (op == "nvtx") {
        nvtxRangePushA("braid-bench");
        nvtxRangePop();
      } else if (op == "allreduce") {
        NCCL(ncclAllReduce(a, a, 1, ncclFloat32, ncclSum, comm, s));
        CUDA(cudaStreamSynchronize(s));
      } else {
        std::fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
      }
    }
    auto t1 = std::chrono::steady_clock::now();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
    if (r > 0) std::printf("%s %.1f\n", op.c_str(), ns);
  }
  if (comm) NCCL(ncclCommDestroy(comm));
  return 0;
}

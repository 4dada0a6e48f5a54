// A small CUDA job for the capture GPU tests: three streams with events between them, copies,
// memsets, two kernels, NVTX "step N" ranges, cudaProfilerStart/Stop around steps 1-2, and NCCL
// on a one-rank communicator (alone and grouped). Usage: capture_cuda_streams_nccl [steps].
// Prints "ok" after checking the arithmetic.
//   capture_cuda_streams_nccl launches N   N empty kernel launches, one synchronize, then prints
//                                          "launches N" through buffered stdout (issue 19: a
//                                          long job must exit 0 with every kernel stored).
//   capture_cuda_streams_nccl graph N      captures an all-reduce (one-rank communicator, out of
//                                          place) and a kernel into a CUDA graph and launches it N
//                                          times; prints "graph N".
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/capture/cuda/check.h"

__global__ void braid_scale(float* x, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

__global__ void braid_add(float* x, const float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void braid_empty() {}

int launches(long n) {
  for (long i = 0; i < n; ++i) braid_empty<<<1, 1>>>();
  CUDA(cudaDeviceSynchronize());
  std::printf("launches %ld\n", n);  // buffered: flushed by exit(), after braid's exit handler
  return 0;
}

int graph(int n) {
  const int count = 1 << 16;
  float *x, *y;
  CUDA(cudaMalloc(&x, count * sizeof(float)));
  CUDA(cudaMalloc(&y, count * sizeof(float)));
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  ncclComm_t comm;
  NCCL(ncclCommInitRank(&comm, 1, id, 0));
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  braid_scale<<<(count + 255) / 256, 256, 0, s>>>(x, count, 1.0f);
  NCCL(ncclAllReduce(x, y, count, ncclFloat32, ncclSum, comm, s));
  CUDA(cudaStreamEndCapture(s, &g));
  CUDA(cudaGraphInstantiate(&exec, g, 0));
  for (int i = 0; i < n; ++i) CUDA(cudaGraphLaunch(exec, s));
  CUDA(cudaStreamSynchronize(s));
  NCCL(ncclCommDestroy(comm));
  std::printf("graph %d\n", n);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "launches") return launches(std::atol(argv[2]));
  if (argc > 2 && std::string(argv[1]) == "graph") return graph(std::atoi(argv[2]));
  const int steps = argc > 1 ? std::atoi(argv[1]) : 4;
  const int n = 1 << 20;
  std::vector<float> host(n, 1.0f);
  float *a, *b, *c, *d;
  CUDA(cudaMalloc(&a, n * sizeof(float)));
  CUDA(cudaMalloc(&b, n * sizeof(float)));
  CUDA(cudaMalloc(&c, n * sizeof(float)));
  CUDA(cudaMalloc(&d, n * sizeof(float)));
  cudaStream_t s[3];
  for (auto& st : s) CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t ready;
  CUDA(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  ncclComm_t comm;
  NCCL(ncclCommInitRank(&comm, 1, id, 0));
  const int threads = 256, blocks = (n + threads - 1) / threads;
  for (int step = 0; step < steps; ++step) {
    nvtxRangePushA(("step " + std::to_string(step)).c_str());
    if (step == 1) CUDA(cudaProfilerStart());
    CUDA(cudaMemcpyAsync(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s[0]));
    CUDA(cudaMemsetAsync(b, 0, n * sizeof(float), s[1]));
    braid_scale<<<blocks, threads, 0, s[0]>>>(a, n, 2.0f);  // a = 2
    CUDA(cudaEventRecord(ready, s[0]));
    CUDA(cudaStreamWaitEvent(s[1], ready, 0));
    braid_add<<<blocks, threads, 0, s[1]>>>(b, a, n);  // b = 2
    braid_scale<<<blocks, threads, 0, s[2]>>>(c, n, 0.0f);
    NCCL(ncclAllReduce(b, c, n, ncclFloat32, ncclSum, comm, s[1]));  // c = 2
    NCCL(ncclGroupStart());
    NCCL(ncclAllReduce(a, d, n, ncclFloat32, ncclSum, comm, s[2]));
    NCCL(ncclBroadcast(a, d, n, ncclFloat32, 0, comm, s[2]));
    NCCL(ncclGroupEnd());
    CUDA(cudaMemcpyAsync(host.data(), c, n * sizeof(float), cudaMemcpyDeviceToHost, s[1]));
    CUDA(cudaStreamSynchronize(s[1]));
    CUDA(cudaDeviceSynchronize());
    if (step == 2) CUDA(cudaProfilerStop());
    nvtxRangePop();
    if (host[0] != 2.0f || host[n - 1] != 2.0f) {
      std::fprintf(stderr, "wrong result at step %d: %g\n", step, host[0]);
      return 1;
    }
    host.assign(n, 1.0f);
  }
  NCCL(ncclCommDestroy(comm));
  for (auto& st : s) CUDA(cudaStreamDestroy(st));
  std::printf("ok\n");
  return 0;
}

// CUDA(x) and NCCL(x): return 1 from main, saying which call failed and why, for the CUDA
// programs of the capture tests and benchmarks.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

#define CUDA(x)                                                                      \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                   \
      return 1;                                                                      \
    }                                                                                \
  } while (0)
#define NCCL(x)                                                                      \
  do {                                                                               \
    ncclResult_t r_ = (x);                                                           \
    if (r_ != ncclSuccess) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #x, ncclGetErrorString(r_));                   \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

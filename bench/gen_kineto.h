// Synthetic PyTorch-profiler (Kineto) Chrome-trace JSON for one rank, for import benchmarks.
//
// The layout follows real Kineto output (see the HTA and TraceLens traces in shared/data/traces):
// schemaVersion, deviceProperties and distributedInfo before traceEvents; traceName,
// displayTimeUnit and baseTimeNanoseconds after it; multi-line events with µs timestamps carrying
// three decimals; cpu_op / cuda_runtime / kernel / gpu_memcpy / gpu_memset / user_annotation /
// gpu_user_annotation events; ac2g flows; NCCL kernels with the record_param_comms args.
// The output depends only on the options (same seed, same bytes), and the generator returns
// exactly how many events of each kind it wrote, so a benchmark can check an importer's result.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "trace/model.h"

namespace braid::bench {

struct KinetoGenOptions {
  uint64_t target_bytes = uint64_t{1} << 30;  // stops after the first step that reaches it
  int32_t rank = 0;
  int32_t world_size = 8;
  uint64_t seed = 1;
  int32_t layers = 8;  // transformer layers per step (a step is ~50 KB per layer)
};

struct KinetoGenCounts {
  int64_t bytes = 0;             // size of the file
  int64_t events = 0;            // entries of traceEvents
  int64_t steps = 0;             // ProfilerStep#N user annotations (numbered from 0)
  int64_t user_annotations = 0;  // cat user_annotation, ProfilerStep#N and nccl:* included
  int64_t gpu_user_annotations = 0;
  int64_t cpu_ops = 0;  // cat cpu_op, record_param_comms included
  int64_t runtime = 0;  // cat cuda_runtime (launches, memcpy/memset calls, event calls)
  int64_t kernels = 0;  // cat kernel, NCCL kernels included
  int64_t gemm_kernels = 0, attention_kernels = 0, elementwise_kernels = 0;
  int64_t nccl_kernels = 0;
  std::array<int64_t, kNumCollOps> nccl_by_op{};  // NCCL kernels by CollOp (All-to-All from
                                                  // the CPU op: its kernel is SendRecv)
  int64_t memcpys = 0;                            // cat gpu_memcpy
  int64_t memsets = 0;                            // cat gpu_memset
  int64_t flows = 0;                              // ac2g "s" plus "f" events
  int64_t metadata = 0;                           // "M" events
  int64_t other = 0;  // the Trace span and the instant events Kineto adds at the end
  int32_t rank = 0, world_size = 0;

  // One-line JSON object with every counter; nccl_by_op keyed by to_string(CollOp).
  std::string to_json() const;
};

// Writes the trace to `out_path` (through a temporary file beside it, renamed at the end).
// Throws braid::Error (Usage for bad options, Io for write failures).
KinetoGenCounts generate_kineto(const KinetoGenOptions& options, const std::string& out_path);

}  // namespace braid::bench

// The `nccl` backend: real replay on GPUs, one process per GPU under mpirun (MPI bootstraps the
// NCCL unique id and gathers the timelines; a single process needs no mpirun).
//
// - Communicators: ncclCommInitRank for the world, then ncclCommSplit per schedule communicator
//   (key = position in the communicator), all in prepare(), before anything is timed.
// - Buffers: device memory per schedule buffer; Check mode uses uint64 elements initialised with
//   fusion::initial_value and sums them with ncclUint64 (exact, like the interpreter).
// - Streams: one CUDA stream per schedule stream, events as CUDA events (record / wait).
// - Compute and delay: a spin kernel (PTX loaded at run time, no nvcc needed) that occupies its
//   stream for the recorded duration x the compute scale (%globaltimer). In Check mode compute
//   values are computed on the host between synchronised steps.
// - Collectives: ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclAlltoAll, ncclBroadcast,
//   ncclReduce, ncclSend/ncclRecv, and manytomany as grouped ncclSend/ncclRecv.
// - Ops are enqueued in a global dependency order (common.h, global_order), so every rank issues
//   each communicator's operations in the same order; op times are CUDA events.
#pragma once

#include "replay/mpi_executor.h"

namespace braid::replay {

class NcclExecutor : public MpiExecutor {
 public:
  NcclExecutor() = default;
  std::string_view backend() const override { return "nccl"; }
  RunKind run_kind() const override { return RunKind::Replayed; }
  // Throws braid::Error(Unsupported) naming the reason when no GPU is usable.
  std::unique_ptr<PreparedReplay> prepare(const fusion::Schedule& s,
                                          const ReplayOptions& o) override;
};

// "" when this process can see a CUDA device, else why not (for tests that skip).
std::string gpu_unavailable_reason();

}  // namespace braid::replay

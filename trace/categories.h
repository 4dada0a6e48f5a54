// Kernel classification from kernel names, and parsing of NCCL kernel names.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trace/model.h"

namespace braid {

// What an NCCL kernel name says. Three forms are recognized:
//   ncclKernel_<Coll>_<ALGO>_<PROTO>_<RedOp>_<type>(ncclWorkElem)               (old)
//   ncclKernel_<Coll>_<ALGO>_<PROTO>_<RedOp>_<type>(ncclDevComm*, unsigned long, ncclWork*)
//   ncclDevKernel_<Coll>_<ALGO>_<PROTO>(ncclDevKernelArgsStorage<4096ul>)       (2.19+)
// SendRecv kernels carry All-to-All, Send/Recv and, on some versions, other collectives: the
// caller resolves their operation from the CPU-side op.
struct NcclKernelName {
  CollOp op = CollOp::Unknown;  // SendRecv for SendRecv kernels
  std::string algo;             // "RING", "TREE", "NVLS", ... ("" if absent)
  std::string proto;            // "LL", "LL128", "SIMPLE" ("" if absent)
  std::string redop;            // "Sum", ... ("" if absent)
  std::string dtype;            // normalized ("" if absent)
};
std::optional<NcclKernelName> parse_nccl_kernel_name(std::string_view name);

// The category of a kernel from its (possibly demangled) name. For NCCL kernels the category
// follows the collective named in the kernel; SendRecv kernels map to comm.sendrecv until the
// importer knows better.
Category classify_kernel(std::string_view name);

// Collective operation from framework op / annotation names: "nccl:all_reduce",
// "c10d::allreduce_", "_allgather_base", "allreduce", "reduce_scatter_tensor_coalesced", ...
CollOp coll_op_from_framework_name(std::string_view name);

}  // namespace braid

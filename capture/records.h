// Capture-specific rows that the `.braid` event model has no table for: the arguments of each
// NCCL call as the application made it, and the proxy operations NCCL's profiler plugin reports.
// The file sink stores them in the `nccl_calls` and `nccl_proxy_ops` tables (docs/capture.md).
#pragma once

#include <cstdint>

#include "trace/model.h"

namespace braid::capture {

// One NCCL API call (collective or point-to-point) on one rank.
struct NcclCallRow {
  int32_t rank = 0;
  StrId comm = 0;          // communicator identity shared by all its ranks
  int64_t seq = -1;        // per-communicator sequence number (the collectives.seq it joins)
  int64_t call_id = 0;     // process-unique id of the call
  int64_t group_id = 0;    // id of the ncclGroupStart/End group it was part of, 0 if none
  CollOp op = CollOp::Unknown;
  StrId redop = 0;         // "sum", "prod", "max", "min", "avg", "premulsum", 0 if none
  uint64_t sendbuff = 0, recvbuff = 0;
  int64_t count = 0;
  StrId dtype = 0;
  int32_t peer_or_root = -1;
  uint64_t stream_handle = 0;  // the cudaStream_t the application passed
  int64_t tid = 0;
  Ns enqueue = 0, ret = 0;     // host times of the call and its return
  int32_t result = 0;          // ncclResult_t
  int32_t comm_rank = -1, comm_size = -1;  // this process's rank in the communicator, its size
};

// One proxy operation (one channel of one collective on the network path).
struct ProxyOpRow {
  int32_t rank = 0;
  StrId comm = 0;
  int64_t seq = -1;     // the collective's sequence number, -1 if it could not be linked
  int64_t call_id = 0;  // the NCCL call it belongs to, 0 if it could not be linked
  int32_t channel = -1;
  int32_t peer = -1;
  bool is_send = false;
  int32_t steps = -1;
  int32_t chunk_size = -1;
  int64_t tid = 0;      // the proxy thread
  Ns start = 0, end = 0;
};

}  // namespace braid::capture

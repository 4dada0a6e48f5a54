// What the NCCL interposer and NCCL's profiler plugin hand to the agent's writer thread.
#pragma once

#include <cstdint>
#include <string>

#include "capture/comm_book.h"
#include "trace/model.h"

namespace braid::capture {

// One NCCL call, built on the application's thread without allocation.
struct NcclCall {
  int64_t call_id = 0;
  int64_t group_id = 0;    // 0: not inside ncclGroupStart/End
  int32_t group_size = 1;  // calls in its group (set at ncclGroupEnd)
  uint64_t external_id = 0;  // id pushed to CUPTI around the launch (call or group id)
  const CommRecord* comm = nullptr;
  int64_t seq = -1;
  CollOp op = CollOp::Unknown;
  const char* dtype = "";  // normalized name, a string literal
  int dtype_bytes = 0;
  const char* redop = "";  // "" for ops without a reduction
  int64_t count = 0;
  int32_t peer_or_root = -1;
  uint64_t sendbuff = 0, recvbuff = 0, stream_handle = 0;
  int64_t tid = 0;
  int64_t enqueue = 0, ret = 0;  // host ns
  int32_t result = 0;
  bool in_window = true;  // made while the capture window was open
  // CUDA graphs: kGraphCaptured, a call made while its stream was being captured (it launches
  // nothing then and takes no sequence number: seq -1; its collectives are the graph's replays);
  // kGraphReplay, one execution of such a call by a graph launch (its GPU work is found by
  // NcclGraphLink).
  uint8_t graph = 0;
};
inline constexpr uint8_t kGraphCaptured = 1, kGraphReplay = 2;

// The call's sequence number, taken from its communicator (CommRecord::take_seq).
inline int64_t take_seq(const NcclCall& c) {
  if (!c.comm) return -1;
  bool p2p = c.op == CollOp::Send || c.op == CollOp::Recv;
  return c.comm->take_seq(p2p, c.peer_or_root, c.op == CollOp::Send);
}

// A graph node whose replayed records belong to a replayed call: the records of node `node`
// launched by the graph launch with correlation id `correlation` are the GPU work of the call
// whose external id is `external_id`.
struct NcclGraphLink {
  uint32_t correlation = 0;
  uint64_t node = 0;
  uint64_t external_id = 0;
};

// Algorithm, protocol and channels of one call, from the profiler plugin's Coll/P2p events.
struct NcclCallDetail {
  int64_t call_id = 0;
  std::string algo, proto;
  int32_t channels = -1;
  int64_t nccl_seq = -1;  // NCCL's own sequence number for the op (per collective type)
};

// One proxy operation from the profiler plugin (times: host ns).
struct NcclProxyOp {
  int64_t call_id = 0;
  int32_t channel = -1, peer = -1, steps = -1, chunk_size = -1;
  bool is_send = false;
  int64_t tid = 0;
  int64_t start = 0, end = 0;
};

// A communicator was made (or the process learnt its rank from one).
struct NcclCommEvent {
  const CommRecord* comm = nullptr;
  std::string nccl_version;
};

}  // namespace braid::capture

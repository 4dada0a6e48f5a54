// NCCL's profiler plugin, served by the same library as the interposer (NCCL_PROFILER_PLUGIN
// names it; NCCL's dlopen finds it already loaded). It adds what only NCCL knows to the calls the
// interposer records: algorithm, protocol and channel count per collective (Coll/P2p events)
// and the proxy operations that move its data (ProxyOp events, one per channel and peer).
//
// Linking: a CollApi/P2pApi event starts inside the interposed call on the calling thread, so it
// takes that call's id; Coll/P2p events name it as parent, ProxyOp events name those.
//
// Launches: a GroupApi event (NCCL starts one at the first call of a group, or in an ungrouped
// call) takes the id the group's GPU work is correlated by (the group's, else the call's); its
// KernelLaunch events (the launch of the group's kernels, on NCCL's own thread for a non-blocking
// communicator, whose CUPTI external-correlation stack is otherwise empty) push that id around
// the launch and pop exactly it. The communicator's rank and size come from init, and fill in a
// communicator the interposer could not ask (a non-blocking split still being made). Event
// handles come from a fixed ring of slots claimed atomically: nothing is allocated per event,
// and a late child naming a recycled parent reads a valid slot (at worst a wrong id, never freed
// memory).
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "capture/agent/agent.h"
#include "capture/agent/nccl_interpose.h"
#include "capture/nccl_profiler_abi.h"

namespace braid::capture {
namespace {

namespace np = nccl_profiler;
using agent::Agent;

struct Slot {
  uint64_t type = 0;
  int64_t call_id = 0;  // GroupApi: the external id its launches carry
  bool pushed = false;  // KernelLaunch: an id was pushed around it
  // ProxyOp
  int32_t channel = -1, peer = -1, steps = -1, chunk = -1;
  bool is_send = false;
  int64_t start = 0, tid = 0;
};

constexpr size_t kSlots = 1 << 16;
Slot g_slots[kSlots];
std::atomic<uint64_t> g_next_slot{0};

Slot* claim() { return &g_slots[g_next_slot.fetch_add(1, std::memory_order_relaxed) % kSlots]; }

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t parent_call(void* parent) {
  auto* p = static_cast<Slot*>(parent);
  if (p < g_slots || p >= g_slots + kSlots) return 0;  // a parent we did not make
  return p->call_id;
}

struct Context {
  uint64_t comm_id;
  int rank, nranks;
};

ncclResult_t init(void** context, uint64_t comm_id, int* mask, const char*, int, int nranks,
                  int rank, np::Logger) {
  Agent* ag = Agent::get();
  if (!ag || !ag->config().trace.nccl) {  // no capture (of NCCL) asked for: every event off
    *mask = 0;
    *context = nullptr;
    return ncclSuccess;
  }
  *context = new Context{comm_id, rank, nranks};
  *mask = np::kGroupApi | np::kCollApi | np::kP2pApi | np::kKernelLaunch | np::kColl | np::kP2p |
          np::kProxyOp;
  return ncclSuccess;
}

ncclResult_t start_event(void* context, void** handle, np::EventDescr* d) {
  *handle = nullptr;
  Agent* ag = Agent::running();
  if (!ag || !d) return ncclSuccess;
  switch (d->type) {
    case np::kGroupApi: {
      Slot* s = claim();
      s->type = d->type;
      s->call_id = static_cast<int64_t>(current_nccl_launch_id());
      *handle = s;
      break;
    }
    case np::kKernelLaunch: {
      int64_t id = parent_call(d->parent);
      if (!id) break;
      Slot* s = claim();
      s->type = d->type;
      s->call_id = id;
      s->pushed = ag->push_external(static_cast<uint64_t>(id));
      *handle = s;
      break;
    }
    case np::kCollApi:
    case np::kP2pApi: {
      if (auto* ctx = static_cast<Context*>(context)) note_comm_shape(ctx->rank, ctx->nranks);
      // NCCL knows whether the call's stream is being captured into a CUDA graph.
      if (d->type == np::kCollApi ? d->coll_api.graph_captured : d->p2p_api.graph_captured)
        note_graph_captured();
      Slot* s = claim();
      s->type = d->type;
      s->call_id = current_nccl_call();
      *handle = s;
      break;
    }
    case np::kColl:
    case np::kP2p: {
      Slot* s = claim();
      s->type = d->type;
      s->call_id = parent_call(d->parent);
      if (s->call_id && ag->window_open()) {
        NcclCallDetail det;
        det.call_id = s->call_id;
        if (d->type == np::kColl) {
          det.algo = d->coll.algo ? d->coll.algo : "";
          det.proto = d->coll.proto ? d->coll.proto : "";
          det.channels = d->coll.channels;
          det.nccl_seq = static_cast<int64_t>(d->coll.seq);
        } else {
          det.channels = d->p2p.channels;
        }
        ag->pipeline().post(std::move(det));
      }
      *handle = s;
      break;
    }
    case np::kProxyOp: {
      if (!ag->window_open()) break;
      Slot* s = claim();
      s->type = d->type;
      s->call_id = parent_call(d->parent);
      s->channel = d->proxy_op.channel;
      s->peer = d->proxy_op.peer;
      s->steps = d->proxy_op.steps;
      s->chunk = d->proxy_op.chunk_size;
      s->is_send = d->proxy_op.is_send != 0;
      s->tid = static_cast<int64_t>(syscall(SYS_gettid));
      s->start = now_ns();
      *handle = s;
      break;
    }
    default:
      break;
  }
  return ncclSuccess;
}

ncclResult_t stop_event(void* handle) {
  auto* s = static_cast<Slot*>(handle);
  if (s && s->type == np::kKernelLaunch) {
    if (s->pushed)
      if (Agent* ag = Agent::running()) ag->pop_external();
    s->pushed = false;
    return ncclSuccess;
  }
  if (!s || s->type != np::kProxyOp) return ncclSuccess;
  if (Agent* ag = Agent::running()) {
    NcclProxyOp p;
    p.call_id = s->call_id;
    p.channel = s->channel;
    p.peer = s->peer;
    p.steps = s->steps;
    p.chunk_size = s->chunk;
    p.is_send = s->is_send;
    p.tid = s->tid;
    p.start = s->start;
    p.end = now_ns();
    ag->pipeline().post(p);
  }
  return ncclSuccess;
}

ncclResult_t record_event_state(void*, np::EventState, np::EventStateArgs*) { return ncclSuccess; }

ncclResult_t finalize(void* context) {
  delete static_cast<Context*>(context);
  return ncclSuccess;
}

}  // namespace
}  // namespace braid::capture

extern "C" __attribute__((visibility("default")))
const braid::capture::nccl_profiler::ProfilerV5 ncclProfiler_v5 = {
    "braid",
    braid::capture::init,
    braid::capture::start_event,
    braid::capture::stop_event,
    braid::capture::record_event_state,
    braid::capture::finalize};

// The NCCL interposer: exports the public API of nccl.h, records each call and forwards it to
// the real NCCL found after this library (dlsym RTLD_NEXT, else the loaded libnccl.so.2). It
// never links NCCL. Per call it takes a sequence number of its communicator, pushes an id to
// CUPTI's external correlation around the launch (the call's own id, or its group's id for calls
// inside ncclGroupStart/End, whose kernels launch at ncclGroupEnd) and hands the record to the
// writer thread. Calls NCCL makes into its own API (ncclBcast -> ncclBroadcast) pass through.
#include "capture/agent/nccl_interpose.h"

#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "capture/agent/agent.h"

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

namespace braid::capture {
namespace {

using agent::Agent;

thread_local int t_depth = 0;        // nesting of interposed calls on this thread
thread_local int t_group_depth = 0;  // ncclGroupStart nesting
thread_local int64_t t_group_id = 0;
thread_local std::vector<NcclCall>* t_group_calls = nullptr;
thread_local int64_t t_current_call = 0;
// CUDA graphs: the external id of the call (or group end) running on this thread, the graph nodes
// created inside it, and whether NCCL said it is being captured.
struct GraphNode {
  uint32_t graph;
  uint64_t node;
};
thread_local uint64_t t_current_ext = 0;
thread_local CommRecord* t_current_comm = nullptr;
thread_local std::vector<GraphNode>* t_nodes = nullptr;
thread_local bool t_captured = false;

// This thread's lists (its group's calls, the graph nodes of the call it is in): plain pointers,
// so an NCCL call made during exit, after the thread's thread_local destructors ran, still finds
// valid memory; freed at thread exit through a pthread key.
struct ThreadLists {
  std::vector<NcclCall> group_calls;
  std::vector<GraphNode> nodes;
};
thread_local ThreadLists* t_lists = nullptr;
pthread_key_t g_lists_key;
pthread_once_t g_lists_once = PTHREAD_ONCE_INIT;
void free_lists(void* p) {
  delete static_cast<ThreadLists*>(p);
  t_lists = nullptr;
  t_group_calls = nullptr;
  t_nodes = nullptr;
}
ThreadLists& lists() {
  if (!t_lists) {
    pthread_once(&g_lists_once, [] { pthread_key_create(&g_lists_key, free_lists); });
    t_lists = new ThreadLists();
    pthread_setspecific(g_lists_key, t_lists);
  }
  return *t_lists;
}

void begin_graph_watch(uint64_t ext) {
  t_current_ext = ext;
  if (!t_nodes) t_nodes = &lists().nodes;
  t_nodes->clear();
  t_captured = false;
}
// After the call: whether it was captured; its nodes are registered as this call's.
bool end_graph_watch(Agent* ag, const NcclCall& c) {
  t_current_ext = 0;
  bool captured = t_captured || (t_nodes && !t_nodes->empty());
  if (captured && ag && t_nodes) {
    NcclCall tmpl = c;
    tmpl.graph = kGraphCaptured;
    for (const GraphNode& n : *t_nodes) ag->graphs().captured(n.graph, {n.node}, tmpl);
  }
  return captured;
}

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t thread_id() {
  thread_local int64_t tid = static_cast<int64_t>(syscall(SYS_gettid));
  return tid;
}

void* real_symbol(const char* name) {
  if (void* p = dlsym(RTLD_NEXT, name)) return p;
  // NCCL loaded privately (RTLD_LOCAL, e.g. by a Python extension): ask it directly.
  for (const char* lib : {"libnccl.so.2", "libnccl.so"}) {
    if (void* h = dlopen(lib, RTLD_NOLOAD | RTLD_LAZY)) {
      void* p = dlsym(h, name);
      dlclose(h);
      if (p) return p;
    }
  }
  std::fprintf(stderr, "braid capture: the real %s was not found (is NCCL loaded?)\n", name);
  return nullptr;
}

template <typename Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(real_symbol(name));
}

const char* dtype_name(ncclDataType_t t, int& bytes) {
  switch (t) {
    case ncclInt8:
      bytes = 1;
      return "int8";
    case ncclUint8:
      bytes = 1;
      return "uint8";
    case ncclInt32:
      bytes = 4;
      return "int32";
    case ncclUint32:
      bytes = 4;
      return "uint32";
    case ncclInt64:
      bytes = 8;
      return "int64";
    case ncclUint64:
      bytes = 8;
      return "uint64";
    case ncclFloat16:
      bytes = 2;
      return "float16";
    case ncclFloat32:
      bytes = 4;
      return "float32";
    case ncclFloat64:
      bytes = 8;
      return "float64";
    case ncclBfloat16:
      bytes = 2;
      return "bfloat16";
    case ncclFloat8e4m3:
      bytes = 1;
      return "float8_e4m3";
    case ncclFloat8e5m2:
      bytes = 1;
      return "float8_e5m2";
    default:
      bytes = 0;
      return "unknown";
  }
}

const char* redop_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return "sum";
    case ncclProd:
      return "prod";
    case ncclMax:
      return "max";
    case ncclMin:
      return "min";
    case ncclAvg:
      return "avg";
    default:
      return "premulsum";  // ops made by ncclRedOpCreatePreMulSum
  }
}

struct Args {
  CollOp op;
  ncclComm_t comm;
  size_t count;
  ncclDataType_t dtype;
  const char* redop;
  int peer_or_root;
  const void* send;
  const void* recv;
  cudaStream_t stream;
};

void learn_shape(Agent* ag, CommRecord* rec, ncclComm_t comm);

// Runs one collective or point-to-point call, recording it.
template <typename Call>
ncclResult_t record_call(const Args& a, Call&& call) {
  Agent* ag = t_depth == 0 ? Agent::get() : nullptr;
  if (ag && !ag->config().trace.nccl) ag = nullptr;  // --trace without nccl: passed through
  if (!ag) {
    ++t_depth;
    ncclResult_t r = call();
    --t_depth;
    return r;
  }
  NcclCall c;
  c.call_id = ag->next_id();
  CommRecord* rec = ag->comms().find_or_add_unknown(a.comm);
  learn_shape(ag, rec, a.comm);
  c.comm = rec;
  c.op = a.op;
  c.dtype = dtype_name(a.dtype, c.dtype_bytes);
  c.redop = a.redop;
  c.count = static_cast<int64_t>(a.count);
  c.peer_or_root = a.peer_or_root;
  c.sendbuff = reinterpret_cast<uint64_t>(a.send);
  c.recvbuff = reinterpret_cast<uint64_t>(a.recv);
  c.stream_handle = reinterpret_cast<uint64_t>(a.stream);
  c.tid = thread_id();
  ag->name_this_thread();
  c.in_window = ag->window_open();
  bool grouped = t_group_depth > 0;
  c.group_id = grouped ? t_group_id : 0;
  // Sequence numbers are taken when the call has run: a grouped call's when its group really ends
  // (a simulated group, ncclGroupSimulateEnd, launches nothing and takes none), none for a call
  // captured into a CUDA graph (each launch of the graph takes one for it).
  // The call's own id, pushed around the call grouped or not: NCCL 2.28 does a one-rank
  // collective's copy inside the call itself. A group's kernels launch at ncclGroupEnd, under the
  // group's id (the collector looks for the call's id first, then its group's).
  c.external_id = static_cast<uint64_t>(c.call_id);
  ++t_depth;
  t_current_call = c.call_id;
  t_current_comm = rec;
  begin_graph_watch(c.external_id);
  bool pushed = ag->push_external(c.external_id);
  c.enqueue = now_ns();
  ncclResult_t r = call();
  c.ret = now_ns();
  if (pushed) ag->pop_external();
  t_current_call = 0;
  t_current_comm = nullptr;
  --t_depth;
  c.result = static_cast<int32_t>(r);
  if (end_graph_watch(ag, c)) c.graph = kGraphCaptured;
  if (!grouped && c.graph != kGraphCaptured) c.seq = take_seq(c);
  if (grouped && t_group_calls)
    t_group_calls->push_back(c);  // posted at ncclGroupEnd
  else
    ag->pipeline().post(c);
  return r;
}

void note_comm(ncclComm_t comm, std::string identity, const char* how, int rank, int nranks,
               std::string parent = "") {
  Agent* ag = Agent::get();
  if (!ag || !comm) return;
  CommRecord* rec =
      ag->comms().add(comm, std::move(identity), how, rank, nranks, std::move(parent));
  ag->on_comm(rec);
}

// Rank and size of a communicator NCCL made for us (split, shrink).
void comm_shape(ncclComm_t comm, int& rank, int& nranks) {
  static auto user_rank = real<ncclResult_t (*)(const ncclComm_t, int*)>("ncclCommUserRank");
  static auto count = real<ncclResult_t (*)(const ncclComm_t, int*)>("ncclCommCount");
  rank = nranks = -1;
  if (user_rank && user_rank(comm, &rank) != ncclSuccess) rank = -1;
  if (count && count(comm, &nranks) != ncclSuccess) nranks = -1;
}

// A communicator whose shape is still unknown (a non-blocking ncclCommSplit/Shrink returns before
// NCCL made it): asked again, and recorded once known.
void learn_shape(Agent* ag, CommRecord* rec, ncclComm_t comm) {
  if (rec->nranks >= 0 && rec->rank >= 0) return;
  int rank = -1, nranks = -1;
  comm_shape(comm, rank, nranks);
  if (nranks <= 0 || rank < 0) return;
  rec->rank = rank;
  rec->nranks = nranks;
  ag->on_comm(rec);
}

void note_version() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto get = real<ncclResult_t (*)(int*)>("ncclGetVersion");
    int v = 0;
    if (Agent* ag = Agent::get(); ag && get && get(&v) == ncclSuccess) ag->set_nccl_version(v);
  });
}

#define BRAID_REAL(fn)                              \
  static auto real_fn = real<decltype(&::fn)>(#fn); \
  if (!real_fn) return ncclSystemError

}  // namespace

int64_t current_nccl_call() { return t_current_call; }

uint64_t current_nccl_launch_id() {
  if (t_group_depth > 0) return static_cast<uint64_t>(t_group_id);
  return t_current_ext;
}

void note_comm_shape(int rank, int nranks) {
  CommRecord* rec = t_current_comm;
  if (!rec || nranks <= 0 || rank < 0 || (rec->nranks >= 0 && rec->rank >= 0)) return;
  rec->rank = rank;
  rec->nranks = nranks;
  if (Agent* ag = Agent::running()) ag->on_comm(rec);
}

bool note_graph_node(uint32_t graph, uint64_t node) {
  if (t_current_ext == 0 || !t_nodes) return false;
  t_nodes->push_back({graph, node});
  return true;
}

void note_graph_captured() {
  if (t_current_ext != 0) t_captured = true;
}

}  // namespace braid::capture

using namespace braid::capture;
using braid::CollOp;

// ---- communicators ----

BRAID_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                           int rank) {
  BRAID_REAL(ncclCommInitRank);
  ++t_depth;
  ncclResult_t r = real_fn(comm, nranks, id, rank);
  --t_depth;
  if (r == ncclSuccess && t_depth == 0) {
    note_version();
    note_comm(*comm, CommBook::identity_from_unique_ids(&id, sizeof id), "uid", rank, nranks);
  }
  return r;
}

BRAID_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                                 int rank, ncclConfig_t* config) {
  BRAID_REAL(ncclCommInitRankConfig);
  ++t_depth;
  ncclResult_t r = real_fn(comm, nranks, id, rank, config);
  --t_depth;
  if ((r == ncclSuccess || r == ncclInProgress) && t_depth == 0) {
    note_version();
    note_comm(*comm, CommBook::identity_from_unique_ids(&id, sizeof id), "uid", rank, nranks);
  }
  return r;
}

BRAID_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                                   ncclUniqueId* ids, ncclConfig_t* config) {
  BRAID_REAL(ncclCommInitRankScalable);
  ++t_depth;
  ncclResult_t r = real_fn(comm, nranks, rank, nId, ids, config);
  --t_depth;
  if ((r == ncclSuccess || r == ncclInProgress) && t_depth == 0 && nId > 0) {
    note_version();
    note_comm(*comm, CommBook::identity_from_unique_ids(ids, sizeof(ncclUniqueId) * nId), "uids",
              rank, nranks);
  }
  return r;
}

BRAID_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  BRAID_REAL(ncclCommInitAll);
  ++t_depth;
  ncclResult_t r = real_fn(comms, ndev, devlist);
  --t_depth;
  if (r == ncclSuccess && t_depth == 0) {
    // All ranks live in this process: one identity, unique to the process and the call.
    static std::atomic<int> n{0};
    std::string id = "nccl:all-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    note_version();
    for (int i = 0; i < ndev; ++i) note_comm(comms[i], id, "all", i, ndev);
  }
  return r;
}

BRAID_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                        ncclConfig_t* config) {
  BRAID_REAL(ncclCommSplit);
  std::string identity;
  std::string parent;
  Agent* ag = t_depth == 0 ? Agent::get() : nullptr;
  if (ag) {
    identity = ag->comms().child_identity(comm, "split", color);
    parent = ag->comms().find_or_add_unknown(comm)->identity;
  }
  ++t_depth;
  ncclResult_t r = real_fn(comm, color, key, newcomm, config);
  --t_depth;
  if (ag && (r == ncclSuccess || r == ncclInProgress) && newcomm && *newcomm) {
    int rank, nranks;
    comm_shape(*newcomm, rank, nranks);
    note_comm(*newcomm, identity, "split", rank, nranks, parent);
  }
  return r;
}

BRAID_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int nexclude,
                                         ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  BRAID_REAL(ncclCommShrink);
  std::string identity, parent;
  Agent* ag = t_depth == 0 ? Agent::get() : nullptr;
  if (ag) {
    identity = ag->comms().child_identity(comm, "shrink", 0);
    parent = ag->comms().find_or_add_unknown(comm)->identity;
  }
  ++t_depth;
  ncclResult_t r = real_fn(comm, exclude, nexclude, newcomm, config, flags);
  --t_depth;
  if (ag && (r == ncclSuccess || r == ncclInProgress) && newcomm && *newcomm) {
    int rank, nranks;
    comm_shape(*newcomm, rank, nranks);
    note_comm(*newcomm, identity, "shrink", rank, nranks, parent);
  }
  return r;
}

BRAID_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  BRAID_REAL(ncclCommDestroy);
  ncclResult_t r = real_fn(comm);
  if (Agent* ag = Agent::running()) ag->comms().destroyed(comm);
  return r;
}

BRAID_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  BRAID_REAL(ncclCommAbort);
  ncclResult_t r = real_fn(comm);
  if (Agent* ag = Agent::running()) ag->comms().destroyed(comm);
  return r;
}

// ---- groups ----

BRAID_EXPORT ncclResult_t ncclGroupStart() {
  BRAID_REAL(ncclGroupStart);
  if (t_depth == 0 && t_group_depth++ == 0) {
    Agent* ag = Agent::get();
    t_group_id = ag ? ag->next_id() : 0;
    if (!t_group_calls) t_group_calls = &lists().group_calls;
    t_group_calls->clear();
  }
  ++t_depth;
  ncclResult_t r = real_fn();
  --t_depth;
  return r;
}

BRAID_EXPORT ncclResult_t ncclGroupEnd() {
  BRAID_REAL(ncclGroupEnd);
  if (t_depth > 0 || t_group_depth == 0) {
    ++t_depth;
    ncclResult_t r = real_fn();
    --t_depth;
    return r;
  }
  bool outermost = t_group_depth == 1;
  Agent* ag = outermost ? Agent::running() : nullptr;
  // The group's kernels launch here (or, while its stream is captured, become graph nodes).
  if (ag) begin_graph_watch(static_cast<uint64_t>(t_group_id));
  bool pushed = ag && ag->push_external(static_cast<uint64_t>(t_group_id));
  ++t_depth;
  ncclResult_t r = real_fn();
  --t_depth;
  if (pushed) ag->pop_external();
  t_current_ext = 0;
  --t_group_depth;
  if (outermost) {
    if (ag && t_group_calls) {
      int32_t n = static_cast<int32_t>(t_group_calls->size());
      bool group_nodes = t_nodes && !t_nodes->empty();
      bool group_captured = t_captured || group_nodes;
      for (NcclCall& c : *t_group_calls) {
        c.group_size = n;
        group_captured = group_captured || c.graph == kGraphCaptured;
        if (group_nodes) {  // the group's nodes belong to each of its calls
          NcclCall tmpl = c;
          tmpl.graph = kGraphCaptured;
          for (const GraphNode& g : *t_nodes) ag->graphs().captured(g.graph, {g.node}, tmpl);
        }
      }
      for (NcclCall& c : *t_group_calls) {
        if (group_captured)
          c.graph = kGraphCaptured;
        else
          c.seq = take_seq(c);
        ag->pipeline().post(c);
      }
    }
    if (t_group_calls) t_group_calls->clear();
    t_group_id = 0;
  }
  return r;
}

// NCCL >= 2.22: ends a group without launching it (NCCL estimates its time). The thread leaves
// the group; its calls are not recorded.
BRAID_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  BRAID_REAL(ncclGroupSimulateEnd);
  ++t_depth;
  ncclResult_t r = real_fn(info);
  --t_depth;
  if (t_depth > 0 || t_group_depth == 0) return r;
  if (--t_group_depth == 0) {
    if (t_group_calls) t_group_calls->clear();
    t_group_id = 0;
  }
  return r;
}

// ---- collectives and point-to-point ----

BRAID_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count,
                                        ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  BRAID_REAL(ncclAllReduce);
  return record_call({CollOp::AllReduce, comm, count, dt, redop_name(op), -1, send, recv, stream},
                     [&] { return real_fn(send, recv, count, dt, op, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t dt,
                                     ncclRedOp_t op, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  BRAID_REAL(ncclReduce);
  return record_call({CollOp::Reduce, comm, count, dt, redop_name(op), root, send, recv, stream},
                     [&] { return real_fn(send, recv, count, dt, op, root, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count,
                                        ncclDataType_t dt, int root, ncclComm_t comm,
                                        cudaStream_t stream) {
  BRAID_REAL(ncclBroadcast);
  return record_call({CollOp::Broadcast, comm, count, dt, "", root, send, recv, stream},
                     [&] { return real_fn(send, recv, count, dt, root, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t dt, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  BRAID_REAL(ncclBcast);
  return record_call({CollOp::Broadcast, comm, count, dt, "", root, buff, buff, stream},
                     [&] { return real_fn(buff, count, dt, root, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount,
                                            ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                                            cudaStream_t stream) {
  BRAID_REAL(ncclReduceScatter);
  return record_call(
      {CollOp::ReduceScatter, comm, recvcount, dt, redop_name(op), -1, send, recv, stream},
      [&] { return real_fn(send, recv, recvcount, dt, op, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount,
                                        ncclDataType_t dt, ncclComm_t comm, cudaStream_t stream) {
  BRAID_REAL(ncclAllGather);
  return record_call({CollOp::AllGather, comm, sendcount, dt, "", -1, send, recv, stream},
                     [&] { return real_fn(send, recv, sendcount, dt, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count,
                                       ncclDataType_t dt, ncclComm_t comm, cudaStream_t stream) {
  BRAID_REAL(ncclAlltoAll);
  return record_call({CollOp::AllToAll, comm, count, dt, "", -1, send, recv, stream},
                     [&] { return real_fn(send, recv, count, dt, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclGather(const void* send, void* recv, size_t count, ncclDataType_t dt,
                                     int root, ncclComm_t comm, cudaStream_t stream) {
  BRAID_REAL(ncclGather);
  return record_call({CollOp::Gather, comm, count, dt, "", root, send, recv, stream},
                     [&] { return real_fn(send, recv, count, dt, root, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclScatter(const void* send, void* recv, size_t count, ncclDataType_t dt,
                                      int root, ncclComm_t comm, cudaStream_t stream) {
  BRAID_REAL(ncclScatter);
  return record_call({CollOp::Scatter, comm, count, dt, "", root, send, recv, stream},
                     [&] { return real_fn(send, recv, count, dt, root, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t dt, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  BRAID_REAL(ncclSend);
  return record_call({CollOp::Send, comm, count, dt, "", peer, send, nullptr, stream},
                     [&] { return real_fn(send, count, dt, peer, comm, stream); });
}

BRAID_EXPORT ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t dt, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  BRAID_REAL(ncclRecv);
  return record_call({CollOp::Recv, comm, count, dt, "", peer, nullptr, recv, stream},
                     [&] { return real_fn(recv, count, dt, peer, comm, stream); });
}

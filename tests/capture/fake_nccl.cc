// A fake NCCL for the interposer tests: exports the nccl.h calls the interposer wraps, with
// enough real behaviour for bookkeeping to be checked (unique ids, communicator ranks and sizes,
// ncclCommSplit agreeing across processes through files, ncclBcast calling ncclBroadcast
// through its public symbol as real NCCL does) and a count of every call it received.
//
// Like NCCL >= 2.28 it loads the profiler plugin named by NCCL_PROFILER_PLUGIN (symbol
// ncclProfiler_v5) and reports to it: a CollApi/P2pApi event inside each call, Coll events
// (algorithm RING, protocol SIMPLE, 2 channels) with one ProxyOp each under them, and for
// point-to-point calls inside a group the P2p events (1 channel) at ncclGroupEnd, as NCCL does;
// a GroupApi event from the first call of a group (or around an ungrouped call) to its end, and a
// KernelLaunch event, child of it, around each launch.
//
// Non-blocking communicators (config.blocking = 0): init and split return ncclInProgress, the
// communicator is made when ncclCommGetAsyncError is asked (ncclCommUserRank/Count say
// ncclInProgress before), and its GPU work is launched from a thread of NCCL's own, as NCCL does.
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "capture/nccl_profiler_abi.h"

namespace np = braid::capture::nccl_profiler;

struct ncclComm {
  int rank, nranks;
  std::string id;
  int splits = 0;
  void* prof = nullptr;  // the profiler plugin's context for this communicator
  int mask = 0;
  uint64_t seq = 0;
  bool nonblocking = false, ready = true;
};

namespace {
std::atomic<int> g_calls{0};
int g_group = 0;
ncclComm* g_group_api_comm = nullptr;  // the GroupApi event in progress and its communicator
void* g_group_api = nullptr;
const np::ProfilerV5* profiler() {
  static const np::ProfilerV5* p = [] () -> const np::ProfilerV5* {
    const char* path = std::getenv("NCCL_PROFILER_PLUGIN");
    if (!path || !*path) return nullptr;
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return h ? static_cast<const np::ProfilerV5*>(dlsym(h, "ncclProfiler_v5")) : nullptr;
  }();
  return p;
}

void profile_init(ncclComm* c) {
  if (auto* p = profiler()) {
    if (p->init(&c->prof, std::hash<std::string>()(c->id), &c->mask, "fake", 1, c->nranks, c->rank,
                nullptr) != ncclSuccess)
      c->mask = 0;
  }
}

// The Coll (or P2p) event of one operation with its ProxyOp, as the proxy thread would report.
void profile_op(ncclComm* c, void* api, bool p2p, const char* func, size_t count, int peer) {
  auto* p = profiler();
  if (!p || !(c->mask & (p2p ? np::kP2p : np::kColl))) return;
  np::EventDescr d{};
  d.type = p2p ? np::kP2p : np::kColl;
  d.parent = api;
  d.rank = c->rank;
  if (p2p) {
    d.p2p.func = func;
    d.p2p.count = count;
    d.p2p.datatype = "ncclInt32";
    d.p2p.peer = peer;
    d.p2p.channels = 1;
  } else {
    d.coll.seq = c->seq++;
    d.coll.func = func;
    d.coll.count = count;
    d.coll.datatype = "ncclFloat32";
    d.coll.channels = 2;
    d.coll.algo = "RING";
    d.coll.proto = "SIMPLE";
  }
  void* op = nullptr;
  p->start_event(c->prof, &op, &d);
  if (c->mask & np::kProxyOp) {
    np::EventDescr pd{};
    pd.type = np::kProxyOp;
    pd.parent = op;
    pd.rank = c->rank;
    pd.proxy_op.pid = getpid();
    pd.proxy_op.channel = 0;
    pd.proxy_op.peer = (c->rank + 1) % c->nranks;
    pd.proxy_op.steps = 4;
    pd.proxy_op.chunk_size = 131072;
    pd.proxy_op.is_send = 1;
    void* proxy = nullptr;
    p->start_event(c->prof, &proxy, &pd);
    p->stop_event(proxy);
  }
  p->stop_event(op);
}

struct Deferred {
  ncclComm* comm;
  void* api;
  const char* func;
  size_t count;
  int peer;
};
std::vector<Deferred> g_deferred;  // point-to-point ops waiting for ncclGroupEnd

// Whether the stream is being captured into a CUDA graph (the fake CUDA runtime of
// fake_cupti.cc, where it is loaded).
bool capturing(cudaStream_t stream) {
  static auto is =
      reinterpret_cast<int (*)(uint32_t)>(dlsym(RTLD_DEFAULT, "fakecuda_is_capturing"));
  return is && is(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(stream)));
}

// One collective or point-to-point call as NCCL reports it to the plugin (with NCCL >= 2.28's
// graphCaptured: whether the call's stream is being captured).
void profile_call(ncclComm* c, bool p2p, const char* func, size_t count, int peer,
                  cudaStream_t stream) {
  auto* p = profiler();
  if (!p || !c->prof) return;
  void* api = nullptr;
  if (c->mask & (p2p ? np::kP2pApi : np::kCollApi)) {
    np::EventDescr d{};
    d.type = p2p ? np::kP2pApi : np::kCollApi;
    d.rank = c->rank;
    if (p2p) {
      d.p2p_api.func = func;
      d.p2p_api.count = count;
      d.p2p_api.stream = stream;
      d.p2p_api.graph_captured = capturing(stream);
    } else {
      d.coll_api.func = func;
      d.coll_api.count = count;
      d.coll_api.stream = stream;
      d.coll_api.graph_captured = capturing(stream);
    }
    p->start_event(c->prof, &api, &d);
  }
  if (p2p && g_group > 0) {
    g_deferred.push_back({c, api, func, count, peer});
  } else {
    profile_op(c, api, p2p, func, count, peer);
  }
  if (api) p->stop_event(api);
}

// GPU work, where the fake CUDA runtime of fake_cupti.cc is loaded (the model programs): as
// NCCL 2.28, a collective on a one-rank communicator copies inside the call itself (nothing when
// in place), grouped or not; on more ranks one kernel per communicator is launched by the call,
// or at ncclGroupEnd for the calls of a group.
struct Launch {
  ncclComm* comm;
  uint32_t stream;
  std::string kernel;
};
std::vector<Launch> g_group_launches;
void group_api_begin(ncclComm* c) {
  auto* p = profiler();
  if (!p || !c->prof || g_group_api_comm || !(c->mask & np::kGroupApi)) return;
  np::EventDescr d{};
  d.type = np::kGroupApi;
  d.rank = c->rank;
  d.group_api.group_depth = g_group;
  g_group_api_comm = c;
  p->start_event(c->prof, &g_group_api, &d);
}
void group_api_end() {
  if (g_group_api_comm && g_group_api) profiler()->stop_event(g_group_api);
  g_group_api_comm = nullptr;
  g_group_api = nullptr;
}

// Runs a launch as NCCL does: inside a KernelLaunch event, on NCCL's own thread for a
// non-blocking communicator.
template <typename Work>
void launch_work(ncclComm* c, Work&& work) {
  auto run = [&] {
    auto* p = profiler();
    void* ev = nullptr;
    if (p && c->prof && g_group_api && (c->mask & np::kKernelLaunch)) {
      np::EventDescr d{};
      d.type = np::kKernelLaunch;
      d.parent = g_group_api;
      d.rank = c->rank;
      p->start_event(c->prof, &ev, &d);
    }
    work();
    if (ev) p->stop_event(ev);
  };
  if (c->nonblocking) {
    std::thread(run).join();
  } else {
    run();
  }
}

void gpu_work(ncclComm* c, const char* func, const void* send, const void* recv,
              cudaStream_t stream) {
  // FAKE_NCCL_CALL_MS: each call takes this long after its launch (a slow collective; a capture
  // window may close meanwhile).
  static const int call_ms = [] {
    const char* v = std::getenv("FAKE_NCCL_CALL_MS");
    return v ? std::atoi(v) : 0;
  }();
  struct Wait {
    ~Wait() {
      if (call_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(call_ms));
    }
  } wait;
  static auto launch =
      reinterpret_cast<void (*)(uint32_t, const char*)>(dlsym(RTLD_DEFAULT, "fakecuda_launch"));
  static auto copy =
      reinterpret_cast<void (*)(uint32_t, uint64_t)>(dlsym(RTLD_DEFAULT, "fakecuda_memcpy"));
  if (!launch || !copy || !c) return;
  auto s = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(stream));
  if (c->nranks == 1) {
    if (send && recv && send != recv) launch_work(c, [&] { copy(s, 256); });
    return;
  }
  std::string kernel = std::string("ncclDevKernel_") + (func + 4) + "_Sum_f32_RING_LL";
  if (g_group > 0) {
    for (auto& l : g_group_launches)
      if (l.comm == c) return;
    g_group_launches.push_back({c, s, kernel});
    return;
  }
  launch_work(c, [&] { launch(s, kernel.c_str()); });
}
void group_launches() {
  static auto launch =
      reinterpret_cast<void (*)(uint32_t, const char*)>(dlsym(RTLD_DEFAULT, "fakecuda_launch"));
  if (launch)
    for (auto& l : g_group_launches)
      launch_work(l.comm, [&] { launch(l.stream, l.kernel.c_str()); });
  g_group_launches.clear();
}

std::string dir() {
  const char* d = std::getenv("FAKE_NCCL_DIR");
  return d ? d : "/tmp";
}
}  // namespace

#define FAKE extern "C" __attribute__((visibility("default")))

FAKE int fake_nccl_calls() { return g_calls.load(); }

FAKE ncclResult_t ncclGetVersion(int* v) {
  *v = 22809;
  return ncclSuccess;
}
FAKE ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  ++g_calls;
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd < 0 || read(fd, id->internal, sizeof id->internal) != sizeof id->internal) return ncclSystemError;
  close(fd);
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  ++g_calls;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x%02x%02x%02x%02x", id.internal[0] & 255,
                id.internal[1] & 255, id.internal[2] & 255, id.internal[3] & 255,
                id.internal[4] & 255, id.internal[5] & 255, id.internal[6] & 255, id.internal[7] & 255);
  *comm = new ncclComm{rank, nranks, hex};
  profile_init(*comm);
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                         ncclConfig_t* config) {
  ncclResult_t r = ncclCommInitRank(comm, nranks, id, rank);
  if (r != ncclSuccess || !config || config->blocking != 0) return r;
  (*comm)->nonblocking = true;
  (*comm)->ready = false;
  return ncclInProgress;
}
FAKE ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  comm->ready = true;
  *state = ncclSuccess;
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm->ready) return ncclInProgress;
  *rank = comm->rank;
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm->ready) return ncclInProgress;
  *count = comm->nranks;
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ++g_calls;
  if (comm->prof && profiler()) profiler()->finalize(comm->prof);
  delete comm;
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

// Every member writes "color key rank" to a file of this split; all wait for all and compute
// the same membership.
FAKE ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                ncclConfig_t* config) {
  ++g_calls;
  std::string base = dir() + "/split-" + comm->id + "-" + std::to_string(comm->splits++);
  {
    std::string tmp = base + "." + std::to_string(comm->rank) + ".tmp";
    std::ofstream(tmp) << color << " " << key << " " << comm->rank << "\n";
    std::rename(tmp.c_str(), (base + "." + std::to_string(comm->rank)).c_str());
  }
  struct M {
    int color, key, rank;
  };
  std::vector<M> members;
  for (int r = 0; r < comm->nranks; ++r) {
    std::string f = base + "." + std::to_string(r);
    for (int tries = 0; access(f.c_str(), R_OK) != 0; ++tries) {
      if (tries > 3000) return ncclSystemError;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    M m;
    std::ifstream(f) >> m.color >> m.key >> m.rank;
    members.push_back(m);
  }
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  std::vector<M> same;
  for (auto& m : members)
    if (m.color == color) same.push_back(m);
  std::sort(same.begin(), same.end(), [](auto& a, auto& b) {
    return a.key != b.key ? a.key < b.key : a.rank < b.rank;
  });
  int rank = 0;
  for (size_t i = 0; i < same.size(); ++i)
    if (same[i].rank == comm->rank) rank = static_cast<int>(i);
  *newcomm = new ncclComm{rank, static_cast<int>(same.size()),
                          comm->id + "." + std::to_string(comm->splits) + "." + std::to_string(color)};
  profile_init(*newcomm);
  if (config && config->blocking == 0) {
    (*newcomm)->nonblocking = true;
    (*newcomm)->ready = false;
    return ncclInProgress;
  }
  return ncclSuccess;
}

FAKE ncclResult_t ncclGroupStart() {
  ++g_calls;
  ++g_group;
  return ncclSuccess;
}
FAKE ncclResult_t ncclGroupEnd() {
  ++g_calls;
  if (--g_group < 0) return ncclInvalidUsage;
  if (g_group == 0) {  // the group launches: its point-to-point ops are reported now
    for (auto& d : g_deferred) profile_op(d.comm, d.api, true, d.func, d.count, d.peer);
    g_deferred.clear();
    group_launches();
    group_api_end();
  }
  return ncclSuccess;
}

// Ends the group without launching it, as NCCL >= 2.22 does: its operations are dropped and an
// estimated time is returned.
FAKE ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  ++g_calls;
  if (--g_group < 0) return ncclInvalidUsage;
  if (g_group == 0) {
    g_deferred.clear();
    g_group_launches.clear();
    group_api_end();
  }
  if (info) info->estimatedTime = 1.0f;
  return ncclSuccess;
}

#define FAKE_COLL(name, params, comm, p2p, count, peer, send, recv, stream) \
  FAKE ncclResult_t name params {                                           \
    ++g_calls;                                                              \
    group_api_begin(comm);                                                  \
    profile_call(comm, p2p, #name, count, peer, stream);                    \
    gpu_work(comm, #name, send, recv, stream);                              \
    if (g_group == 0) group_api_end();                                      \
    return ncclSuccess;                                                     \
  }
FAKE_COLL(ncclAllReduce,
          (const void* s, void* r, size_t n, ncclDataType_t, ncclRedOp_t, ncclComm_t c,
           cudaStream_t st),
          c, false, n, -1, s, r, st)
FAKE_COLL(ncclReduce,
          (const void* s, void* r, size_t n, ncclDataType_t, ncclRedOp_t, int, ncclComm_t c,
           cudaStream_t st),
          c, false, n, -1, s, r, st)
FAKE_COLL(ncclBroadcast,
          (const void* s, void* r, size_t n, ncclDataType_t, int, ncclComm_t c, cudaStream_t st), c,
          false, n, -1, s, r, st)
FAKE_COLL(ncclReduceScatter,
          (const void* s, void* r, size_t n, ncclDataType_t, ncclRedOp_t, ncclComm_t c,
           cudaStream_t st),
          c, false, n, -1, s, r, st)
FAKE_COLL(ncclAllGather,
          (const void* s, void* r, size_t n, ncclDataType_t, ncclComm_t c, cudaStream_t st), c,
          false, n, -1, s, r, st)
FAKE_COLL(ncclAlltoAll,
          (const void* s, void* r, size_t n, ncclDataType_t, ncclComm_t c, cudaStream_t st), c,
          false, n, -1, s, r, st)
FAKE_COLL(ncclGather,
          (const void* s, void* r, size_t n, ncclDataType_t, int, ncclComm_t c, cudaStream_t st), c,
          false, n, -1, s, r, st)
FAKE_COLL(ncclScatter,
          (const void* s, void* r, size_t n, ncclDataType_t, int, ncclComm_t c, cudaStream_t st), c,
          false, n, -1, s, r, st)
FAKE_COLL(ncclSend,
          (const void* s, size_t n, ncclDataType_t, int peer, ncclComm_t c, cudaStream_t st), c,
          true, n, peer, s, nullptr, st)
FAKE_COLL(ncclRecv, (void* r, size_t n, ncclDataType_t, int peer, ncclComm_t c, cudaStream_t st), c,
          true, n, peer, nullptr, r, st)

// As in NCCL: the legacy in-place broadcast calls the public ncclBroadcast.
FAKE ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  ++g_calls;
  return ncclBroadcast(buff, buff, count, dt, root, comm, stream);
}

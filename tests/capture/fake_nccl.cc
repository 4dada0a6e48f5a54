// A fake NCCL for the interposer tests: exports the nccl.h calls the interposer wraps, with
// enough real behaviour for bookkeeping to be checked (unique ids, communicator ranks and sizes,
// ncclCommSplit agreeing across processes through files, ncclBcast calling ncclBroadcast
// through its public symbol as real NCCL does) and a count of every call it received.
#include <fcntl.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

struct ncclComm {
  int rank, nranks;
  std::string id;
  int splits = 0;
};

namespace {
std::atomic<int> g_calls{0};
int g_group = 0;
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
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                         ncclConfig_t*) {
  return ncclCommInitRank(comm, nranks, id, rank);
}
FAKE ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = comm->rank;
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = comm->nranks;
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ++g_calls;
  delete comm;
  return ncclSuccess;
}
FAKE ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

// Every member writes "color key rank" to a file of this split; all wait for all and compute
// the same membership.
FAKE ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                ncclConfig_t*) {
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
  return ncclSuccess;
}

FAKE ncclResult_t ncclGroupStart() {
  ++g_calls;
  ++g_group;
  return ncclSuccess;
}
FAKE ncclResult_t ncclGroupEnd() {
  ++g_calls;
  return --g_group >= 0 ? ncclSuccess : ncclInvalidUsage;
}

#define FAKE_COLL(name, params)  \
  FAKE ncclResult_t name params { \
    ++g_calls;                    \
    return ncclSuccess;           \
  }
FAKE_COLL(ncclAllReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclBroadcast, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclReduceScatter, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclAllGather, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclAlltoAll, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclGather, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclScatter, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclSend, (const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))
FAKE_COLL(ncclRecv, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

// As in NCCL: the legacy in-place broadcast calls the public ncclBroadcast.
FAKE ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  ++g_calls;
  return ncclBroadcast(buff, buff, count, dt, root, comm, stream);
}

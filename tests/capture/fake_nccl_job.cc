// One rank of a simulated NCCL job, run against the fake NCCL with libbraid_capture.so first in
// the link order (as LD_PRELOAD puts it). Usage: fake_nccl_job RANK NRANKS DIR [ITERS:SLEEP_MS].
// Prints the number of calls the fake NCCL received.
//
// With ITERS:SLEEP_MS (a long-running job for the attach-mode tests): after the world
// communicator is made, ITERS all-reduces on it, SLEEP_MS apart, each printed as
// "call <seq> <host ns before> <host ns after>" (CLOCK_REALTIME, the agent's clock) so a test
// knows which calls fell inside a capture window. FAKE_JOB_FORK_MS=N: at the end, fork a child
// that lives N ms more (a data-loader worker outliving its parent). FAKE_JOB_INIT_DELAY_MS=N:
// wait N ms between the unique id and the communicator.
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

extern "C" int fake_nccl_calls();

#define CHECK(x)                                                 \
  do {                                                           \
    ncclResult_t r_ = (x);                                       \
    if (r_ != ncclSuccess) {                                     \
      std::fprintf(stderr, "%s failed: %d\n", #x, static_cast<int>(r_)); \
      return 1;                                                  \
    }                                                            \
  } while (0)

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) return 2;
  int iters = 0, sleep_ms = 0;
  if (argc == 5 && std::sscanf(argv[4], "%d:%d", &iters, &sleep_ms) != 2) return 2;
  int rank = std::atoi(argv[1]), n = std::atoi(argv[2]);
  std::string dir = argv[3];
  ncclUniqueId id;
  std::string uid = dir + "/uid";
  if (rank == 0) {
    CHECK(ncclGetUniqueId(&id));
    std::ofstream(uid + ".tmp", std::ios::binary).write(id.internal, sizeof id.internal);
    std::rename((uid + ".tmp").c_str(), uid.c_str());
  } else {
    for (int i = 0; access(uid.c_str(), R_OK) != 0; ++i) {
      if (i > 3000) return 3;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::ifstream(uid, std::ios::binary).read(id.internal, sizeof id.internal);
  }
  float buf[4096];
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x1234);
  // FAKE_JOB_INIT_DELAY_MS: a process that started the agent (an empty group here; a real job's
  // first CUDA call) but makes its communicator, where a rank from no launcher variable comes
  // from, only later.
  if (const char* ms = std::getenv("FAKE_JOB_INIT_DELAY_MS")) {
    CHECK(ncclGroupStart());
    CHECK(ncclGroupEnd());
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
  }
  ncclComm_t world;
  CHECK(ncclCommInitRank(&world, n, id, rank));
  if (iters > 0) {
    for (int i = 0; i < iters; ++i) {
      int64_t before = now_ns();
      CHECK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, world, stream));
      int64_t after = now_ns();
      std::printf("call %d %lld %lld\n", i, static_cast<long long>(before),
                  static_cast<long long>(after));
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    CHECK(ncclCommDestroy(world));
    std::printf("calls=%d\n", fake_nccl_calls());
    std::fflush(stdout);
    // FAKE_JOB_FORK_MS: leave behind a forked child (a data-loader worker) that outlives us.
    if (const char* ms = std::getenv("FAKE_JOB_FORK_MS"); ms && fork() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
      _exit(0);
    }
    return 0;
  }
  for (int i = 0; i < 3; ++i) CHECK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, world, stream));
  CHECK(ncclGroupStart());
  CHECK(ncclSend(buf, 256, ncclInt32, (rank + 1) % n, world, stream));
  CHECK(ncclRecv(buf, 256, ncclInt32, (rank + n - 1) % n, world, stream));
  CHECK(ncclGroupEnd());
  CHECK(ncclAllGather(buf, buf, 128, ncclBfloat16, world, stream));
  CHECK(ncclReduceScatter(buf, buf, 64, ncclFloat16, ncclMax, world, stream));
  CHECK(ncclBroadcast(buf, buf, 32, ncclInt64, 0, world, stream));
  CHECK(ncclBcast(buf, 16, ncclUint8, 1, world, stream));  // calls ncclBroadcast inside
  CHECK(ncclReduce(buf, buf, 8, ncclFloat64, ncclMin, 0, world, stream));
  CHECK(ncclAlltoAll(buf, buf, 4, ncclInt8, world, stream));
  CHECK(ncclGather(buf, buf, 2, ncclFloat32, 0, world, stream));
  CHECK(ncclScatter(buf, buf, 2, ncclFloat32, 1, world, stream));
  ncclComm_t half;
  CHECK(ncclCommSplit(world, rank % 2, rank, &half, nullptr));
  for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(buf, buf, 512, ncclFloat32, ncclAvg, half, stream));
  ncclComm_t evens = nullptr;
  CHECK(ncclCommSplit(world, rank % 2 ? NCCL_SPLIT_NOCOLOR : 0, rank, &evens, nullptr));
  if (evens) CHECK(ncclAllReduce(buf, buf, 7, ncclFloat32, ncclSum, evens, stream));
  if (evens) CHECK(ncclCommDestroy(evens));
  CHECK(ncclCommDestroy(half));
  CHECK(ncclCommDestroy(world));
  std::printf("calls=%d\n", fake_nccl_calls());
  return 0;
}

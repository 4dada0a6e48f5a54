// NVTX range events as the agent's own NVTX handlers record them (agent/nvtx_hooks.cc): per-thread
// logs the application's threads append to without a lock or a system call, and the agent's
// writer thread reads. Each thread writes into a chunk of its own (64 KiB); a full chunk is
// chained to the next (once per 64 KiB of events): one the reader has read and handed back to the
// thread (up to 64 wait per thread, so their pages stay mapped), else one of a reserve the reader
// keeps allocated and touched (kReserveChunks, shared by the threads: a burst longer than the
// reader's period pays no page faults), else a fresh one from the heap. A record is committed by
// one release store, so the reader sees whole records only. CUDA-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace braid::capture {

struct NvtxEvent {
  enum Kind : uint8_t { Push, Pop, Start, End, Mark };
  Kind kind = Push;
  int64_t ts = 0;                 // host ns (CLOCK_REALTIME)
  uint64_t id = 0;                // Start/End: NVTX's range id
  int64_t tid = 0;                // the system thread id (gettid)
  std::string_view name, domain;  // Push, Start, Mark; valid during the reader's callback only
};

class NvtxLog {
 public:
  // Application threads. Never blocks; an event beyond the thread's cap of unread chunks (a
  // writer that stopped reading) is dropped and counted.
  static void add(NvtxEvent::Kind kind, int64_t ts, uint64_t id, std::string_view name,
                  std::string_view domain);

  // The writer thread. freeze() marks how far every thread has written; read() hands over, thread
  // by thread and in order, the events up to the last freeze() and frees what it has read. (The
  // agent freezes before it takes its queue and reads after it: an event is never handed over
  // before a window edge that was posted before it.)
  static void freeze();
  static void read(const std::function<void(const NvtxEvent&)>& fn);
  // Events dropped so far (a thread over its cap).
  static int64_t dropped();
  // Keeps a reserve of chunks from here on (allocated and touched now, refilled at each
  // freeze()): the agent asks for it when it records NVTX, before the job's first range.
  static void reserve();
  // Chunks an application thread had to take from the heap (its read chunks not back, the
  // reserve empty).
  static int64_t heap_chunks();

  static constexpr size_t kChunkBytes = 64 << 10;
  static constexpr size_t kMaxChunksPerThread = 1024;  // 64 MiB unread per thread
  static constexpr size_t kMaxText = 4096;             // longer names are cut
  static constexpr size_t kReserveChunks = 64;         // 4 MiB (reserve())
};

}  // namespace braid::capture

#include "capture/nvtx_log.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <new>

namespace braid::capture {
namespace {

struct Chunk {
  std::atomic<uint32_t> committed{0};  // written by its thread (release), read by the reader
  uint32_t consumed = 0;               // reader only
  std::atomic<Chunk*> next{nullptr};   // set by its thread once it stopped writing here
  Chunk* next_free = nullptr;          // in its thread's list of read chunks
  alignas(8) char data[NvtxLog::kChunkBytes];
};

struct ThreadLog {
  int64_t tid = 0;
  Chunk* head = nullptr;              // reader: the oldest chunk not freed
  std::atomic<Chunk*> tail{nullptr};  // the thread's current chunk
  std::atomic<size_t> chunks{0};      // unread chunks (thread adds, reader subtracts)
  std::atomic<bool> ended{false};     // the thread exited
  bool finished = false;              // reader: ended and everything read and freed
  Chunk* frozen = nullptr;            // reader: where freeze() found the thread
  uint32_t frozen_at = 0;
  // Chunks read, handed back for the thread to write again (their pages stay mapped: a fresh
  // chunk from the heap costs a page fault per 4 KiB). The reader pushes; the thread takes the
  // whole list at once into `spare`, its own. At most kMaxFreeChunks wait here.
  std::atomic<Chunk*> freed{nullptr};
  std::atomic<size_t> n_freed{0};
  Chunk* spare = nullptr;     // the thread's
  ThreadLog* next = nullptr;  // in the list of every thread's log (never unlinked)
};
constexpr size_t kMaxFreeChunks = 64;  // 4 MiB a thread

struct Record {  // then `name` bytes, then `domain` bytes, padded to 8
  uint8_t kind;
  uint8_t pad;
  uint16_t name_len;
  uint16_t domain_len;
  uint16_t pad2;
  int64_t ts;
  uint64_t id;
};
static_assert(sizeof(Record) == 24);

std::atomic<ThreadLog*> g_threads{nullptr};
std::atomic<int64_t> g_dropped{0};
std::atomic<int64_t> g_heap_chunks{0};  // taken from the heap on an application thread

// Chunks the reader allocated and touched, for a thread whose own read chunks are not back yet
// (a burst longer than the reader's period: the reader drains every 500 ms by default). Each
// page of a fresh heap chunk costs the writing thread a page fault (expensive in a virtual
// machine); a reserve chunk's pages are mapped already. Taken under the lock, once per chunk.
std::mutex g_reserve_mu;
Chunk* g_reserve = nullptr;  // linked through next_free
size_t g_reserve_size = 0;
std::atomic<bool> g_reserve_wanted{false};
// A plain pointer: an NVTX call made during exit, after thread_local destructors ran, still finds
// its log. Marked ended through a pthread key at thread exit.
thread_local ThreadLog* t_log = nullptr;
pthread_key_t g_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

// Default-initialized: the 64 KiB of data are not zeroed (only the header is set).
Chunk* new_chunk() { return new (std::nothrow) Chunk; }

// An application thread's next chunk when none of its own is back: from the reserve, else the
// heap.
Chunk* take_chunk() {
  {
    std::lock_guard lk(g_reserve_mu);
    if (Chunk* c = g_reserve) {
      g_reserve = c->next_free;
      --g_reserve_size;
      c->next_free = nullptr;
      return c;
    }
  }
  g_heap_chunks.fetch_add(1, std::memory_order_relaxed);
  return new_chunk();
}

// The reserve back to its size (once reserve() asked for one).
void refill_reserve() {
  if (!g_reserve_wanted.load(std::memory_order_relaxed)) return;
  for (;;) {
    {
      std::lock_guard lk(g_reserve_mu);
      if (g_reserve_size >= NvtxLog::kReserveChunks) return;
    }
    Chunk* c = new_chunk();
    if (!c) return;
    std::memset(c->data, 0, sizeof c->data);  // its pages mapped here, not on the writing thread
    std::lock_guard lk(g_reserve_mu);
    c->next_free = g_reserve;
    g_reserve = c;
    ++g_reserve_size;
  }
}

// The thread: a chunk to write next, a read one when there is one (no lock: one exchange, once per
// list the reader handed back).
Chunk* next_chunk(ThreadLog* t) {
  if (!t->spare) {
    t->spare = t->freed.exchange(nullptr, std::memory_order_acquire);
    for (Chunk* c = t->spare; c; c = c->next_free)
      t->n_freed.fetch_sub(1, std::memory_order_relaxed);
  }
  Chunk* c = t->spare;
  if (!c) return take_chunk();
  t->spare = c->next_free;
  c->committed.store(0, std::memory_order_relaxed);
  c->consumed = 0;
  c->next.store(nullptr, std::memory_order_relaxed);
  c->next_free = nullptr;
  return c;  // published to the reader by the release store of the chunk before it
}

// The reader: a chunk it has read goes back to its thread, or to the heap past the cap.
void recycle(ThreadLog* t, Chunk* c) {
  if (t->n_freed.load(std::memory_order_relaxed) >= kMaxFreeChunks) {
    delete c;
    return;
  }
  t->n_freed.fetch_add(1, std::memory_order_relaxed);
  Chunk* head = t->freed.load(std::memory_order_relaxed);
  do {
    c->next_free = head;
  } while (!t->freed.compare_exchange_weak(head, c, std::memory_order_release,
                                           std::memory_order_relaxed));
}

// The reader, once an ended thread's log is read: its chunks go back to the heap.
void free_all(ThreadLog* t) {
  for (Chunk* c = t->freed.exchange(nullptr, std::memory_order_acquire); c;) {
    Chunk* n = c->next_free;
    delete c;
    c = n;
  }
  for (Chunk* c = t->spare; c;) {
    Chunk* n = c->next_free;
    delete c;
    c = n;
  }
  t->spare = nullptr;
}

ThreadLog* this_thread_log() {
  if (t_log) return t_log;
  pthread_once(&g_key_once, [] {
    pthread_key_create(&g_key, [](void* p) {
      t_log = nullptr;  // a later call (another key's destructor) starts a new log
      static_cast<ThreadLog*>(p)->ended.store(true, std::memory_order_release);
    });
  });
  auto* t = new ThreadLog();
  t->tid = static_cast<int64_t>(syscall(SYS_gettid));
  Chunk* c = take_chunk();
  t->head = c;
  t->tail.store(c, std::memory_order_relaxed);
  t->chunks.store(c ? 1 : 0, std::memory_order_relaxed);
  ThreadLog* h = g_threads.load(std::memory_order_relaxed);
  do {
    t->next = h;
  } while (
      !g_threads.compare_exchange_weak(h, t, std::memory_order_release, std::memory_order_relaxed));
  pthread_setspecific(g_key, t);
  t_log = t;
  return t;
}

size_t padded(size_t n) { return (n + 7) & ~size_t{7}; }

}  // namespace

void NvtxLog::add(NvtxEvent::Kind kind, int64_t ts, uint64_t id, std::string_view name,
                  std::string_view domain) {
  ThreadLog* t = this_thread_log();
  Chunk* c = t->tail.load(std::memory_order_relaxed);
  if (!c) {  // no memory at the thread's start
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  name = name.substr(0, kMaxText);
  domain = domain.substr(0, kMaxText);
  const size_t need = padded(sizeof(Record) + name.size() + domain.size());
  uint32_t at = c->committed.load(std::memory_order_relaxed);  // only this thread writes it
  if (at + need > kChunkBytes) {
    Chunk* fresh =
        t->chunks.load(std::memory_order_relaxed) < kMaxChunksPerThread ? next_chunk(t) : nullptr;
    if (!fresh) {
      g_dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    t->chunks.fetch_add(1, std::memory_order_relaxed);
    c->next.store(fresh, std::memory_order_release);  // c is final from here
    t->tail.store(fresh, std::memory_order_release);
    c = fresh;
    at = 0;
  }
  Record r{static_cast<uint8_t>(kind),
           0,
           static_cast<uint16_t>(name.size()),
           static_cast<uint16_t>(domain.size()),
           0,
           ts,
           id};
  char* p = c->data + at;
  std::memcpy(p, &r, sizeof r);
  if (!name.empty()) std::memcpy(p + sizeof r, name.data(), name.size());
  if (!domain.empty()) std::memcpy(p + sizeof r + name.size(), domain.data(), domain.size());
  c->committed.store(static_cast<uint32_t>(at + need), std::memory_order_release);
}

void NvtxLog::freeze() {
  refill_reserve();
  for (ThreadLog* t = g_threads.load(std::memory_order_acquire); t; t = t->next) {
    if (t->finished) continue;
    t->frozen = t->tail.load(std::memory_order_acquire);
    t->frozen_at = t->frozen ? t->frozen->committed.load(std::memory_order_acquire) : 0;
  }
}

void NvtxLog::read(const std::function<void(const NvtxEvent&)>& fn) {
  for (ThreadLog* t = g_threads.load(std::memory_order_acquire); t; t = t->next) {
    if (t->finished || !t->frozen) continue;
    // An ended thread writes no more: once everything it wrote is read, its last chunk goes.
    const bool ended = t->ended.load(std::memory_order_acquire);
    for (Chunk* c = t->head; c;) {
      const bool last = c == t->frozen;
      const uint32_t end = last ? t->frozen_at : c->committed.load(std::memory_order_acquire);
      while (c->consumed < end) {
        Record r;
        std::memcpy(&r, c->data + c->consumed, sizeof r);
        const char* text = c->data + c->consumed + sizeof r;
        NvtxEvent e;
        e.kind = static_cast<NvtxEvent::Kind>(r.kind);
        e.ts = r.ts;
        e.id = r.id;
        e.tid = t->tid;
        e.name = std::string_view(text, r.name_len);
        e.domain = std::string_view(text + r.name_len, r.domain_len);
        fn(e);
        c->consumed += static_cast<uint32_t>(padded(sizeof r + r.name_len + r.domain_len));
      }
      if (last) {
        if (ended && c->committed.load(std::memory_order_acquire) == c->consumed &&
            !c->next.load(std::memory_order_acquire)) {
          delete c;
          t->head = nullptr;
          t->finished = true;
          free_all(t);  // the thread is gone: nobody takes its spare chunks
        }
        break;
      }
      Chunk* next = c->next.load(std::memory_order_acquire);
      recycle(t, c);
      t->chunks.fetch_sub(1, std::memory_order_relaxed);
      t->head = c = next;
    }
    t->frozen = nullptr;
  }
}

int64_t NvtxLog::dropped() { return g_dropped.load(std::memory_order_relaxed); }

int64_t NvtxLog::heap_chunks() { return g_heap_chunks.load(std::memory_order_relaxed); }

void NvtxLog::reserve() {
  g_reserve_wanted.store(true, std::memory_order_relaxed);
  refill_reserve();
}

}  // namespace braid::capture

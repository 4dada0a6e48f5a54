// Activity buffers for CUPTI: preallocated, reused, capped. acquire() never blocks on I/O and
// never allocates under the lock; at the cap it refuses (CUPTI then drops records and counts
// them, and the refusal is counted here).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace braid::capture {

class BufferPool {
 public:
  // `buffer_bytes` per buffer (1-10 MB is what CUPTI works well with), `prealloc` buffers made
  // up front, never more than `max_buffers` in all.
  BufferPool(size_t buffer_bytes, size_t prealloc, size_t max_buffers);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A free buffer (8-byte aligned, buffer_bytes long), or nullptr at the cap.
  uint8_t* acquire();
  void release(uint8_t* buf);

  size_t buffer_bytes() const { return bytes_; }
  size_t allocated() const;
  size_t in_use() const;
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  size_t bytes_, max_;
  mutable std::mutex mu_;
  std::vector<uint8_t*> free_;
  std::vector<uint8_t*> all_;
  size_t reserved_ = 0;  // allocated + being allocated
  std::atomic<int64_t> refused_{0};
};

}  // namespace braid::capture

#include "capture/buffer_pool.h"

#include <cstdlib>

#include "trace/error.h"

namespace braid::capture {
namespace {
uint8_t* allocate(size_t bytes) {
  // CUPTI requires 8-byte aligned buffers; page alignment also keeps them off shared lines.
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  return static_cast<uint8_t*>(p);
}
}  // namespace

BufferPool::BufferPool(size_t buffer_bytes, size_t prealloc, size_t max_buffers)
    : bytes_(buffer_bytes), max_(max_buffers) {
  if (bytes_ < 1024 || max_ == 0)
    throw Error(ErrorCode::Usage, "activity buffers: size and count must be positive");
  if (prealloc > max_) prealloc = max_;
  for (size_t i = 0; i < prealloc; ++i) {
    uint8_t* b = allocate(bytes_);
    if (!b) break;
    all_.push_back(b);
    free_.push_back(b);
  }
  reserved_ = all_.size();
}

BufferPool::~BufferPool() {
  for (uint8_t* b : all_) std::free(b);
}

uint8_t* BufferPool::acquire() {
  {
    std::lock_guard lk(mu_);
    if (!free_.empty()) {
      uint8_t* b = free_.back();
      free_.pop_back();
      return b;
    }
    if (reserved_ >= max_) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    ++reserved_;
  }
  uint8_t* b = allocate(bytes_);  // outside the lock
  std::lock_guard lk(mu_);
  if (!b) {
    --reserved_;
    refused_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  all_.push_back(b);
  return b;
}

void BufferPool::release(uint8_t* buf) {
  if (!buf) return;
  std::lock_guard lk(mu_);
  free_.push_back(buf);
}

size_t BufferPool::allocated() const {
  std::lock_guard lk(mu_);
  return all_.size();
}

size_t BufferPool::in_use() const {
  std::lock_guard lk(mu_);
  return all_.size() - free_.size();
}

}  // namespace braid::capture

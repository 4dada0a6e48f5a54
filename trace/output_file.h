// Writing output files the way every braid command must: through a private temporary file
// beside the target that is renamed over it only when complete (removed on failure), and a
// buffered writer with exact number formatting and JSON string escaping (json::escape),
// allocation-free.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "trace/error.h"
#include "trace/json.h"
#include "trace/temp_cleanup.h"

namespace braid {

// The output file: created beside the target under a private name, renamed at the end, removed
// on any failure.
class AtomicOutputFile {
 public:
  explicit AtomicOutputFile(const std::string& target) : target_(target) {
    std::filesystem::path t(target);
    if (!t.has_filename())
      throw Error(ErrorCode::Usage, target + ": output path names a directory, not a file");
    std::filesystem::path dir = t.has_parent_path() ? t.parent_path() : std::filesystem::path(".");
    std::string base = "." + t.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-";
    for (int i = 0; i < 1000 && fd_ < 0; ++i) {
      path_ = (dir / (base + std::to_string(i))).string();
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST)
        throw Error(ErrorCode::Io, target + ": cannot create a temporary file in " + dir.string() +
                                       ": " + std::strerror(errno));
    }
    if (fd_ < 0) throw Error(ErrorCode::Io, target + ": cannot create a temporary file");
    register_temp_for_cleanup(path_);
  }
  ~AtomicOutputFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
    unregister_temp_for_cleanup();
  }
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  void commit() {
    if (::fsync(fd_) != 0)
      throw Error(ErrorCode::Io, target_ + ": fsync failed: " + std::strerror(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw Error(ErrorCode::Io, target_ + ": close failed: " + std::strerror(errno));
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      throw Error(ErrorCode::Io,
                  target_ + ": cannot rename " + path_ + " over it: " + std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string target_, path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Buffered writer on a file descriptor. No per-event allocation: strings are escaped straight
// into the buffer and numbers go through std::to_chars.
class BufferedOut {
 public:
  BufferedOut(int fd, std::string path) : fd_(fd), path_(std::move(path)), buf_(new char[kCap]) {}

  void put(char c) {
    if (n_ == kCap) flush();
    buf_[n_++] = c;
  }
  void put(std::string_view s) {
    if (s.size() > kCap - n_) {
      flush();
      if (s.size() > kCap) {
        write_all(s.data(), s.size());
        return;
      }
    }
    std::memcpy(buf_.get() + n_, s.data(), s.size());
    n_ += s.size();
  }
  void num(int64_t v) {
    reserve(24);
    n_ = static_cast<size_t>(std::to_chars(buf_.get() + n_, buf_.get() + kCap, v).ptr - buf_.get());
  }
  // Nanoseconds as exact microseconds with three decimals: 1234567 -> 1234.567, -5 -> -0.005.
  void us(int64_t ns) {
    reserve(32);
    char* p = buf_.get() + n_;
    uint64_t a = static_cast<uint64_t>(ns);
    if (ns < 0) {
      *p++ = '-';
      a = 0 - a;  // also right for INT64_MIN
    }
    p = std::to_chars(p, buf_.get() + kCap, a / 1000).ptr;
    uint64_t frac = a % 1000;
    p[0] = '.';
    p[1] = static_cast<char>('0' + frac / 100);
    p[2] = static_cast<char>('0' + frac / 10 % 10);
    p[3] = static_cast<char>('0' + frac % 10);
    n_ = static_cast<size_t>(p + 4 - buf_.get());
  }
  // A JSON string literal, escaped as json::escape does (the one escaper).
  void str(std::string_view s) {
    put('"');
    json::escape(s, [this](std::string_view piece) { put(piece); });
    put('"');
  }
  // Fixed-point v / 10^digits with exactly `digits` decimals (v >= 0).
  void fixed(int64_t v, int digits) {
    reserve(32);
    int64_t div = 1;
    for (int i = 0; i < digits; ++i) div *= 10;
    char* p = std::to_chars(buf_.get() + n_, buf_.get() + kCap, v / div).ptr;
    *p++ = '.';
    int64_t frac = v % div;
    for (int i = digits - 1; i >= 0; --i) {
      p[i] = static_cast<char>('0' + frac % 10);
      frac /= 10;
    }
    n_ = static_cast<size_t>(p + digits - buf_.get());
  }
  void flush() {
    write_all(buf_.get(), n_);
    written_ += n_;
    n_ = 0;
  }
  uint64_t bytes() const { return written_ + n_; }

 private:
  static constexpr size_t kCap = 1 << 20;

  void reserve(size_t k) {
    if (kCap - n_ < k) flush();
  }
  void write_all(const char* p, size_t len) {
    while (len > 0) {
      ssize_t w = ::write(fd_, p, len);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error(ErrorCode::Io, path_ + ": write failed: " + std::strerror(errno));
      }
      p += w;
      len -= static_cast<size_t>(w);
    }
  }

  int fd_;
  std::string path_;
  std::unique_ptr<char[]> buf_;
  size_t n_ = 0;
  uint64_t written_ = 0;
};

}  // namespace braid

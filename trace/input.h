// Reading trace files, plain or gzip-compressed, in chunks, with errors that name the file.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace braid {

class InputFile {
 public:
  explicit InputFile(const std::string& path);  // throws NotFound
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Reads up to n uncompressed bytes; returns 0 at the end. A truncated or corrupt gzip stream
  // throws BadFormat.
  size_t read(char* buf, size_t n);
  bool gzip() const { return gzip_; }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }  // bytes on disk
  uint64_t consumed() const;                    // bytes of the file consumed so far

 private:
  bool refill();

  std::string path_;
  FILE* f_ = nullptr;
  bool gzip_ = false;
  uint64_t size_ = 0;
  z_stream z_{};
  bool z_init_ = false, z_end_ = false, eof_ = false;
  std::string in_;
  uint64_t raw_read_ = 0;
};

// Whole file (decompressed) into memory, refusing files larger than `limit` bytes.
std::string read_whole_file(const std::string& path, uint64_t limit = uint64_t(4) << 30);

// True when the first bytes are the gzip magic.
bool is_gzip_file(const std::string& path);

}  // namespace braid

// Reading trace files, plain or gzip-compressed, in chunks, with errors that name the file.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

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

// The first `n` bytes of a file (decompressed): what format detection looks at. A damaged gzip
// stream that still gave bytes gives those; one that gives none throws its error (BadFormat).
std::string read_head(const std::string& path, size_t n);

// A head that opens a JSON document: '{' or '[' then, after blanks, what a JSON value holds
// next. The second test keeps a Chakra ET whose first length prefix is 0x7b ('{', a 123-byte
// GlobalMetadata) or 0x5b ('[') from passing for JSON: a field tag follows there, never a quote.
bool looks_like_json(std::string_view head);

// Whole file (decompressed) into memory, refusing files larger than `limit` bytes.
std::string read_whole_file(const std::string& path, uint64_t limit = uint64_t(4) << 30);

// True when the first bytes are the gzip magic.
bool is_gzip_file(const std::string& path);

}  // namespace braid

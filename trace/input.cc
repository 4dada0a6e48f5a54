#include "trace/input.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "trace/error.h"

namespace braid {

namespace {
constexpr size_t kRawChunk = 1 << 20;
}

InputFile::InputFile(const std::string& path) : path_(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(ErrorCode::NotFound, path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(ErrorCode::BadFormat, path + ": is a directory");
  size_ = static_cast<uint64_t>(st.st_size);
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) throw Error(ErrorCode::NotFound, path + ": " + std::strerror(errno));
  unsigned char magic[2] = {0, 0};
  size_t got = std::fread(magic, 1, 2, f_);
  gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  std::rewind(f_);
  if (gzip_) {
    // 15 + 32: zlib or gzip header, detected automatically.
    if (inflateInit2(&z_, 15 + 32) != Z_OK)
      throw Error(ErrorCode::Internal, path + ": inflateInit failed");
    z_init_ = true;
  }
}

InputFile::~InputFile() {
  if (z_init_) inflateEnd(&z_);
  if (f_) std::fclose(f_);
}

uint64_t InputFile::consumed() const { return raw_read_; }

bool InputFile::refill() {
  in_.resize(kRawChunk);
  size_t got = std::fread(in_.data(), 1, in_.size(), f_);
  if (got == 0) {
    if (std::ferror(f_)) throw Error(ErrorCode::Io, path_ + ": read error");
    eof_ = true;
    return false;
  }
  raw_read_ += got;
  z_.next_in = reinterpret_cast<Bytef*>(in_.data());
  z_.avail_in = static_cast<uInt>(got);
  return true;
}

size_t InputFile::read(char* buf, size_t n) {
  if (!gzip_) {
    size_t got = std::fread(buf, 1, n, f_);
    if (got == 0 && std::ferror(f_)) throw Error(ErrorCode::Io, path_ + ": read error");
    raw_read_ += got;
    return got;
  }
  size_t produced = 0;
  while (produced < n) {
    if (z_end_) {
      // Concatenated gzip members are legal; continue if more input follows.
      if (z_.avail_in == 0 && !refill()) break;
      if (inflateReset(&z_) != Z_OK) throw Error(ErrorCode::BadFormat, path_ + ": corrupt gzip");
      z_end_ = false;
    }
    if (z_.avail_in == 0 && !refill()) {
      throw Error(ErrorCode::BadFormat, path_ + ": truncated gzip stream (ends after " +
                                            std::to_string(raw_read_) + " compressed bytes)");
    }
    z_.next_out = reinterpret_cast<Bytef*>(buf + produced);
    z_.avail_out = static_cast<uInt>(n - produced);
    int rc = inflate(&z_, Z_NO_FLUSH);
    produced = n - z_.avail_out;
    if (rc == Z_STREAM_END) {
      z_end_ = true;
      if (z_.avail_in == 0) {
        // Peek: is there another member?
        int c = std::fgetc(f_);
        if (c == EOF) break;
        std::ungetc(c, f_);
      }
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throw Error(ErrorCode::BadFormat, path_ + ": corrupt gzip data (" +
                                            (z_.msg ? std::string(z_.msg) : "inflate error") + ")");
    }
  }
  return produced;
}

std::string read_head(const std::string& path, size_t n) {
  InputFile in(path);
  std::string head(n, '\0');
  size_t got = 0;
  try {
    while (got < n) {
      const size_t k = in.read(head.data() + got, n - got);
      if (k == 0) break;
      got += k;
    }
  } catch (const Error&) {
    if (got == 0) throw;  // a gzip too short to give any bytes: its own error
  }
  head.resize(got);
  return head;
}

bool looks_like_json(std::string_view h) {
  size_t i = h.find_first_not_of(" \t\r\n");
  if (i == std::string_view::npos || (h[i] != '{' && h[i] != '[')) return false;
  size_t j = h.find_first_not_of(" \t\r\n", i + 1);
  if (j == std::string_view::npos) return true;
  return h[j] == '"' || h[j] == '}' || h[j] == ']' || (h[i] == '[' && h[j] == '{');
}

std::string read_whole_file(const std::string& path, uint64_t limit) {
  InputFile in(path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    size_t got = in.read(buf, sizeof buf);
    if (got == 0) break;
    out.append(buf, got);
    if (out.size() > limit)
      throw Error(ErrorCode::Unsupported,
                  path + ": larger than " + std::to_string(limit) + " bytes uncompressed");
  }
  return out;
}

bool is_gzip_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  unsigned char m[2] = {0, 0};
  size_t got = std::fread(m, 1, 2, f);
  std::fclose(f);
  return got == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

}  // namespace braid

// Structural scanning of a Chrome-trace JSON file (see kineto_tokenizer.h).
#include "trace/import/kineto_tokenizer.h"

#include <cstring>

#include "trace/error.h"
#include "trace/input.h"

namespace braid::kineto {
namespace {

// Table of bytes the value scanner must look at; everything else is skipped in a tight loop.
struct ScanTable {
  bool special[256] = {};
  constexpr ScanTable() {
    special[static_cast<unsigned char>('"')] = true;
    special[static_cast<unsigned char>('{')] = true;
    special[static_cast<unsigned char>('}')] = true;
    special[static_cast<unsigned char>('[')] = true;
    special[static_cast<unsigned char>(']')] = true;
    special[static_cast<unsigned char>(',')] = true;
  }
};
constexpr ScanTable kScan;

inline bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// A refillable window over the (decompressed) input.
class Source {
 public:
  explicit Source(InputFile& in) : in_(in) { buf_.reserve(2 * kReadChunk + 64); }

  // Ensures at least `need` bytes are available from pos (fewer only at end of input), keeping
  // everything from `keep` (an offset <= pos) in the buffer. Returns the shift applied to
  // offsets (old offset - shift = new offset).
  size_t ensure(size_t pos, size_t need, size_t keep) {
    size_t shift = 0;
    while (buf_.size() - pos < need && !eof_) {
      if (keep > 0) {
        buf_.erase(0, keep);
        pos -= keep;
        shift += keep;
        keep = 0;
      }
      size_t old = buf_.size();
      size_t want = std::max(kReadChunk, need);
      buf_.resize(old + want);
      size_t got = in_.read(buf_.data() + old, want);
      buf_.resize(old + got);
      bytes_ += got;
      if (got == 0) eof_ = true;
    }
    return shift;
  }
  const char* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }
  uint64_t bytes() const { return bytes_; }
  const InputFile& input() const { return in_; }

 private:
  InputFile& in_;
  std::string buf_;
  bool eof_ = false;
  uint64_t bytes_ = 0;
};

// Skips whitespace, refilling as needed; returns false at end of input.
bool skip_ws(Source& src, size_t& pos) {
  for (;;) {
    if (pos >= src.size()) {
      pos -= src.ensure(pos, 1, pos);
      if (pos >= src.size()) return false;
    }
    if (!is_ws(src.data()[pos])) return true;
    ++pos;
  }
}

// Offset of the quote closing a string whose contents start at `i` (memchr finds candidate
// quotes; one preceded by an odd run of backslashes is escaped), or npos if the buffer ends.
size_t string_end(const char* p, size_t i, size_t n) {
  const size_t start = i;
  while (i < n) {
    const char* q = static_cast<const char*>(std::memchr(p + i, '"', n - i));
    if (!q) return std::string::npos;
    size_t j = static_cast<size_t>(q - p), b = j;
    while (b > start && p[b - 1] == '\\') --b;
    if ((j - b) % 2 == 0) return j;
    i = j + 1;
  }
  return std::string::npos;
}

// Scans one JSON value starting at `pos` (which must be available); returns the offset just
// past it, or npos when the buffer ends first. Strings are skipped with their escapes.
size_t scan_value_end(const char* p, size_t pos, size_t n) {
  if (pos >= n) return std::string::npos;
  char c0 = p[pos];
  if (c0 == '"') {
    size_t close = string_end(p, pos + 1, n);
    return close == std::string::npos ? close : close + 1;
  }
  if (c0 != '{' && c0 != '[') {
    // Scalar: runs to the next structural character or whitespace.
    for (size_t i = pos; i < n; ++i)
      if (p[i] == ',' || p[i] == '}' || p[i] == ']' || is_ws(p[i])) return i;
    return std::string::npos;
  }
  int depth = 0;
  for (size_t i = pos; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    if (!kScan.special[c]) continue;
    if (c == '"') {
      i = string_end(p, i + 1, n);
      if (i == std::string::npos) return i;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

class Tokenizer {
 public:
  Tokenizer(InputFile& in, const std::string& path, TokenSink& sink,
            const std::function<void(uint64_t, uint64_t)>& progress)
      : src_(in), path_(path), sink_(sink), progress_(progress) {}

  void parse_top_level();
  uint64_t bytes() const { return src_.bytes(); }

 private:
  [[noreturn]] void bad(const std::string& what) {
    throw Error(ErrorCode::BadFormat, path_ + ": " + what);
  }
  std::string capture_value(size_t& pos);
  void stream_events(size_t& pos);

  Source src_;
  const std::string& path_;
  TokenSink& sink_;
  const std::function<void(uint64_t, uint64_t)>& progress_;
};

std::string Tokenizer::capture_value(size_t& pos) {
  for (size_t need = 4096;; need *= 2) {
    size_t end = scan_value_end(src_.data(), pos, src_.size());
    if (end != std::string::npos) {
      std::string v(src_.data() + pos, end - pos);
      pos = end;
      return v;
    }
    size_t before = src_.size() - pos;
    pos -= src_.ensure(pos, before + need, pos);
    if (src_.size() - pos == before) bad("truncated JSON (ends inside a top-level value)");
  }
}

void Tokenizer::parse_top_level() {
  size_t pos = 0;
  if (!skip_ws(src_, pos)) throw Error(ErrorCode::Empty, path_ + ": empty file");
  char c = src_.data()[pos];
  if (c == '[') {  // bare array form of the Chrome trace format
    stream_events(pos);
    if (skip_ws(src_, pos)) bad("unexpected data after the event array");
    return;
  }
  if (c != '{') bad("not JSON (expected '{' or '[' at the start)");
  ++pos;
  bool saw_events = false;
  for (;;) {
    if (!skip_ws(src_, pos)) bad("truncated JSON (top-level object not closed)");
    c = src_.data()[pos];
    if (c == '}') {
      ++pos;
      break;
    }
    if (c == ',') {
      ++pos;
      continue;
    }
    if (c != '"')
      bad("malformed JSON at top level (expected a key at byte " +
          std::to_string(src_.bytes() - (src_.size() - pos)) + ")");
    std::string key_text = capture_value(pos);
    std::string key = key_text.substr(1, key_text.size() - 2);
    if (!skip_ws(src_, pos) || src_.data()[pos] != ':')
      bad("malformed JSON (expected ':' after \"" + key + "\")");
    ++pos;
    if (!skip_ws(src_, pos)) bad("truncated JSON (no value for \"" + key + "\")");
    if (key == "traceEvents") {
      if (src_.data()[pos] != '[') bad("\"traceEvents\" is not an array");
      stream_events(pos);
      saw_events = true;
    } else {
      std::string v = capture_value(pos);
      sink_.top_value(key, v);
    }
  }
  if (skip_ws(src_, pos)) bad("unexpected data after the top-level object");
  if (!saw_events) bad("no \"traceEvents\" array (not a Chrome/Kineto trace)");
}

void Tokenizer::stream_events(size_t& pos) {
  ++pos;                                   // '['
  size_t batch_start = std::string::npos;  // offset of the first event of the pending batch
  size_t batch_end = 0;                    // offset just past its last complete event
  auto flush = [&] {
    if (batch_start != std::string::npos && batch_end > batch_start)
      sink_.event_batch(src_.data() + batch_start, batch_end - batch_start);
    batch_start = std::string::npos;
  };
  for (;;) {
    // Skip whitespace and commas between events.
    for (;;) {
      if (pos >= src_.size()) {
        size_t keep = batch_start == std::string::npos ? pos : batch_start;
        size_t shift = src_.ensure(pos, 1, keep);
        pos -= shift;
        if (batch_start != std::string::npos) {
          batch_start -= shift;
          batch_end -= shift;
        }
        if (pos >= src_.size()) bad("truncated JSON (the traceEvents array is not closed)");
      }
      char c = src_.data()[pos];
      if (is_ws(c) || c == ',') {
        ++pos;
        continue;
      }
      break;
    }
    if (src_.data()[pos] == ']') {
      flush();
      ++pos;
      return;
    }
    size_t end;
    for (size_t need = 1 << 16;; need *= 2) {
      end = scan_value_end(src_.data(), pos, src_.size());
      if (end != std::string::npos) break;
      size_t avail = src_.size() - pos;
      size_t keep = batch_start == std::string::npos ? pos : batch_start;
      size_t shift = src_.ensure(pos, avail + need, keep);
      pos -= shift;
      if (batch_start != std::string::npos) {
        batch_start -= shift;
        batch_end -= shift;
      }
      if (src_.size() - pos == avail) bad("truncated JSON (ends inside an event)");
    }
    if (end == pos)  // a stray structural character where an event should start
      bad(std::string("malformed JSON in traceEvents (unexpected '") + src_.data()[pos] + "')");
    if (batch_start == std::string::npos) batch_start = pos;
    batch_end = end;
    pos = end;
    if (batch_end - batch_start >= kBatchBytes) {
      flush();
      if (progress_) progress_(src_.input().consumed(), src_.input().file_size());
    }
  }
}

}  // namespace

uint64_t tokenize_chrome_trace(InputFile& in, const std::string& path, TokenSink& sink,
                               const std::function<void(uint64_t, uint64_t)>& progress) {
  Tokenizer t(in, path, sink, progress);
  t.parse_top_level();
  return t.bytes();
}

}  // namespace braid::kineto

// The Kineto importer's tokenizer: streams a Chrome-trace JSON file and cuts it into what the
// event parser (kineto.cc) reads. It walks the top-level object with a small structural
// scanner; every value but `traceEvents` is handed over whole (they are small), while the event
// array is handed over in batches of complete events (about kBatchBytes each) for simdjson's
// On-Demand API to parse in place. Nothing here knows what an event means.
//
// Also here: the exact decimal-microseconds-to-nanoseconds conversion the parser applies to
// every `ts`/`dur` (inline: it runs twice per event).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

#include "trace/time_range.h"

namespace braid {

class InputFile;

namespace kineto {

constexpr size_t kReadChunk = 8 << 20;   // bytes read from the file per refill
constexpr size_t kBatchBytes = 4 << 20;  // events handed to the parser per batch

// What the tokenizer hands over, in file order.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // A top-level value other than `traceEvents`: its key (the text between the quotes) and its
  // whole JSON text.
  virtual void top_value(std::string_view key, std::string& text) = 0;
  // Complete events of the event array (`traceEvents`, or the bare array form), separated by
  // commas, without the brackets.
  virtual void event_batch(const char* p, size_t n) = 0;
};

// Reads `in` to its end, handing values and event batches to `sink`; `progress` (when set) is
// called after each batch with the file's bytes consumed and its size. Throws BadFormat (naming
// `path`) on malformed JSON, Empty on an empty file. Returns the uncompressed bytes read.
uint64_t tokenize_chrome_trace(InputFile& in, const std::string& path, TokenSink& sink,
                               const std::function<void(uint64_t, uint64_t)>& progress);

// Parses a JSON number given in µs ("1712195495519689.047", "30669.0", "12", "1.5e3") into ns.
// Digits past the third decimal are rounded half-up. Returns false on anything that is not a
// number.
inline bool us_text_to_ns(std::string_view t, int64_t& out) {
  while (!t.empty() && (t.back() == ' ' || t.back() == '\n' || t.back() == '\r' ||
                        t.back() == '\t' || t.back() == ',' || t.back() == '}'))
    t.remove_suffix(1);
  if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
  if (t.empty()) return false;
  bool neg = false;
  size_t i = 0;
  if (t[0] == '-') {
    neg = true;
    i = 1;
  }
  if (t.find_first_of("eE") != std::string_view::npos) {
    // Rare exponent form: go through long double, which is exact enough for these magnitudes.
    std::string s(t);
    char* end = nullptr;
    long double v = std::strtold(s.c_str(), &end);
    if (end == s.c_str()) return false;
    auto ns = round_to_int64(v * 1000.0L);  // nothing for 1e30, inf, nan
    if (!ns) return false;
    out = *ns;
    return true;
  }
  int64_t whole = 0;
  size_t start = i;
  for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
    if (whole > (INT64_MAX - 9) / 10 / 1000) return false;
    whole = whole * 10 + (t[i] - '0');
  }
  if (i == start) return false;
  int64_t frac = 0;
  if (i < t.size() && t[i] == '.') {
    ++i;
    int digits = 0;
    for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i, ++digits) {
      if (digits < 3)
        frac = frac * 10 + (t[i] - '0');
      else if (digits == 3 && t[i] >= '5')
        frac += 1;  // round half-up on the 4th decimal
    }
    for (int k = std::min(digits, 3); k < 3; ++k) frac *= 10;
  }
  if (i != t.size()) return false;
  out = whole * 1000 + frac;
  if (neg) out = -out;
  return true;
}

}  // namespace kineto
}  // namespace braid

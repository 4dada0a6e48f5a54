// JSON output: the one string escaper and the one writer that every command, report, stored JSON
// column and the schedule format (`braid-schedule/1`) write through. Reading JSON is simdjson's
// (importers, the schedule parser); this is only the writing side.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace braid {

// Length of the well-formed UTF-8 sequence at p (no overlongs, surrogates or > U+10FFFF),
// 0 if it is not one.
inline size_t utf8_len(const unsigned char* p, size_t avail) {
  unsigned char c = p[0];
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (avail < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((p[k] & 0xC0) != 0x80) return 0;
  return len;
}

namespace json {

// Writes `s` as the inside of a JSON string literal through put(std::string_view): '"' and '\\'
// escaped, control characters as \b \f \n \r \t or \u00XX, well-formed UTF-8 kept, every byte of
// invalid UTF-8 replaced by U+FFFD, so the output is always valid JSON.
template <typename Put>
void escape(std::string_view s, Put&& put) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Fast path: a run of bytes that need nothing.
    size_t j = i;
    while (j < n && b[j] >= 0x20 && b[j] < 0x80 && b[j] != '"' && b[j] != '\\') ++j;
    if (j > i) put(std::string_view(s.data() + i, j - i));
    i = j;
    if (i >= n) break;
    const unsigned char c = b[i];
    if (c < 0x80) {
      switch (c) {
        case '"':
          put("\\\"");
          break;
        case '\\':
          put("\\\\");
          break;
        case '\b':
          put("\\b");
          break;
        case '\f':
          put("\\f");
          break;
        case '\n':
          put("\\n");
          break;
        case '\r':
          put("\\r");
          break;
        case '\t':
          put("\\t");
          break;
        default: {
          static constexpr char kHex[] = "0123456789abcdef";
          const char e[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          put(std::string_view(e, 6));
        }
      }
      ++i;
      continue;
    }
    const size_t len = utf8_len(b + i, n - i);
    if (len == 0) {
      put("\\ufffd");
      ++i;
    } else {
      put(std::string_view(s.data() + i, len));
      i += len;
    }
  }
}

// `s` as a quoted JSON string, appended to `out` / returned.
void append_quoted(std::string& out, std::string_view s);
std::string quote(std::string_view s);

// printf-style number text for a double ("%.<digits>f" / "%.<digits>g"); "null" when not finite.
std::string fixed(double v, int decimals);
std::string general(double v, int digits);

// A JSON document built value by value; commas, colons and indentation are its business.
//
// Style: Compact writes `{"a":1,"b":[1,2]}`, Spaced `{"a": 1, "b": [1, 2]}`. A container begun
// with lines = true puts each element on its own line, indented two spaces per open container,
// and its closing bracket on a line of its own (an empty one stays `[]` / `{}`).
class Writer {
 public:
  enum class Style { Compact, Spaced };
  explicit Writer(Style style = Style::Compact) : spaced_(style == Style::Spaced) {}

  Writer& begin_object(bool lines = false) { return open('{', lines); }
  Writer& end_object() { return close('}'); }
  Writer& begin_array(bool lines = false) { return open('[', lines); }
  Writer& end_array() { return close(']'); }

  Writer& key(std::string_view k);

  Writer& value(std::string_view s) {
    separate();
    append_quoted(out_, s);
    return *this;
  }
  Writer& value(const char* s) { return value(std::string_view(s)); }
  Writer& value(const std::string& s) { return value(std::string_view(s)); }
  Writer& value(bool b) { return raw(b ? "true" : "false"); }
  template <typename T,
            typename = std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>>
  Writer& value(T v) {
    separate();
    char buf[24];
    out_.append(buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
    return *this;
  }
  Writer& null() { return raw("null"); }
  // A double with `decimals` fixed decimals / `digits` significant digits (printf %f / %g).
  Writer& fixed(double v, int decimals) { return raw(json::fixed(v, decimals)); }
  Writer& general(double v, int digits) { return raw(json::general(v, digits)); }
  // An already-written JSON value (a stored JSON column, another writer's output).
  Writer& raw(std::string_view json) {
    separate();
    out_ += json;
    return *this;
  }

  // key(k) and the value in one call.
  template <typename T>
  Writer& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }
  Writer& field_fixed(std::string_view k, double v, int decimals) {
    return key(k).fixed(v, decimals);
  }
  Writer& field_raw(std::string_view k, std::string_view json) { return key(k).raw(json); }
  template <typename T>
  Writer& array_of(std::string_view k, const std::vector<T>& v) {
    key(k).begin_array();
    for (const T& x : v) value(x);
    return end_array();
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  struct Frame {
    bool lines;
    bool first = true;
  };
  Writer& open(char bracket, bool lines);
  Writer& close(char bracket);
  void separate();  // what goes before a value or a key: a comma, a space, a newline
  void indent(size_t depth) { out_.append(2 * depth, ' '); }

  std::string out_;
  std::vector<Frame> stack_;
  bool spaced_;
  bool after_key_ = false;
};

// A JSON array of integers: "[0,1,2]" (Compact) or "[0, 1, 2]" (Spaced), as stored in the
// `ranks` / `ops` columns.
template <typename T>
std::string int_array(const std::vector<T>& v, Writer::Style style = Writer::Style::Compact) {
  Writer w(style);
  w.begin_array();
  for (const T& x : v) w.value(x);
  return w.end_array().take();
}

}  // namespace json

// The inside of a JSON string literal for `s` (json::escape, without the quotes).
std::string json_escape(std::string_view s);

}  // namespace braid

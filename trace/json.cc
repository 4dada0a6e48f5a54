#include "trace/json.h"

#include <cmath>
#include <cstdio>

namespace braid::json {

void append_quoted(std::string& out, std::string_view s) {
  out += '"';
  escape(s, [&out](std::string_view piece) { out += piece; });
  out += '"';
}

std::string quote(std::string_view s) {
  std::string o;
  o.reserve(s.size() + 2);
  append_quoted(o, s);
  return o;
}

namespace {
std::string printf_double(const char* format, int precision, double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, precision, v);
  return buf;
}
}  // namespace

std::string fixed(double v, int decimals) { return printf_double("%.*f", decimals, v); }
std::string general(double v, int digits) { return printf_double("%.*g", digits, v); }

void Writer::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) return;
  Frame& f = stack_.back();
  if (!f.first) out_ += ',';
  if (f.lines) {
    out_ += '\n';
    indent(stack_.size());
  } else if (!f.first && spaced_) {
    out_ += ' ';
  }
  f.first = false;
}

Writer& Writer::key(std::string_view k) {
  separate();
  append_quoted(out_, k);
  out_ += spaced_ ? ": " : ":";
  after_key_ = true;
  return *this;
}

Writer& Writer::open(char bracket, bool lines) {
  separate();
  out_ += bracket;
  stack_.push_back(Frame{lines});
  return *this;
}

Writer& Writer::close(char bracket) {
  const Frame f = stack_.back();
  stack_.pop_back();
  if (f.lines && !f.first) {
    out_ += '\n';
    indent(stack_.size());
  }
  out_ += bracket;
  return *this;
}

}  // namespace braid::json

namespace braid {
std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  json::escape(s, [&out](std::string_view piece) { out += piece; });
  return out;
}
}  // namespace braid

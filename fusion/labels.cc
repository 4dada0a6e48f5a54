#include "fusion/labels.h"

#include <cctype>

namespace braid::fusion {
namespace {

constexpr size_t kMaxShort = 80;

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The text up to the first `stop` character outside <> () [] {}.
std::string_view until_top(std::string_view s, char stop) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (depth == 0 && c == stop) return s.substr(0, i);
    if (c == '<' || c == '(' || c == '[' || c == '{') ++depth;
    if ((c == '>' || c == ')' || c == ']' || c == '}') && depth > 0) --depth;
  }
  return s;
}

// The functor that tells a templated kernel apart: "addcmul" in "addcmul_cuda_kernel", an
// identifier ending in _functor / Functor / _op, else "".
std::string functor_in(std::string_view args) {
  for (size_t i = 0; i < args.size();) {
    if (!ident_char(args[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < args.size() && ident_char(args[j])) ++j;
    std::string_view id = args.substr(i, j - i);
    const bool qualified = j + 1 < args.size() && args[j] == ':' && args[j + 1] == ':';
    if (!qualified) {
      for (std::string_view sfx :
           {"_cuda_kernel", "_kernel_cuda", "_kernel", "_functor", "Functor", "_impl"}) {
        if (id.size() > sfx.size() && id.substr(id.size() - sfx.size()) == sfx)
          return std::string(id.substr(0, id.size() - sfx.size()));
      }
    }
    i = j;
  }
  return "";
}

}  // namespace

std::string short_label(std::string_view label) {
  // "aten::addmm: volta_sgemm_64x64_tn" (a kernel with its op): the op.
  if (size_t colon = label.find(": "); colon != std::string_view::npos) {
    std::string_view head = label.substr(0, colon);
    if (head.find(' ') == std::string_view::npos && head.find("::") != std::string_view::npos)
      return std::string(head);
  }
  std::string text(label);
  for (size_t p; (p = text.find("(anonymous namespace)::")) != std::string::npos;)
    text.erase(p, 23);
  std::string_view s = text;
  if (s.rfind("void ", 0) == 0) s.remove_prefix(5);
  // Plain text (an opaque collective, a memcpy, a staging copy): as it is, if short enough.
  if (s.find('<') == std::string_view::npos && s.find('(') == std::string_view::npos) {
    std::string out(s.substr(0, kMaxShort));
    if (s.size() > kMaxShort) out += "...";
    return out;
  }
  std::string_view fn = until_top(s, '(');  // drop the parameter list
  std::string_view base = until_top(fn, '<');
  // Drop namespaces and classes: the part after the last "::" outside brackets.
  for (size_t p = base.rfind("::"); p != std::string_view::npos; p = std::string_view::npos)
    base.remove_prefix(p + 2);
  while (!base.empty() && base.back() == ' ') base.remove_suffix(1);
  std::string out(base);
  if (fn.size() > base.size() && fn.find('<') != std::string_view::npos) {
    std::string_view args = fn.substr(fn.find('<') + 1);
    std::string f = functor_in(args);
    if (!f.empty()) out += "<" + f + ">";
  }
  if (out.empty()) out = std::string(s.substr(0, kMaxShort));
  if (out.size() > kMaxShort) out = out.substr(0, kMaxShort) + "...";
  return out;
}

}  // namespace braid::fusion

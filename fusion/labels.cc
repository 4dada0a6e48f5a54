#include "fusion/labels.h"

#include <algorithm>
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

// The functor that tells a templated kernel apart: "addcmul" in "addcmul_cuda_kernel", else the
// innermost functor ("Mul" in "BinaryFunctor<float, ..., MulFunctor<float> >"), else an
// identifier ending in _impl; "" when none.
std::string functor_in(std::string_view args) {
  std::string kernel, functor, impl;
  for (size_t i = 0; i < args.size();) {
    if (!ident_char(args[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < args.size() && ident_char(args[j])) ++j;
    std::string_view id = args.substr(i, j - i);
    i = j;
    if (j + 1 < args.size() && args[j] == ':' && args[j + 1] == ':') continue;  // a namespace
    auto strip = [&](std::string_view sfx) -> std::string {
      if (id.size() <= sfx.size() || id.substr(id.size() - sfx.size()) != sfx) return "";
      return std::string(id.substr(0, id.size() - sfx.size()));
    };
    std::string k = strip("_cuda_kernel");
    if (k.empty()) k = strip("_kernel_cuda");
    if (k.empty()) k = strip("_kernel");
    if (!k.empty() && kernel.empty()) kernel = k;
    std::string f = strip("Functor");
    if (f.empty()) f = strip("_functor");
    if (!f.empty() && f != "Binary" && f != "Unary" && f != "Ternary") functor = f;
    if (std::string m = strip("_impl"); !m.empty() && impl.empty()) impl = m;
  }
  return !kernel.empty() ? kernel : !functor.empty() ? functor : impl;
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
    if (f.empty()) {
      // No functor: the first template argument when it is a plain identifier (CUTLASS's
      // Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>).
      std::string_view first = until_top(args, ',');
      if (!first.empty() && first.back() == '>') first.remove_suffix(1);
      while (!first.empty() && first.front() == ' ') first.remove_prefix(1);
      while (!first.empty() && first.back() == ' ') first.remove_suffix(1);
      // A name (with an underscore: not a scalar type such as float or int).
      const bool ident = !first.empty() && first.size() <= 60 &&
                         std::all_of(first.begin(), first.end(), ident_char) &&
                         !std::isdigit(static_cast<unsigned char>(first.front())) &&
                         first.find('_') != std::string_view::npos;
      if (ident) f = std::string(first);
    }
    if (!f.empty()) out += "<" + f + ">";
  }
  if (out.empty()) out = std::string(s.substr(0, kMaxShort));
  if (out.size() > kMaxShort) out = out.substr(0, kMaxShort) + "...";
  return out;
}

}  // namespace braid::fusion

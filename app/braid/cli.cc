#include "app/braid/cli.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <vector>

namespace braid::cli {

namespace {
struct Verb {
  int order;
  const char* name;
  RegisterFn fn;
};
// A function-local static, so registration from other files' static initializers is safe.
std::vector<Verb>& verbs() {
  static std::vector<Verb> v;
  return v;
}
}  // namespace

VerbRegistration::VerbRegistration(int order, const char* name, RegisterFn fn) {
  verbs().push_back({order, name, fn});
}

void register_verbs(CLI::App& app, Action& run) {
  auto v = verbs();
  std::stable_sort(v.begin(), v.end(), [](const Verb& a, const Verb& b) {
    return a.order != b.order ? a.order < b.order : std::string_view(a.name) < b.name;
  });
  for (const Verb& verb : v) verb.fn(app, run);
}

std::vector<std::string> wrap_lines(const std::string& prefix, const std::string& text) {
  std::vector<std::string> out;
  const std::string indent(std::min<size_t>(prefix.size(), 40), ' ');
  std::string line = prefix;
  size_t at = 0;
  bool first_word = true;
  auto flush = [&] {
    out.push_back(line);
    line = indent;
    first_word = true;
  };
  while (at <= text.size()) {
    size_t nl = text.find('\n', at);
    std::string para = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    for (size_t i = 0; i < para.size();) {
      size_t j = para.find(' ', i);
      if (j == std::string::npos) j = para.size();
      std::string word = para.substr(i, j - i);
      const size_t room = kMaxLine - std::min(kMaxLine, line.size() + (first_word ? 0 : 1));
      if (!first_word && word.size() > room) flush();
      // A word longer than a whole line is cut.
      while (line.size() + (first_word ? 0 : 1) + word.size() > kMaxLine) {
        const size_t fit = kMaxLine - line.size() - (first_word ? 0 : 1);
        line += (first_word ? "" : " ") + word.substr(0, fit);
        word = word.substr(fit);
        flush();
      }
      line += (first_word ? "" : " ") + word;
      first_word = false;
      i = j + 1;
    }
    if (nl == std::string::npos) break;
    flush();
    at = nl + 1;
  }
  out.push_back(line);
  return out;
}

void print_wrapped(const std::string& prefix, const std::string& text) {
  for (const std::string& l : wrap_lines(prefix, text)) std::printf("%s\n", l.c_str());
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Progress::Progress(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled && isatty(STDERR_FILENO)), start_(now_seconds()) {}

Progress::~Progress() { done(); }

void Progress::update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  double t = now_seconds();
  if (t - last_ < 0.2) return;
  last_ = t;
  double mb = static_cast<double>(done) / 1e6;
  double rate = t > start_ ? mb / (t - start_) : 0;
  if (total > 0)
    std::fprintf(stderr, "\r%s: %5.1f%%  %8.1f MB read  %6.1f MB/s ", label_.c_str(),
                 100.0 * static_cast<double>(done) / static_cast<double>(total), mb, rate);
  else
    std::fprintf(stderr, "\r%s: %8.1f MB  %6.1f MB/s ", label_.c_str(), mb, rate);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::count(std::string_view what, uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const double t = now_seconds();
  if (t - last_ < 0.2 && done < total) return;
  last_ = t;
  std::fprintf(stderr, "\r%s: %.*s %llu of %llu  %.0f s \033[K", label_.c_str(),
               static_cast<int>(what.size()), what.data(), static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total), t - start_);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::done() {
  if (shown_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }
}

std::string assets_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* env = std::getenv("BRAID_ASSETS_DIR"); env && fs::is_directory(env, ec))
    return env;
#ifdef BRAID_ASSETS_FROM_EXE
  // Installed: share/braid/assets under the prefix braid's own bin/ is in.
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = (self.parent_path() / BRAID_ASSETS_FROM_EXE).lexically_normal();
    if (fs::is_directory(installed, ec)) return installed.string();
  }
#endif
#ifdef BRAID_ASSETS_DIR
  if (fs::is_directory(BRAID_ASSETS_DIR, ec)) return BRAID_ASSETS_DIR;
#endif
  return "assets";
}

}  // namespace braid::cli

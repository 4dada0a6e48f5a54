// Shared pieces of the `braid` verbs: registration, errors, progress.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace braid::cli {

// Each verb registers its subcommand and sets `run` to what it does when chosen.
using Action = std::function<int()>;
using RegisterFn = void (*)(CLI::App& app, Action& run);

// Verbs register themselves from their own file (one file per verb, no central list to edit):
//   static const VerbRegistration reg{30, "analyze", register_analyze};
// `order` fixes where the verb appears in `braid --help` (pipeline order: import 10, info 20,
// export 25, analyze 30, merge 35, synth 40, fuse 45, replay 50, ab 55, record 60, daemon 70,
// demo 90).
struct VerbRegistration {
  VerbRegistration(int order, const char* name, RegisterFn fn);
};
// Registers every verb on `app`, in order.
void register_verbs(CLI::App& app, Action& run);

// The options of a verb that reads one run of a .braid file (or of each of several files, when
// `Files` is a vector): the file (positional, required; `file_help`), --run (default: the file's
// captured/imported run) and --step (`step_help`).
template <typename Files>
void add_run_options(CLI::App& cmd, Files& file, const std::string& file_help, int64_t& run_id,
                     int64_t& step, const std::string& step_help) {
  cmd.add_option("file", file, file_help)->required();
  cmd.add_option("--run", run_id, "Run id (default: the file's captured/imported run)");
  cmd.add_option("--step", step, step_help);
}

// Progress on stderr when it is a terminal (and not --quiet): one line, rewritten in place.
class Progress {
 public:
  Progress(std::string label, bool enabled);
  ~Progress();
  void update(uint64_t done, uint64_t total);                        // bytes
  void count(std::string_view what, uint64_t done, uint64_t total);  // "ranks: 12 of 64"
  void done();

 private:
  std::string label_;
  bool enabled_;
  double start_;
  double last_ = 0;
  bool shown_ = false;
};

double now_seconds();

// Text output lines are at most this long (`braid lift`, `fuse`, `ab`, ...): longer text wraps.
inline constexpr size_t kMaxLine = 200;
// `prefix` + `text` as lines of at most kMaxLine characters: `text` wraps at spaces onto lines
// indented as far as `prefix` is long (at most 40 columns). A newline in `text` starts a line.
std::vector<std::string> wrap_lines(const std::string& prefix, const std::string& text);
void print_wrapped(const std::string& prefix, const std::string& text);
// Where the bundled samples are: $BRAID_ASSETS_DIR, else share/braid/assets of the prefix this
// braid is installed in (found from its own executable), else the source tree it was built from.
std::string assets_dir();

}  // namespace braid::cli

// Shared pieces of the `braid` verbs: registration, errors, progress.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace braid::cli {

// Each verb registers its subcommand and sets `run` to what it does when chosen.
using Action = std::function<int()>;
void register_import(CLI::App& app, Action& run);
void register_info(CLI::App& app, Action& run);
void register_export(CLI::App& app, Action& run);
void register_demo(CLI::App& app, Action& run);

// Progress on stderr when it is a terminal (and not --quiet): one line, rewritten in place.
class Progress {
 public:
  Progress(std::string label, bool enabled);
  ~Progress();
  void update(uint64_t done, uint64_t total);
  void done();

 private:
  std::string label_;
  bool enabled_;
  double start_;
  double last_ = 0;
  bool shown_ = false;
};

double now_seconds();
// Where the bundled samples are: BRAID_ASSETS_DIR, else next to the executable's source tree.
std::string assets_dir();

}  // namespace braid::cli

// `braid`: the command-line front end. One file per verb (cmd_*.cc); this file only dispatches
// and turns errors into one line on stderr and a non-zero exit status.
#include <cstdio>
#include <exception>

#include "app/braid/cli.h"
#include "trace/error.h"
#include "trace/temp_cleanup.h"

int main(int argc, char** argv) {
  CLI::App app{
      "braid: profiler and schedule explorer for multi-GPU training jobs.\n"
      "Captures (record, daemon) or imports (import) kernel and NCCL timelines into a .braid file,\n"
      "analyzes them across ranks (merge, analyze), synthesizes and rewrites schedules to remove\n"
      "redundant communication (synth, fuse), replays baseline and fused schedules to measure the\n"
      "difference (replay, ab), and shows everything in braid-view. `braid demo` runs it all."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "braid 0.1.0");
  braid::cli::Action run;
  braid::cli::register_verbs(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Prints help, the version or the usage error. Usage errors exit 2, as docs/cli.md says
    // (CLI11's own codes, 105-110, would tell a script nothing more).
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  braid::install_temp_cleanup_on_signal();
  try {
    return run ? run() : 0;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    return e.code() == braid::ErrorCode::Usage ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    return 1;
  }
}

// braid export: .braid -> Chrome-trace JSON for Perfetto.
#include <cstdio>

#include "app/braid/cli.h"
#include "trace/error.h"
#include "trace/export/chrome.h"
#include "trace/reader.h"

namespace braid::cli {

void register_export(CLI::App& app, Action& run) {
  struct Opts {
    std::string file, out, format = "chrome";
    int64_t run_id = -1;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "export",
      "Export a run as Chrome-trace JSON that ui.perfetto.dev and chrome://tracing open: one\n"
      "process per rank, one thread per stream, collectives with their metadata as args, all\n"
      "ranks on one time axis (clock offsets applied).");
  cmd->add_option("file", o->file, ".braid file")->required();
  cmd->add_option("-o,--output", o->out, "Output JSON file")->required();
  cmd->add_option("--run", o->run_id, "Run id (default: the first run)");
  cmd->add_option("--format", o->format, "Output format (only: chrome)")->capture_default_str();
  cmd->add_flag("-q,--quiet", o->quiet, "No summary output");
  cmd->callback([o, &run] {
    run = [o] {
      if (o->format != "chrome")
        throw Error(ErrorCode::Usage, "unknown export format '" + o->format + "' (expected chrome)");
      TraceReader reader(o->file);
      ChromeExportOptions opts;
      opts.run = o->run_id;
      auto stats = export_chrome(reader, o->out, opts);
      if (!o->quiet)
        std::printf("exported %lld events to %s\n", static_cast<long long>(stats.events),
                    o->out.c_str());
      return 0;
    };
  });
}

static const VerbRegistration kRegister{25, "export", register_export};

}  // namespace braid::cli

// braid info: what a .braid file holds.
#include <cstdio>

#include "app/braid/cli.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/summary.h"

namespace braid::cli {

void register_info(CLI::App& app, Action& run) {
  struct Opts {
    std::string file;
    bool json = false;
    int64_t run_id = -1;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "info",
      "Summarize a .braid file: per run, its ranks, streams, time span, event counts, kernels by\n"
      "category, per-collective totals (count, bytes, time) and data-quality diagnostics.");
  cmd->add_option("file", o->file, ".braid file")->required();
  cmd->add_flag("--json", o->json, "Machine-readable JSON instead of text");
  cmd->add_option("--run", o->run_id, "Only this run id");
  cmd->callback([o, &run] {
    run = [o] {
      TraceReader reader(o->file);
      auto runs = summarize(reader);
      if (o->run_id >= 0) {
        std::erase_if(runs, [&](const RunSummary& s) { return s.run.run_id != o->run_id; });
        if (runs.empty())
          throw Error(ErrorCode::Usage, o->file + ": no run " + std::to_string(o->run_id));
      }
      std::string text = o->json ? summary_json(o->file, runs) : summary_text(o->file, runs);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    };
  });
}

static const VerbRegistration kRegister{20, "info", register_info};

}  // namespace braid::cli

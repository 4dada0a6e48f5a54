// braid merge: per-rank .braid files -> one job file with aligned clocks.
#include <cstdio>

#include "analysis/merge.h"
#include "app/braid/cli.h"

namespace braid::cli {

void register_merge(CLI::App& app, Action& run) {
  struct Opts {
    std::vector<std::string> inputs;
    std::string out;
    bool keep_clocks = false, quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "merge",
      "Combine per-rank .braid files (one per process) into one job file with one run whose\n"
      "ranks are the union. A rank in two inputs is refused. Every row of each input's run is\n"
      "copied (capture tables nccl_calls/nccl_proxy_ops included), times on each rank's clock;\n"
      "each input's meta keys are kept as input.<i>.<key>. Clocks are aligned on matched\n"
      "collectives and the offsets stored with their error; ranks no collective links keep\n"
      "their own clock (a diagnostic says so). An input with a table or column this braid does\n"
      "not know (a newer schema) is refused.");
  cmd->add_option("inputs", o->inputs, "Per-rank .braid files")->required();
  cmd->add_option("-o,--output", o->out, "Output .braid file (replaced atomically)")->required();
  cmd->add_flag("--keep-clocks", o->keep_clocks, "Do not solve clock offsets (all 0)");
  cmd->add_flag("-q,--quiet", o->quiet, "No summary output");
  cmd->callback([o, &run] {
    run = [o] {
      auto r = analysis::merge_files(o->inputs, o->out, !o->keep_clocks);
      if (!o->quiet) {
        std::printf("merged %zu files (%zu ranks, %lld events) into run %lld of %s\n",
                    o->inputs.size(), r.ranks.size(), static_cast<long long>(r.events),
                    static_cast<long long>(r.run_id), o->out.c_str());
        for (const auto& c : r.clocks.ranks)
          std::printf("  rank %d  offset %+.3f us%s\n", c.rank, c.offset / 1000.0,
                      c.aligned ? (c.error >= 0 ? (" +- " + std::to_string(c.error) + " ns").c_str() : "")
                                : "  (own clock kept: no shared collective)");
      }
      return 0;
    };
  });
}

static const VerbRegistration kRegister{35, "merge", register_merge};

}  // namespace braid::cli

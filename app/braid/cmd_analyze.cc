// braid analyze: cross-rank matching, clock alignment, metrics, critical path, calibrated cost
// model and parallelism labels for one run; a report on stdout, results stored in the file.
#include <cstdio>

#include "analysis/analyze.h"
#include "analysis/store.h"
#include "app/braid/cli.h"
#include "trace/reader.h"

namespace braid::cli {

void register_analyze(CLI::App& app, Action& run) {
  struct Opts {
    std::string file, profile = "h100-nvlink";
    int64_t run_id = -1, step = -1;
    bool json = false, no_store = false, keep_clocks = false, hta_compat = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "analyze",
      "Analyze a multi-rank run: match collectives across ranks, align the ranks' clocks on\n"
      "them, and report per rank and step compute / communication / idle time, overlap and\n"
      "exposed communication, per collective arrival skew vs transfer time with the late rank\n"
      "and bus bandwidth, the critical path, an α-β cost model calibrated on the trace, and the\n"
      "parallelism (TP/SP/EP/PP/DP) of each communicator. Results are stored in the file\n"
      "(tables analysis_*, clock offsets in ranks) for the GUI unless --no-store.");
  add_run_options(*cmd, o->file, ".braid file", o->run_id, o->step,
                  "Only this step (ProfilerStep number)");
  cmd->add_flag("--json", o->json, "Machine-readable JSON instead of text");
  cmd->add_option("--profile", o->profile,
                  "Hardware profile for the cost model: h100-nvlink, h100-pcie, h100-ib,\n"
                  "a100-nvlink, cpu-shm, or a JSON file")
      ->capture_default_str();
  cmd->add_flag("--hta-compat", o->hta_compat,
                "Whole-run rows as HTA computes them by default: only GPU work launched before\n"
                "the last ProfilerStep by a call in the trace, times rounded to whole µs (a view\n"
                "for comparing with HTA: implies --no-store)");
  cmd->add_flag("--no-store", o->no_store, "Do not write the results into the file");
  cmd->add_flag("--keep-clocks", o->keep_clocks,
                "Use the clock offsets stored in the file instead of solving them");
  cmd->callback([o, &run] {
    run = [o] {
      analysis::Analysis a;
      {
        TraceReader reader(o->file);
        analysis::AnalyzeOptions opt;
        opt.run = o->run_id;
        opt.step = o->step;
        opt.profile = o->profile;
        opt.solve_clocks = !o->keep_clocks;
        opt.hta_compat = o->hta_compat;
        a = analysis::analyze(reader, opt);
      }
      if (!o->no_store && !o->hta_compat) analysis::store_analysis(o->file, a);
      std::string text = o->json ? analysis::report_json(a) : analysis::report_text(a);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    };
  });
}

static const VerbRegistration kRegister{30, "analyze", register_analyze};

}  // namespace braid::cli

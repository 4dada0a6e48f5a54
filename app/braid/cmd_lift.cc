// braid lift: the schedule of a captured, imported or merged run (fusion::lift_run), stored in
// the same file as a root schedule that `braid fuse`, `replay` and `ab` then work on.
#include <cstdio>

#include "app/braid/cli.h"
#include "app/braid/lift_run.h"
#include "fusion/lift.h"
#include "trace/json.h"

namespace braid::cli {

void print_lifted(const std::string& file, const fusion::LiftedRun& l, FILE* out) {
  std::fprintf(out, "lifted run %lld of %s into schedule %lld '%s'\n",
               static_cast<long long>(l.run_id), file.c_str(),
               static_cast<long long>(l.schedule_id), l.schedule.name.c_str());
  for (const std::string& line : fusion::lift_summary(l.schedule, l.report))
    for (const std::string& w : wrap_lines("", line)) std::fprintf(out, "%s\n", w.c_str());
}

void register_lift(CLI::App& app, Action& run) {
  struct Opts {
    std::string file;
    int64_t run_id = -1, step = -1;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "lift",
      "Lift a captured, imported or merged multi-rank run into a schedule (docs/schedule-ir.md)\n"
      "and store it in the file for `braid fuse`, `braid replay` and `braid ab`: kernels become\n"
      "opaque compute with their traced durations, collectives matched across ranks become\n"
      "collectives on their communicators, sized from the trace; what cannot be lifted stays\n"
      "opaque compute and the provenance says why. With execution traces imported beside the\n"
      "trace (braid import --et), compute the ET covers reads and writes exact storage ranges\n"
      "(data flow), collectives take their buffers from its tensors, and the step the ETs\n"
      "cover is lifted unless --step says otherwise. Prints ranks, ops, collectives by operation\n"
      "with bytes, what stayed opaque and why, and the provenance; --json prints the counts.");
  add_run_options(*cmd, o->file, ".braid file with the run", o->run_id, o->step,
                  "Only this step (ProfilerStep number; default: the step the execution traces "
                  "cover, else the whole run)");
  cmd->add_flag("--json", o->json,
                "Print the lift's counts as JSON: ops, compute, compute_with_dataflow, "
                "collectives, opaque_collectives, opaque (op, count, reason), schedule");
  cmd->callback([o, &run] {
    run = [o] {
      fusion::LiftedRun l = fusion::lift_into_file(o->file, o->run_id, o->step);
      if (o->json) {
        json::Writer w(json::Writer::Style::Spaced);
        w.begin_object(true);
        w.field("run", l.run_id).field("schedule", l.schedule_id);
        l.report.write_fields(w);
        w.end_object();
        std::printf("%s\n", w.str().c_str());
        return 0;
      }
      print_lifted(o->file, l);
      return 0;
    };
  });
}

static const VerbRegistration kRegister{38, "lift", register_lift};

}  // namespace braid::cli

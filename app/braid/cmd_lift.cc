// braid lift: the schedule of a captured, imported or merged run (fusion::lift_run), stored in
// the same file as a root schedule that `braid fuse`, `replay` and `ab` then work on.
#include <cstdio>

#include "app/braid/cli.h"
#include "app/braid/lift_run.h"
#include "fusion/lift.h"

namespace braid::cli {

void print_lifted(const std::string& file, const fusion::LiftedRun& l) {
  std::printf("lifted run %lld of %s into schedule %lld '%s'\n", static_cast<long long>(l.run_id),
              file.c_str(), static_cast<long long>(l.schedule_id), l.schedule.name.c_str());
  for (const std::string& line : fusion::lift_summary(l.schedule))
    std::printf("%s\n", line.c_str());
}

void register_lift(CLI::App& app, Action& run) {
  struct Opts {
    std::string file;
    int64_t run_id = -1, step = -1;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "lift",
      "Lift a captured, imported or merged multi-rank run into a schedule (docs/schedule-ir.md)\n"
      "and store it in the file for `braid fuse`, `braid replay` and `braid ab`: kernels become\n"
      "opaque compute with their traced durations, collectives matched across ranks become\n"
      "collectives on their communicators, sized from the trace; what cannot be lifted stays\n"
      "opaque compute and the provenance says why. Prints ranks, ops, collectives by operation\n"
      "with bytes, what stayed opaque, and the provenance.");
  cmd->add_option("file", o->file, ".braid file with the run")->required();
  cmd->add_option("--run", o->run_id, "Run id (default: the file's captured/imported run)");
  cmd->add_option("--step", o->step,
                  "Only this step (ProfilerStep number; default: the whole run)");
  cmd->callback([o, &run] {
    run = [o] {
      print_lifted(o->file, fusion::lift_into_file(o->file, o->run_id, o->step));
      return 0;
    };
  });
}

static const VerbRegistration kRegister{38, "lift", register_lift};

}  // namespace braid::cli

// braid demo: the whole pipeline on its built-in default, each stage run as the `braid` verb a
// user would type (so the demo shows exactly what the tools print):
//   1. synth   a Chimera case (TP + SP on 4 ranks, small enough for a CPU replay)
//   2. fuse    find and apply the rewrites, with predicted savings
//   3. ab      baseline vs fused on the `sim` backend (data check + timing), runs stored
//   4. analyze the simulated baseline: where step time goes, exposed communication
//   5. replay --calibrate  fit the sim to this host under mpirun, when mpirun is installed
//   6. ab      on the `mpi` backend under mpirun, predictions from that calibration
//   7. picture the before/after compare view (braid-view --screenshot, under xvfb-run when
//              there is no display), when braid-view was built
//   8-12.  the same loop on a real 2-rank DLRM trace (assets/traces/hta-dlrm)
//   13-17. and on a real 4-rank job with its execution traces (assets/traces/et-tp): data flow,
//          rewrites proven, the fused pair's data checked
// Everything goes into one .braid file, built in a temporary file and renamed at the end.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "app/braid/cli.h"
#include "fusion/schedule_store.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/temp_cleanup.h"

namespace braid::cli {

namespace {
namespace fs = std::filesystem;

std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(ErrorCode::Internal, "cannot locate the braid executable");
  return p.string();
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool on_path(const char* tool) {
  std::string cmd = std::string("command -v ") + tool + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Runs a shell command line, echoing it first; returns its exit status.
int step(const std::string& title, const std::string& cmdline) {
  std::printf("\n== %s\n$ %s\n", title.c_str(), cmdline.c_str());
  std::fflush(stdout);
  int st = std::system(cmdline.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

void must(int status, const std::string& what) {
  if (status != 0)
    throw Error(ErrorCode::Internal, "demo stage '" + what + "' failed (exit " +
                                         std::to_string(status) + ")");
}

// Ids of the simulated (or replayed) runs `braid ab` stored for a schedule.
// The last run of `kind` in `file` (of `schedule` when given; a schedule of -1 has no runs), -1
// when none.
int64_t last_run(const std::string& file, RunKind kind,
                 std::optional<int64_t> schedule = std::nullopt) {
  int64_t last = -1;
  for (const RunRow& r : TraceReader(file).runs())
    if (r.kind == kind && (!schedule || (*schedule >= 0 && r.schedule_id == *schedule)))
      last = std::max(last, r.run_id);
  return last;
}

// The last fused schedule (one with a parent) and the schedule it was fused from, -1 when none.
std::pair<int64_t, int64_t> baseline_and_fused(const std::string& file) {
  int64_t base = -1, fused = -1;
  for (const fusion::StoredSchedule& s : fusion::list_schedules(file))
    if (s.parent_id >= 0 && s.id > fused) fused = s.id, base = s.parent_id;
  return {base, fused};
}
// `braid ab` of the file `f` (quoted) on the simulator, then on `mpi_ranks` MPI ranks unless 0; a
// failure names the stage "ab sim (`what`)" or "ab mpi (`what`)".
void ab_sim_and_mpi(const std::string& braid, const std::string& f, int mpi_ranks,
                    const std::string& what, const std::string& sim_title,
                    const std::string& mpi_title) {
  must(step(sim_title, braid + " ab " + f + " --backend sim --steps 2 --warmup 0"),
       "ab sim (" + what + ")");
  if (mpi_ranks > 0)
    must(step(mpi_title, "mpirun --oversubscribe --allow-run-as-root -np " +
                             std::to_string(mpi_ranks) + " " + braid + " ab " + f +
                             " --backend mpi --steps 1 --warmup 0"),
         "ab mpi (" + what + ")");
}

// The loop on a user's own job: a small real 2-rank trace shipped in assets/ (HTA's DLRM
// samples, MIT) imported as a second run of the demo file, lifted (one profiler step), fused,
// and A/B'd on the sim and, when mpirun is present, on 2 MPI ranks.
void real_trace_loop(const std::string& braid, const std::string& file, bool mpi) {
  const fs::path dir = fs::path(assets_dir()) / "traces" / "hta-dlrm";
  const fs::path r0 = dir / "rank-0.json.gz", r1 = dir / "rank-1.json.gz";
  if (!fs::exists(r0) || !fs::exists(r1)) {
    std::printf("\n== 8-12. a real trace: skipped (%s not found)\n", dir.c_str());
    return;
  }
  const std::string f = quote(file);
  must(step("8. import a real 2-rank trace (HTA's DLRM samples, " + dir.string() + ")",
            braid + " import " + quote(r0.string()) + " " + quote(r1.string()) +
                " --append -q -o " + f),
       "import");
  const int64_t run = last_run(file, RunKind::Imported);
  must(step("9. lift its profiler step 552 into a schedule",
            braid + " lift " + f + " --run " + std::to_string(run) + " --step 552"),
       "lift");
  must(step("10. fuse the lifted schedule", braid + " fuse " + f), "fuse");
  // The data check runs on exact scaled copies of the schedules (the trace's sizes need
  // gigabytes); with opaque compute it compares the collectives' own buffers.
  ab_sim_and_mpi(braid, f, mpi ? 2 : 0, "real trace",
                 "11. A/B on the simulator, priced as `braid analyze` calibrated the trace",
                 "12. A/B on real processes (2 MPI ranks, compute as timed busy work)");
}

// A real job whose findings are facts: the project's 4-rank tensor-parallel MLP with its PyTorch
// execution traces (assets/traces/et-tp), imported with --et as another run of the demo file,
// lifted with data flow on the step the traces cover, fused (tp-sp proven) and A/B'd with the
// data check on the sim and, when mpirun is present, on 4 MPI ranks.
void execution_trace_loop(const std::string& braid, const std::string& file, bool mpi) {
  const fs::path dir = fs::path(assets_dir()) / "traces" / "et-tp";
  std::string traces, ets;
  for (int r = 0; r < 4; ++r) {
    const fs::path t = dir / ("rank-" + std::to_string(r) + ".json.gz");
    const fs::path e = dir / ("rank-" + std::to_string(r) + ".et.json.gz");
    if (!fs::exists(t) || !fs::exists(e)) {
      std::printf("\n== 13-17. a job with execution traces: skipped (%s not found)\n", dir.c_str());
      return;
    }
    traces += " " + quote(t.string());
    ets += " " + quote(e.string());
  }
  const std::string f = quote(file);
  must(step("13. import a real 4-rank gloo job with its execution traces (" + dir.string() + ")",
            braid + " import" + traces + " --et" + ets + " --append -o " + f),
       "import --et");
  const int64_t run = last_run(file, RunKind::Imported);
  must(step("14. lift it with the data flow of its execution traces",
            braid + " lift " + f + " --run " + std::to_string(run)),
       "lift (execution traces)");
  must(step("15. fuse: rules applied where the data flow proves them", braid + " fuse " + f),
       "fuse (execution traces)");
  ab_sim_and_mpi(braid, f, mpi ? 4 : 0, "execution traces",
                 "16. A/B on the simulator, with the data check of the fused pair",
                 "17. A/B on real processes (4 MPI ranks)");
}

}  // namespace

void register_demo(CLI::App& app, Action& run) {
  struct Opts {
    std::string out = "demo.braid", picture = "demo-compare.png", preset = "tp-sp";
    int ranks = 4;
    bool no_mpi = false, no_picture = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "demo",
      "Run the whole pipeline on its built-in default: synthesize a Chimera case (TP+SP on 4\n"
      "ranks), fuse it, A/B baseline vs fused on the sim backend and, when mpirun is present,\n"
      "on the mpi backend (data check + timing), analyze the simulated baseline, store\n"
      "everything in one .braid file and write the before/after picture (braid-view). Then the\n"
      "same loop on a real 2-rank trace shipped in assets/traces: import, lift, fuse, A/B;\n"
      "and on a real 4-rank job with its PyTorch execution traces (assets/traces/et-tp), whose\n"
      "lift has data flow, so its rewrites are proven and its A/B checks the fused pair's data.");
  cmd->add_option("-o,--output", o->out, "Output .braid file (replaced at the end)")
      ->capture_default_str();
  cmd->add_option("--picture", o->picture, "Before/after PNG (compare view)")->capture_default_str();
  cmd->add_option("--preset", o->preset, "Synthesizer preset (braid synth --list-presets)")
      ->capture_default_str();
  cmd->add_option("--ranks", o->ranks, "Ranks for the mpi replay (the preset's TP degree)")
      ->capture_default_str();
  cmd->add_flag("--no-mpi", o->no_mpi, "Skip the mpi backend");
  cmd->add_flag("--no-picture", o->no_picture, "Skip the screenshot");
  cmd->callback([o, &run] {
    run = [o] {
      const std::string braid = quote(self_exe());
      fs::path out = fs::absolute(o->out);
      fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".tmp-" +
                                          std::to_string(getpid()));
      std::error_code ec;
      fs::remove(tmp, ec);
      register_temp_for_cleanup(tmp.string());
      const std::string f = quote(tmp.string());
      // Small shapes keep the CPU replay to seconds; the predicted savings scale with them.
      const std::string shape = " --tp " + std::to_string(o->ranks) +
                                " --layers 2 --hidden 256 --seq 256 --heads 8 --micro-batch 1";

      try {
      must(step("1. synthesize one training step (" + o->preset + ")",
                braid + " synth --preset " + o->preset + shape + " -o " + f),
           "synth");
      must(step("2. find and apply the communication rewrites", braid + " fuse " + f), "fuse");
      must(step("3. A/B on the simulator (H100 NVLink cost model)",
                braid + " ab " + f + " --backend sim"),
           "ab sim");
      auto [base, fused] = baseline_and_fused(tmp.string());
      int64_t base_run = last_run(tmp.string(), RunKind::Simulated, base);
      int64_t fused_run = last_run(tmp.string(), RunKind::Simulated, fused);
      if (base_run >= 0)
        must(step("4. analyze the simulated baseline",
                  braid + " analyze " + f + " --run " + std::to_string(base_run)),
             "analyze");
      bool mpi = !o->no_mpi && on_path("mpirun");
      if (mpi) {
        const std::string np = "mpirun --oversubscribe --allow-run-as-root -np " +
                               std::to_string(o->ranks) + " ";
        // The prediction for real processes comes from the sim calibrated on this host (links
        // and compute overhead); without it the built-in cpu-shm profile is used.
        fs::path cal = out.parent_path() / ("." + out.filename().string() + ".cal-" +
                                            std::to_string(getpid()) + ".json");
        bool calibrated = step("5. calibrate the simulator on this host (" +
                                   std::to_string(o->ranks) + " MPI ranks)",
                               np + braid + " replay --calibrate --backend mpi -o " +
                                   quote(cal.string())) == 0 &&
                          fs::exists(cal);
        if (!calibrated)
          std::printf("(calibration failed: predicting with the built-in cpu-shm profile)\n");
        int rc = step("6. A/B on real processes (" + std::to_string(o->ranks) + " MPI ranks)",
                      np + braid + " ab " + f + " --backend mpi --steps 5" +
                          (calibrated ? " --profile " + quote(cal.string()) : ""));
        fs::remove(cal, ec);
        must(rc, "ab mpi");
        base_run = std::max(base_run, last_run(tmp.string(), RunKind::Replayed, base));
        fused_run = std::max(fused_run, last_run(tmp.string(), RunKind::Replayed, fused));
      } else {
        std::printf("\n== 5-6. calibration and A/B on real processes: skipped (%s)\n",
                    o->no_mpi ? "--no-mpi" : "mpirun not found; install openmpi-bin");
      }
      fs::path viewer = fs::path(self_exe()).parent_path() / "view" / "braid-view";
      if (!o->no_picture && fs::exists(viewer) && base_run >= 0 && fused_run >= 0) {
        bool display = std::getenv("DISPLAY") && *std::getenv("DISPLAY");
        std::string prefix = display ? "" : (on_path("xvfb-run") ? "xvfb-run -a " : "");
        if (!display && prefix.empty()) {
          std::printf("\n== 7. before/after picture: skipped (no display and no xvfb-run)\n");
        } else {
          int rc = step("7. before/after picture",
                        prefix + quote(viewer.string()) + " " + f + " --screenshot " +
                            quote(fs::absolute(o->picture).string()) + " --size 1600x900 --compare " +
                            std::to_string(base_run) + " " + std::to_string(fused_run));
          if (rc != 0) std::printf("(the picture failed; the .braid file is complete)\n");
        }
      } else if (!o->no_picture) {
        std::printf("\n== 7. before/after picture: skipped (braid-view was not built)\n");
      }
      real_trace_loop(braid, tmp.string(), mpi);
      execution_trace_loop(braid, tmp.string(), mpi);
      } catch (...) {
        fs::remove(tmp, ec);
        unregister_temp_for_cleanup();
        throw;
      }
      fs::rename(tmp, out, ec);
      if (ec) throw Error(ErrorCode::Io, out.string() + ": cannot write (" + ec.message() + ")");
      unregister_temp_for_cleanup();
      std::printf("\nbraid demo: everything is in %s", out.c_str());
      if (!o->no_picture && fs::exists(o->picture)) std::printf(", the picture in %s", o->picture.c_str());
      std::printf("\nopen it with: braid-view %s\n", out.c_str());
      return 0;
    };
  });
}

static const VerbRegistration kRegister{90, "demo", register_demo};

}  // namespace braid::cli

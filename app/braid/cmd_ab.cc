// braid ab: replay a baseline and a fused schedule interleaved, with the data check.
#include <cstdio>
#include <optional>

#include "app/braid/cli.h"
#include "fusion/schedule_store.h"
#include "replay/ab.h"
#include "replay/executor.h"
#include "replay/fidelity.h"
#include "replay/host_calibration.h"
#include "replay/inputs.h"
#include "replay/lifted.h"
#include "replay/store_run.h"
#include "trace/error.h"
#include "trace/json.h"

namespace braid::cli {

namespace {

struct AbOpts {
  std::string input;
  int64_t baseline = -1, fused = -1;
  std::string backend = "sim";
  int steps = 10;
  int warmup = 2;
  double compute_scale = 1.0;
  std::string compute = "auto";
  std::string profile;
  bool no_data_check = false;
  bool no_store = false, json = false;
  double timeout_s = 60;
  int64_t max_buffer_mb = 1024;
  int64_t max_check_mb = 1024;
};

int run_ab_verb(const AbOpts& o) {
  if (o.steps < 1) throw Error(ErrorCode::Usage, "--steps must be at least 1");
  // The simulator works on rank classes as they are stored; the data check and the real
  // backends need every rank.
  auto [base, fused] =
      replay::load_ab_pair(o.input, o.baseline, o.fused, o.backend == "sim" && o.no_data_check);
  const int nranks = static_cast<int>(base.schedule.ranks.size());
  if (fused.schedule.ranks.size() != base.schedule.ranks.size())
    throw Error(ErrorCode::BadFormat, "schedules " + std::to_string(base.stored.id) + " and " +
                                          std::to_string(fused.stored.id) +
                                          " have different rank counts");
  if (std::string why = replay::launch_problem(o.backend, nranks); !why.empty())
    throw Error(ErrorCode::Usage, why);
  const std::string profile_name =
      o.profile.empty() ? (o.backend == "mpi" ? "cpu-shm" : "h100-nvlink") : o.profile;
  replay::SimProfile sp = replay::load_sim_profile(profile_name);
  // A pair lifted from a run of this file (braid lift, then fuse): the sim prices collectives as
  // `braid analyze` calibrated them on that run unless --profile, and the baseline's replay is
  // compared with the run (fidelity).
  const fusion::LiftSource lifted = base.schedule.lifted;
  const replay::LiftedModel lm = replay::replay_cost_model(
      o.input, lifted, o.backend, !o.profile.empty(), profile_name, sp.profile);
  const analysis::CostModel& model = lm.model;
  const std::string& model_note = lm.note;
  auto ex = replay::make_executor(o.backend, model, sp.sim_options());
  return replay::run_guarded(*ex, [&] {
    replay::AbOptions ao;
    ao.steps = o.steps;
    ao.warmup = o.warmup;
    ao.replay.compute = o.compute == "spin"    ? replay::ComputeMode::Spin
                        : o.compute == "sleep" ? replay::ComputeMode::Sleep
                                               : replay::ComputeMode::Auto;
    ao.replay.compute_scale = o.compute_scale;
    ao.replay.timeout_ns = static_cast<Ns>(o.timeout_s * 1e9);
    ao.replay.max_buffer_bytes = o.max_buffer_mb << 20;
    ao.replay.max_check_bytes = o.max_check_mb << 20;
    ao.data_check = !o.no_data_check;
    ao.model = model;
    ao.sim = sp.sim_options();
    replay::AbReport rep = replay::run_ab(*ex, base.schedule, fused.schedule, ao);
    if (!ex->reporting()) return rep.data_ok() ? 0 : 1;

    std::optional<replay::Fidelity> fid;
    if (lifted.run >= 0)
      fid = replay::fidelity(o.input, lifted.run, rep.baseline_run, lifted, &base.schedule);
    // `braid fuse`'s prediction for this fused schedule: its simulated step saving on the
    // profile it fused for (the per-finding estimates are local detail, not summed here).
    const auto pred = fusion::stored_prediction(o.input, fused.stored.id);
    std::vector<int64_t> stored;
    if (!o.no_store) {
      replay::RunDescription db{o.input, "ab baseline (schedule " + std::to_string(base.stored.id) + ") on " + o.backend, base.stored.id};
      replay::RunDescription df{o.input, "ab fused (schedule " + std::to_string(fused.stored.id) + ") on " + o.backend, fused.stored.id};
      stored = replay::store_runs(o.input, {&base.schedule, &fused.schedule},
                                  {&rep.baseline_run, &rep.fused_run}, {db, df});
    }
    if (o.json) {
      json::Writer w(json::Writer::Style::Spaced);
      w.begin_object(true);
      w.field("baseline_schedule", base.stored.id).field("fused_schedule", fused.stored.id);
      w.field("ranks", nranks).field("cost_model", model_note);
      rep.write_fields(w);
      w.key("fidelity");
      if (fid)
        fid->write_json(w);
      else
        w.null();
      w.key("fuse_prediction");
      if (pred)
        w.begin_object()
            .field("profile", pred->profile)
            .field("saving_ns", pred->saving_ns)
            .end_object();
      else
        w.null();
      w.array_of("stored_runs", stored);
      w.end_object();
      std::printf("%s\n", w.str().c_str());
    } else {
      std::printf("braid ab: baseline schedule %lld '%s' vs fused schedule %lld '%s', %d ranks\n",
                  static_cast<long long>(base.stored.id), base.schedule.name.c_str(),
                  static_cast<long long>(fused.stored.id), fused.schedule.name.c_str(), nranks);
      if (!model_note.empty()) print_wrapped("", model_note);
      for (const std::string& l : rep.lines()) print_wrapped("", l);
      if (fid) {
        auto lines = fid->lines();
        for (size_t i = 0; i < lines.size(); ++i)
          print_wrapped("", (i == 0 ? "baseline " : "") + lines[i]);
      }
      if (pred)
        std::printf(
            "braid fuse's predicted saving (simulated on profile %s, schedule %lld): %.3f ms\n",
            pred->profile.c_str(), static_cast<long long>(fused.stored.id),
            static_cast<double>(pred->saving_ns) * 1e-6);
      if (!stored.empty())
        std::printf("stored as runs %lld (baseline) and %lld (fused) in %s\n",
                    static_cast<long long>(stored[0]), static_cast<long long>(stored[1]),
                    o.input.c_str());
    }
    if (!rep.data_ok())
      throw Error(ErrorCode::Internal, "data check failed: the fused schedule does not preserve "
                                       "the baseline's outputs (mismatches listed above)");
    return 0;
  });
}

}  // namespace

void register_ab(CLI::App& app, Action& run) {
  auto o = std::make_shared<AbOpts>();
  auto* cmd = app.add_subcommand(
      "ab",
      "A/B replay: the baseline and a fused schedule, interleaved (A B A B ...) after warm-up, on\n"
      "one backend; per-step medians, the speedup with its spread, the predicted (sim) versus\n"
      "measured saving, and the data check: both run on the same deterministic int64 inputs and\n"
      "every buffer the rewrite preserves is compared, and each against the reference\n"
      "interpreter; mismatches are listed by rank, buffer and index and make the exit status 1.\n"
      "mpi/nccl run under mpirun -np N. Both runs are stored in the .braid file.");
  cmd->add_option("input", o->input, ".braid file with the schedules")->required();
  cmd->add_option("--baseline", o->baseline, "Baseline schedule id (default: the fused one's parent)");
  cmd->add_option("--fused", o->fused, "Fused schedule id (default: the newest schedule with a parent)");
  cmd->add_option("--backend", o->backend, "sim, mpi or nccl")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Measured steps of each schedule")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Unmeasured steps of each first")->capture_default_str();
  cmd->add_option("--compute-scale", o->compute_scale,
                  "Multiply compute and delay durations by this")->capture_default_str();
  cmd->add_option("--compute", o->compute, "mpi: auto, spin or sleep (see braid replay)")
      ->check(CLI::IsMember({"auto", "spin", "sleep"}))->capture_default_str();
  cmd->add_option("--profile", o->profile,
                  "Cost model profile for the prediction (built-in name or JSON, e.g. a "
                  "`braid replay --calibrate` output); default cpu-shm for mpi, else h100-nvlink");
  cmd->add_flag("--no-data-check", o->no_data_check, "Skip the data check");
  cmd->add_flag("--no-store", o->no_store, "Do not store the two runs");
  cmd->add_flag("--json", o->json,
                "Print the result as one JSON object (docs/cli.md, \"JSON output\"): steps, "
                "medians, speedup, prediction, data check, assumptions, fidelity");
  cmd->add_option("--timeout", o->timeout_s,
                  "mpi/nccl: end the job when one op waits longer than this (seconds)")->capture_default_str();
  cmd->add_option("--max-buffer-mb", o->max_buffer_mb,
                  "mpi/nccl: refuse schedules needing more buffer memory per rank")->capture_default_str();
  cmd->add_option("--max-check-mb", o->max_check_mb,
                  "Int64 data the data check may hold per process; over it the check runs on the "
                  "schedules' exact scaled copies (docs/replay.md), and is refused with the size "
                  "it needs when even those do not fit")
      ->capture_default_str();
  cmd->callback([o, &run] { run = [o] { return run_ab_verb(*o); }; });
}

static const VerbRegistration kRegister{55, "ab", register_ab};

}  // namespace braid::cli

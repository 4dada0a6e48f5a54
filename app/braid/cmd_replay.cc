// braid replay: run a schedule on a backend (sim, mpi, nccl) and store the run in the .braid.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "app/braid/cli.h"
#include "fusion/pipeline.h"
#include "replay/ab.h"
#include "replay/executor.h"
#include "replay/fidelity.h"
#include "replay/host_calibration.h"
#include "replay/inputs.h"
#include "replay/lifted.h"
#include "replay/store_run.h"
#include "trace/error.h"
#include "trace/json.h"
#include "trace/output_file.h"

namespace braid::cli {

namespace {

struct ReplayOpts {
  std::string input;
  int64_t schedule = -1;
  std::string backend = "sim";
  int steps = 5;
  int warmup = 1;
  double compute_scale = 1.0;
  std::string compute = "auto";
  std::string profile;
  bool check = false;
  int64_t original = -1;
  bool no_store = false, json = false;
  double timeout_s = 60;
  int64_t max_buffer_mb = 1024;
  int64_t max_check_mb = 1024;
  bool calibrate = false;
  bool calibrate_first = false;
  bool share_cores = false;
  std::string output;
};

replay::ComputeMode compute_mode(const std::string& s) {
  if (s == "spin") return replay::ComputeMode::Spin;
  if (s == "sleep") return replay::ComputeMode::Sleep;
  return replay::ComputeMode::Auto;
}

double ms(double ns) { return ns * 1e-6; }

int run_calibration(const ReplayOpts& o) {
  if (o.backend == "sim")
    throw Error(ErrorCode::Usage,
                "--calibrate measures a real backend: use --backend mpi or nccl "
                "(under mpirun)");
  if (o.output.empty()) throw Error(ErrorCode::Usage, "--calibrate needs -o FILE.json");
  auto ex = replay::make_executor(o.backend);
  return replay::run_guarded(*ex, [&] {
    const int n = ex->process_count();
    if (n < 2)
      throw Error(ErrorCode::Usage,
                  "--calibrate needs at least 2 processes: mpirun -np N braid "
                  "replay --calibrate ...");
    replay::CalibrationOptions co;
    co.base_profile =
        o.profile.empty() ? (o.backend == "mpi" ? "cpu-shm" : "h100-nvlink") : o.profile;
    co.replay.compute = compute_mode(o.compute);
    co.replay.timeout_ns = static_cast<Ns>(o.timeout_s * 1e9);
    co.share_cores = o.share_cores;
    replay::Calibration cal = replay::calibrate(*ex, n, co);
    if (!ex->reporting()) return 0;
    AtomicOutputFile out(o.output);
    const std::string json = cal.to_json();
    BufferedOut w(out.fd(), out.path());
    w.put(json);
    w.flush();
    out.commit();
    std::printf(
        "calibrated %s on %d ranks: α %.0f ns per step, %.3f GB/s; a compute op of d costs "
        "%.2f·d + %lld ns (%.2f·d + %lld ns below %lld us); mean error on the probes and "
        "the workload %.1f%%\n",
        o.backend.c_str(), n, cal.profile.intra_node.latency_ns,
        cal.profile.intra_node.bandwidth_gbps, cal.compute_slowdown,
        static_cast<long long>(cal.compute_overhead_ns), cal.short_compute_slowdown,
        static_cast<long long>(cal.short_compute_overhead_ns),
        static_cast<long long>(replay::kShortestSleepNs / 1000), 100 * cal.mean_rel_error);
    if (cal.sibling_stagger > 0)
      std::printf(
          "sibling groups (one collective on each of a dimension's communicators) end "
          "staggered by ±%.0f%% of their cost\n",
          100 * cal.sibling_stagger);
    if (o.share_cores && cal.host_cores > 0)
      std::printf(
          "sharing the cores: %d ranks pinned round-robin on %d cores; the links are per "
          "dedicated core and the sim shares the cores between collectives\n",
          n, cal.host_cores);
    else if (o.share_cores)
      std::printf(
          "sharing the cores: nothing to share (not more ranks than cores on one host); "
          "the links are per communicator size\n");
    for (const auto& s : cal.samples)
      std::printf("  %-36s measured %9.3f ms  fitted %9.3f ms\n", s.probe.c_str(),
                  ms(static_cast<double>(s.measured_ns)), ms(static_cast<double>(s.predicted_ns)));
    std::printf("wrote %s (use it as --profile)\n", o.output.c_str());
    return 0;
  });
}

// What one replay measured, said by the table or by --json.
struct ReplayReport {
  std::string model_note, profile;  // the cost model's note; the profile the sim priced with
  std::vector<double> steps;        // each measured step's time
  std::vector<int64_t> per_rank;    // each rank's median step time
  double sim = -1;                  // the sim's prediction on a real backend, -1 on sim
  std::optional<replay::Fidelity> fid;
  replay::DataCheck dc;
  replay::ReplayResult res;
  int64_t stored = -1;  // the run stored, -1 when none
};

void print_replay_json(const ReplayOpts& o, const replay::ScheduleInput& in,
                       const ReplayReport& rep) {
  const fusion::Schedule& s = in.schedule;
  json::Writer w(json::Writer::Style::Spaced);
  w.begin_object(true);
  w.field("schedule", in.stored.id).field("name", s.name).field("backend", o.backend);
  w.field("ranks", static_cast<int64_t>(s.ranks.size())).field("cost_model", rep.model_note);
  w.array_of("assumptions", fusion::assumed_rewrites(s));
  std::vector<int64_t> step_ns(rep.steps.begin(), rep.steps.end());
  w.array_of("step_ns", step_ns);
  w.field("median_ns", static_cast<int64_t>(replay::quantile(rep.steps, 0.5)));
  w.array_of("rank_median_ns", rep.per_rank);
  w.key("sim_prediction_ns");
  if (rep.sim >= 0)
    w.value(static_cast<int64_t>(rep.sim));
  else
    w.null();
  w.key("fidelity");
  if (rep.fid)
    rep.fid->write_json(w);
  else
    w.null();
  w.key("data_check");
  if (o.check)
    rep.dc.write_json(w);
  else
    w.null();
  w.field("stored_run", rep.stored);
  w.end_object();
  std::printf("%s\n", w.str().c_str());
}

void print_replay_text(const ReplayOpts& o, const replay::ScheduleInput& in,
                       const ReplayReport& rep) {
  const fusion::Schedule& s = in.schedule;
  const int nranks = static_cast<int>(s.ranks.size());
  const std::vector<double>& steps = rep.steps;
  std::string what = in.stored.id >= 0
                         ? "schedule " + std::to_string(in.stored.id) + " '" + s.name + "'"
                         : "'" + s.name + "' (" + o.input + ")";
  std::printf("braid replay: %s, %d ranks, on %s: %d measured steps after %d warm-up\n",
              what.c_str(), nranks, o.backend.c_str(), o.steps, o.warmup);
  if (!rep.model_note.empty()) print_wrapped("", rep.model_note);
  for (const std::string& a : fusion::assumed_rewrites(s))
    print_wrapped("", "built under an assumption (braid fuse --assume): " + a);
  std::printf("step time: median %.3f ms, min %.3f ms, max %.3f ms\n",
              ms(replay::quantile(steps, 0.5)), ms(replay::quantile(steps, 0)),
              ms(replay::quantile(steps, 1)));
  if (o.backend == "sim" && !rep.res.steps.empty())
    std::printf("simulated step: %lld ns\n", static_cast<long long>(rep.res.steps[0].step_ns()));
  std::string per;
  for (int32_t r = 0; r < nranks; ++r) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%d: %.3f", r ? ", " : "", r,
                  ms(static_cast<double>(rep.per_rank[r])));
    per += buf;
    if (r == 31 && nranks > 33) {
      per += ", ...";
      break;
    }
  }
  print_wrapped("", "per rank (median ms): " + per);
  if (rep.sim >= 0) {
    const double med = replay::quantile(steps, 0.5);
    std::printf("sim prediction (profile %s): %.3f ms, measured/predicted %.3f\n",
                rep.profile.c_str(), ms(rep.sim), rep.sim > 0 ? med / rep.sim : 0.0);
  }
  if (rep.fid)
    for (const std::string& l : rep.fid->lines()) print_wrapped("", l);
  if (o.check)
    for (const std::string& l : rep.dc.lines("reference interpreter", "replay"))
      print_wrapped("", l);
  if (rep.stored >= 0)
    std::printf("stored as run %lld (%s) in %s\n", static_cast<long long>(rep.stored),
                std::string(to_string(rep.res.kind)).c_str(), o.input.c_str());
}

int run_replay(const ReplayOpts& o) {
  if (o.calibrate) return run_calibration(o);
  if (o.input.empty()) throw Error(ErrorCode::Usage, "braid replay needs an input file");
  if (o.steps < 1) throw Error(ErrorCode::Usage, "--steps must be at least 1");
  replay::ScheduleInput in = replay::load_schedule_input(o.input, o.schedule);
  const fusion::Schedule& s = in.schedule;
  const int nranks = static_cast<int>(s.ranks.size());
  if (std::string why = replay::launch_problem(o.backend, nranks); !why.empty())
    throw Error(ErrorCode::Usage, why);
  const std::string profile_name =
      o.profile.empty() ? (o.backend == "mpi" ? "cpu-shm" : "h100-nvlink") : o.profile;
  if (o.calibrate_first && o.backend == "sim")
    throw Error(ErrorCode::Usage,
                "--calibrate-first measures a real backend: use --backend mpi or nccl");
  replay::SimProfile sp = replay::load_sim_profile(profile_name);
  // A schedule lifted from a run of this file: the sim prices its collectives as `braid
  // analyze` calibrated them on that run (unless --profile), and the run is the original the
  // fidelity compares with (unless --original).
  const fusion::LiftSource lifted = in.in_store ? s.lifted : fusion::LiftSource{};
  const replay::LiftedModel lm = replay::replay_cost_model(
      o.input, lifted, o.backend, !o.profile.empty(), profile_name, sp.profile);
  const int64_t original = o.original >= 0 ? o.original : in.in_store ? lifted.run : -1;
  auto ex = replay::make_executor(o.backend, lm.model, sp.sim_options());
  return replay::run_guarded(*ex, [&] {
    if (o.calibrate_first) {
      // Calibrate in this job, on the ranks that then replay: the prediction compares with a
      // measurement made in the same placement and host state.
      replay::CalibrationOptions co;
      co.base_profile = profile_name;
      co.replay.compute = compute_mode(o.compute);
      co.replay.timeout_ns = static_cast<Ns>(o.timeout_s * 1e9);
      co.share_cores = o.share_cores;
      replay::Calibration cal = replay::calibrate(*ex, nranks, co);
      if (ex->reporting()) {
        sp.profile = cal.profile;
        sp.sim = cal.sim_options();
        sp.calibrated = true;
      }
    }
    const analysis::CostModel model(sp.profile);
    replay::ReplayOptions ro;
    ro.compute = compute_mode(o.compute);
    ro.compute_scale = o.compute_scale;
    ro.timeout_ns = static_cast<Ns>(o.timeout_s * 1e9);
    ro.max_buffer_bytes = o.max_buffer_mb << 20;
    ro.max_check_bytes = o.max_check_mb << 20;
    ReplayReport rep;
    rep.model_note = lm.note;
    rep.profile = sp.profile.name;
    // The data check first: a check that cannot fit in memory is refused before the replay.
    if (o.check) rep.dc = replay::check_against_interpreter(*ex, s, ro);
    {
      auto prep = ex->prepare(s, ro);
      for (int i = 0; i < o.warmup; ++i) prep->run_step(false);
      for (int i = 0; i < o.steps; ++i) prep->run_step(true);
      rep.res = prep->collect();
    }
    if (!ex->reporting()) return rep.dc.ok() ? 0 : 1;

    for (const auto& st : rep.res.steps) rep.steps.push_back(static_cast<double>(st.step_ns()));
    for (int32_t r = 0; r < nranks; ++r) {
      std::vector<double> v;
      for (const auto& st : rep.res.steps) v.push_back(static_cast<double>(st.rank_ns(r)));
      rep.per_rank.push_back(static_cast<int64_t>(replay::quantile(v, 0.5)));
    }
    if (o.backend != "sim")
      rep.sim = static_cast<double>(
          replay::simulate(s, model, sp.sim_options(o.compute_scale)).step_ns());
    if (original >= 0) {
      if (!in.in_store)
        throw Error(ErrorCode::Usage, "--original names a run of a .braid file; the input is JSON");
      rep.fid = replay::fidelity(o.input, original, rep.res, lifted, &s);
    }
    if (in.in_store && !o.no_store) {
      replay::RunDescription d;
      d.source = o.input;
      d.label = "replay of schedule " + std::to_string(in.stored.id) + " on " + o.backend;
      d.schedule_id = in.stored.id;
      rep.stored = replay::store_runs(o.input, {&s}, {&rep.res}, {d})[0];
    }
    if (o.json)
      print_replay_json(o, in, rep);
    else
      print_replay_text(o, in, rep);
    if (!rep.dc.ok())
      throw Error(ErrorCode::Internal, "the replay's data differs from the reference interpreter");
    return 0;
  });
}

}  // namespace

void register_replay(CLI::App& app, Action& run) {
  auto o = std::make_shared<ReplayOpts>();
  std::string backends;
  for (const std::string& b : replay::available_backends())
    backends += (backends.empty() ? "" : ", ") + b;
  auto* cmd = app.add_subcommand(
      "replay",
      "Replay a schedule on a backend and store the run (kind replayed or simulated) in the "
      ".braid\n"
      "file. Backends: sim (discrete-event simulation with the cost model), mpi (one process per\n"
      "rank on CPUs: mpirun -np N braid replay ... --backend mpi), nccl (one process per GPU).\n"
      "This build has: " +
          backends +
          ".\n"
          "--calibrate fits the sim's links (per collective kind, and per communicator size from "
          "a\n"
          "calibration workload) and compute overheads to the backend on this host:\n"
          "  mpirun -np 4 braid replay --calibrate --backend mpi -o cal.json; then --profile "
          "cal.json.");
  cmd->add_option("input", o->input, ".braid file (a stored schedule) or a schedule JSON file");
  cmd->add_option("--schedule", o->schedule, "Stored schedule id (default: the newest)");
  cmd->add_option("--backend", o->backend, "sim, mpi or nccl")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Measured steps")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Unmeasured steps first")->capture_default_str();
  cmd->add_option("--compute-scale", o->compute_scale,
                  "Multiply compute and delay durations by this")
      ->capture_default_str();
  cmd->add_option("--compute", o->compute,
                  "mpi: spend compute time spinning, sleeping, or auto (spin unless the host is "
                  "oversubscribed)")
      ->check(CLI::IsMember({"auto", "spin", "sleep"}))
      ->capture_default_str();
  cmd->add_option("--profile", o->profile,
                  "Cost model profile for the sim and predictions: built-in name or JSON (a "
                  "--calibrate output); default cpu-shm for mpi, else h100-nvlink");
  cmd->add_flag("--check", o->check,
                "Also run the data check: replay on int64 data and compare every rank's outputs "
                "with the reference interpreter");
  cmd->add_option("--original", o->original,
                  "Run id of a captured/imported run to compare with: print replayed vs original "
                  "step time per rank (default for a schedule made by `braid lift`: its run)");
  cmd->add_flag("--no-store", o->no_store, "Do not store the run in the .braid file");
  cmd->add_flag("--json", o->json,
                "Print the result as one JSON object (docs/cli.md, \"JSON output\"): steps, "
                "per-rank medians, prediction, fidelity, data check, assumptions");
  cmd->add_option("--timeout", o->timeout_s,
                  "mpi/nccl: end the job when one op waits longer than this (seconds)")
      ->capture_default_str();
  cmd->add_option("--max-buffer-mb", o->max_buffer_mb,
                  "mpi/nccl: refuse schedules needing more buffer memory per rank")
      ->capture_default_str();
  cmd->add_option("--max-check-mb", o->max_check_mb,
                  "--check: int64 data the check may hold per process; over it the check runs on "
                  "the schedule's exact scaled copy (docs/replay.md), and is refused with the "
                  "size it needs when even that does not fit")
      ->capture_default_str();
  cmd->add_flag("--calibrate", o->calibrate, "Calibrate the sim against --backend (see above)");
  cmd->add_flag("--calibrate-first", o->calibrate_first,
                "mpi/nccl: calibrate in this job before the replay and predict with that (instead "
                "of --profile's calibration)");
  cmd->add_flag("--share-cores", o->share_cores,
                "--calibrate/--calibrate-first on an oversubscribed host: probe every communicator "
                "size alone and let the sim share the pinned cores between concurrent collectives "
                "(processor sharing; docs/replay.md)");
  cmd->add_option("-o,--output", o->output, "--calibrate: profile JSON to write");
  cmd->callback([o, &run] { run = [o] { return run_replay(*o); }; });
}

static const VerbRegistration kRegister{50, "replay", register_replay};

}  // namespace braid::cli

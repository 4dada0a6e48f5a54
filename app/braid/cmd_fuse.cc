// braid fuse: runs the fusion passes on a stored schedule, stores the fused schedule (with its
// parent and the passes run) and every finding as an opportunity, in one transaction.
#include <cstdio>
#include <memory>

#include "app/braid/cli.h"
#include "app/braid/lift_run.h"
#include "fusion/pass.h"
#include "fusion/pipeline.h"
#include "fusion/schedule_store.h"
#include "fusion/symmetry.h"
#include "replay/fuse.h"
#include "replay/host_calibration.h"
#include "trace/error.h"
#include "trace/json.h"
#include "trace/reader.h"

namespace braid::cli {

namespace {

// The fixed columns of a finding's row: pass, where, status, local ns, saving bytes.
std::string fixed_columns(const std::string& pass, const std::string& where,
                          std::string_view status, int64_t ns, int64_t bytes) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-10s %-16s %-8s %14lld %14lld  ", pass.c_str(), where.c_str(),
                std::string(status).c_str(), static_cast<long long>(ns),
                static_cast<long long>(bytes));
  return buf;
}

std::string where(const fusion::Finding& f) {
  std::string t = "ranks ";
  for (size_t i = 0; i < f.ranks.size() && i < 8; ++i) t += (i ? "," : "") + std::to_string(f.ranks[i]);
  if (f.ranks.size() > 8) t += ",...";
  return t;
}

// A file with a run and no schedule: lift the run first (braid lift), and say so.
// With --json the note goes to stderr, keeping stdout one JSON document.
int64_t lift_first(const std::string& file, bool dry, bool json) {
  bool has_run = false;
  {
    TraceReader reader(file);
    has_run = !reader.runs().empty();
  }
  if (!has_run)
    throw Error(ErrorCode::NotFound,
                file +
                    " holds no schedule and no run (create a schedule with `braid synth -o`, "
                    "or import a trace with `braid import` and lift it with `braid lift`)");
  if (dry)
    throw Error(ErrorCode::Usage, file +
                                      " holds no schedule: --dry-run stores nothing, so lift "
                                      "its run first with `braid lift`");
  fusion::LiftedRun l = fusion::lift_into_file(file, -1);
  FILE* out = json ? stderr : stdout;
  std::fprintf(out, "%s holds no schedule: lifted its run first (as `braid lift` does)\n",
               file.c_str());
  print_lifted(file, l, out);
  std::fprintf(out, "\n");
  return l.schedule_id;
}

struct FuseOpts {
  std::string file, passes, assume, profile = "h100-nvlink";
  int64_t schedule = -1;
  bool all = false, list = false, dry = false, json = false, once = false;
};

// Comma-separated pass names, each checked (`all` too where allowed).
std::vector<std::string> pass_list(const std::string& list, const char* flag, bool allow_all) {
  std::vector<std::string> v;
  for (size_t b = 0; !list.empty() && b <= list.size();) {
    size_t e = list.find(',', b);
    if (e == std::string::npos) e = list.size();
    std::string n = list.substr(b, e - b);
    b = e + 1;
    if (n.empty()) continue;
    if (!(allow_all && n == "all") && !fusion::find_pass(n)) {
      std::string known = allow_all ? "all" : "";
      for (const auto& p : fusion::all_passes())
        known += (known.empty() ? "" : ", ") + std::string(p->name());
      throw Error(ErrorCode::Usage, (allow_all ? std::string(flag) + ": " : std::string()) +
                                        "unknown pass '" + n + "' (passes: " + known + ")");
    }
    v.push_back(n);
  }
  return v;
}

// The pipeline's options from the flags; passes named in --assume whose advice carries no
// rewrite are said once on stderr (nothing of theirs can be applied under an assumption).
fusion::PipelineOptions pipeline_options(const FuseOpts* o) {
  fusion::PipelineOptions opt;
  opt.fixed_point = !o->once;
  opt.passes = pass_list(o->passes, "--passes", false);
  opt.assume = pass_list(o->assume, "--assume", true);
  if (!o->assume.empty() && opt.assume.empty())
    throw Error(ErrorCode::Usage, "--assume: give all or pass names");
  std::string norewrite, rewriting;
  for (const auto& p : fusion::all_passes())
    if (p->rewrites_advice()) rewriting += (rewriting.empty() ? "" : ", ") + std::string(p->name());
  for (const std::string& n : opt.assume)
    if (n != "all" && !fusion::find_pass(n)->rewrites_advice())
      norewrite += (norewrite.empty() ? "" : ", ") + n;
  if (!norewrite.empty())
    std::fprintf(stderr,
                 "braid fuse: --assume %s: the advice of %s has no rewrite to apply under its "
                 "assumption (only %s have one); it stays advice\n",
                 norewrite.c_str(), norewrite.c_str(), rewriting.c_str());
  return opt;
}

// `classes`: the schedule the passes ran on (the input, or its rank classes).
void print_json(int64_t id, int64_t fused_id, const fusion::PipelineResult& res,
                const fusion::Schedule& classes) {
  json::Writer w;
  w.begin_object()
      .field("schedule", id)
      .field("fused_schedule", fused_id)
      .field_raw("passes", res.passes_json())
      .field("fixed_point", res.fixed_point)
      .field("baseline_step_ns", res.baseline_step_ns)
      .field("fused_step_ns", res.fused_step_ns)
      .field("predicted_saving_ns", res.predicted_saving_ns())
      .field("local_saving_ns", res.local_saving_ns());
  // Only a schedule built under --assume has them (the key is absent otherwise).
  const std::vector<std::string> assumed = fusion::assumed_rewrites(res.schedule);
  if (!assumed.empty()) w.array_of("assumptions", assumed);
  // Only when the passes ran on rank classes.
  if (classes.symmetry.on())
    w.key("rank_classes")
        .begin_object()
        .field("ranks", static_cast<int64_t>(classes.ranks.size()))
        .field("classes", fusion::rank_classes(classes))
        .field("ranks_per_class", classes.symmetry.orbit())
        .end_object();
  w.key("findings").begin_array();
  auto add = [&w](const fusion::Finding& f, bool applied) {
    // The assumptions a finding needs: none when proven (applied, skipped, rejected).
    std::vector<std::string> assumptions;
    if (!f.legal && f.rejection.empty() && !f.assumption.empty())
      assumptions.push_back(f.assumption);
    w.begin_object()
        .field("pass", f.pass)
        .field("status", fusion::finding_status(f, applied))
        .array_of("assumptions", assumptions)
        .array_of("ranks", f.ranks)
        .array_of("ops", f.ops)
        .field("local_saving_ns", f.saving_ns);
    if (!f.rejection.empty()) w.field("rejected_by", f.rejection);
    w.field_raw("detail", fusion::finding_detail_json(f, applied)).end_object();
  };
  for (const auto& f : res.applied) add(f, true);
  for (const auto& f : res.advice) add(f, false);
  for (const auto& f : res.rejected) add(f, false);
  const std::string t = w.end_array().end_object().take() + "\n";
  std::fwrite(t.data(), 1, t.size(), stdout);
}

void print_table(const FuseOpts* o, const fusion::PipelineOptions& opt,
                 const fusion::Schedule& classes, const fusion::PipelineResult& res,
                 const replay::SimProfile& sp, int64_t id, int64_t fused_id) {
  std::printf("%-10s %-16s %-8s %14s %14s  %s\n", "pass", "where", "status", "local ns",
              "saving B/rank", "what");
  auto row = [](const fusion::Finding& f, bool applied) {
    const std::string head = fixed_columns(f.pass, where(f), fusion::finding_status(f, applied),
                                           f.saving_ns, f.saving_bytes);
    print_wrapped(head, f.summary);
    const std::string& why = !f.rejection.empty() ? f.rejection : f.assumption;
    if (!why.empty()) print_wrapped(std::string(head.size() + 2, ' '), why);
  };
  for (const auto& f : res.applied) row(f, true);
  for (const auto& f : res.advice) row(f, false);
  for (const auto& f : res.rejected) row(f, false);
  Ns advice_ns = 0;
  for (const auto& f : res.advice)
    if (!f.legal && f.saving_ns > 0) advice_ns += f.saving_ns;
  std::string rounds;
  for (size_t i = 0; i < res.passes.size(); ++i) {
    size_t n = 0;
    for (const auto& f : res.applied) n += f.pass == res.passes[i];
    rounds += (i ? ", " : "") + res.passes[i] + " " + std::to_string(n) + " in " +
              std::to_string(res.rounds[i]) + (res.rounds[i] == 1 ? " round" : " rounds");
  }
  print_wrapped("", std::string(res.fixed_point ? "\nfixed point"
                                                : "\nround limit reached (no fixed point)") +
                        " after " + std::to_string(res.applied.size()) + " applied (" + rounds +
                        "), " + std::to_string(res.advice.size()) + " advice, " +
                        std::to_string(res.rejected.size()) + " rejected");
  std::printf(
      "predicted step time (simulated, profile %s): %.3f ms -> %.3f ms, change "
      "%+.3f ms\n",
      sp.profile.name.c_str(), res.baseline_step_ns / 1e6, res.fused_step_ns / 1e6,
      -res.predicted_saving_ns() / 1e6);
  std::printf(
      "local estimates (each finding alone, not additive): %.3f ms applied, up to "
      "%.3f ms more if the advice's assumptions hold\n",
      res.local_saving_ns() / 1e6, advice_ns / 1e6);
  if (const auto assumed = fusion::assumed_rewrites(res.schedule); !assumed.empty()) {
    std::printf(
        "%zu rewrite(s) applied under their assumptions (--assume); the fused schedule "
        "is what the job would run if these hold, and no data check can prove them:\n",
        assumed.size());
    for (const auto& a : assumed) std::printf("  %s\n", a.c_str());
  } else if (!opt.assume.empty()) {
    std::printf(
        "--assume %s: no advice of those passes had a rewrite with a positive saving "
        "that validated; nothing was assumed\n",
        o->assume.c_str());
  }
  const auto world = static_cast<long long>(classes.ranks.size());
  if (classes.symmetry.on())
    std::printf(
        "rank classes: %lld ranks in %d classes of %d; each finding on a class's stored rank "
        "is made and applied on every rank of its class\n",
        world, fusion::rank_classes(classes), classes.symmetry.orbit());
  else
    std::printf("rank classes: none (%lld ranks, each stored)\n", world);
  if (fused_id >= 0)
    std::printf("fused schedule %lld (parent %lld) in %s\n", static_cast<long long>(fused_id),
                static_cast<long long>(id), o->file.c_str());
}

int run_fuse(const FuseOpts* o) {
  if (o->list) {
    for (const auto& p : fusion::all_passes())
      std::printf("%-10s %s\n", std::string(p->name()).c_str(),
                  std::string(p->description()).c_str());
    return 0;
  }
  if (o->file.empty()) throw Error(ErrorCode::Usage, "fuse: give a .braid file");
  if (o->all && !o->passes.empty())
    throw Error(ErrorCode::Usage, "give either --passes or --all, not both");
  const fusion::PipelineOptions opt = pipeline_options(o);
  int64_t id = o->schedule;
  if (id < 0) {
    for (const auto& st : fusion::list_schedules(o->file))
      if (st.parent_id < 0 && st.id > id) id = st.id;
    if (id < 0) id = lift_first(o->file, o->dry, o->json);
  }
  // Rank classes stay classes: the passes and the simulator work on the representatives.
  fusion::Schedule s = fusion::load_stored_schedule(o->file, id, /*classes=*/true);
  // The profile as `braid replay --backend sim --profile` loads it (calibrated compute
  // costs included), so the prediction is the sim backend's difference.
  const replay::SimProfile sp = replay::load_sim_profile(o->profile);
  // Rank classes as stored (braid synth's DP replicas). A schedule stored with every rank is
  // fused rank by rank even where fusion::fold finds a symmetry: the passes are proven to act
  // alike on every replica for the DP symmetry (tests/fusion/symmetry_test.cc), not for the
  // others fold may find (a TP group's ranks shifted, where a pass needs each member's part).
  const fusion::Schedule& classes = s;
  fusion::PipelineResult res = replay::fuse_simulated(s, sp, opt);

  int64_t fused_id = -1;
  if (!o->dry) fused_id = fusion::store_fused(o->file, id, s, res, sp.profile.name);

  if (o->json)
    print_json(id, fused_id, res, classes);
  else
    print_table(o, opt, classes, res, sp, id, fused_id);
  return 0;
}

}  // namespace

void register_fuse(CLI::App& app, Action& run) {
  auto o = std::make_shared<FuseOpts>();
  auto* cmd = app.add_subcommand(
      "fuse",
      "Run the fusion passes (docs/fusion.md) on a stored schedule: legal rewrites with a\n"
      "positive predicted saving are applied, the rest is reported as advice. Stores the fused\n"
      "schedule (parent: the input) and every finding as an opportunity in one transaction, and\n"
      "prints pass, where, applied/advice and local estimate per finding, and the prediction:\n"
      "the simulated step of the input minus the fused one's on --profile (braid replay's sim).");
  cmd->add_option("file", o->file, ".braid file holding the schedule");
  cmd->add_option("--schedule", o->schedule, "Schedule id (default: the newest root schedule)");
  cmd->add_option("--passes", o->passes, "Comma-separated passes to run, in this order");
  cmd->add_flag("--all", o->all, "Run every pass in the default order (the default)");
  cmd->add_flag("--once", o->once, "Apply each pass once instead of to a fixed point");
  cmd->add_option("--assume", o->assume,
                  "all, or comma-separated passes: apply their advice under its stated\n"
                  "assumption (what opaque compute reads or writes) where the pass can build\n"
                  "the rewrite; the fused schedule stores the assumptions, and `braid ab` says\n"
                  "its data check cannot prove them");
  cmd->add_option("--profile", o->profile,
                  "Hardware profile for the cost model: h100-nvlink, h100-pcie, h100-ib,\n"
                  "a100-nvlink, cpu-shm, or a JSON file")
      ->capture_default_str();
  cmd->add_flag("--list-passes", o->list, "List the passes and exit");
  cmd->add_flag("--dry-run", o->dry, "Report only; store nothing");
  cmd->add_flag("--json", o->json, "Machine-readable JSON instead of the table");
  cmd->callback([o, &run] { run = [o] { return run_fuse(o.get()); }; });
}

static const VerbRegistration kRegister{45, "fuse", register_fuse};

}  // namespace braid::cli

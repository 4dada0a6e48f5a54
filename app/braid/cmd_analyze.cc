// braid analyze: cross-rank matching, clock alignment, metrics, critical path, calibrated cost
// model and parallelism labels for one run; a report on stdout, results stored in the file. A job
// stored as one file per rank or node is analyzed from all its files, by this process or, under
// mpirun, spread over the processes (analysis/job.h).
#include <cstdio>
#include <memory>

#include "analysis/analyze.h"
#include "analysis/store.h"
#include "app/braid/cli.h"
#include "trace/error.h"
#include "trace/reader.h"

#if defined(BRAID_HAVE_MPI_ANALYZE) && defined(BRAID_HAVE_MPI)
#include "analysis/mpi_exchange.h"
#include "replay/mpi_executor.h"
#endif

namespace braid::cli {

namespace {

struct Opts {
  std::vector<std::string> files;
  std::string profile = "h100-nvlink";
  int64_t run_id = -1, step = -1;
  bool json = false, no_store = false, keep_clocks = false, hta_compat = false;
  bool stream = false, no_stream = false;
};

// One file by itself; several files (or any under mpirun) as one job over the processes.
analysis::Analysis analyze_job(const Opts& o, const analysis::AnalyzeOptions& opt,
                               analysis::Exchange& ex) {
  if (o.files.size() == 1 && ex.size() == 1) {
    TraceReader reader(o.files[0]);
    return analysis::analyze(reader, opt);
  }
  return analysis::analyze_files(o.files, opt, ex);
}

// Each process stores the job's result into the files it loaded, under each file's run.
void store(analysis::Analysis& a, const analysis::Exchange& ex) {
  const int64_t run = a.run_id;
  for (const analysis::JobFile& f : a.files)
    if (f.owner == ex.index()) {
      a.run_id = f.run;
      analysis::store_analysis(f.path, a);
    }
  a.run_id = run;
}

int run_analyze(const Opts& o) {
  analysis::AnalyzeOptions opt;
  opt.run = o.run_id;
  opt.step = o.step;
  opt.profile = o.profile;
  opt.solve_clocks = !o.keep_clocks;
  opt.hta_compat = o.hta_compat;
  if (o.stream) opt.stream = 1;
  if (o.no_stream) opt.stream = 0;
  std::unique_ptr<analysis::Exchange> ex = std::make_unique<analysis::Exchange>();
#if defined(BRAID_HAVE_MPI_ANALYZE) && defined(BRAID_HAVE_MPI)
  if (replay::launched_by_mpirun()) ex = analysis::mpi_exchange();
#endif
  if (o.stream && (o.files.size() > 1 || ex->size() > 1))
    throw Error(ErrorCode::Usage,
                "--stream analyzes one file in one process; a job in several files is held file "
                "by file (under mpirun, each process its own files' ranks)");
  analysis::Analysis a;
  // A streamed analysis of a large run says how far it is (on a terminal).
  Progress progress("analyzing", ex->size() == 1);
  opt.progress = [&progress](std::string_view what, int64_t done, int64_t total) {
    progress.count(what, static_cast<uint64_t>(done), static_cast<uint64_t>(total));
  };
  try {
    a = analyze_job(o, opt, *ex);
    progress.done();
    if (!o.no_store && !o.hta_compat) store(a, *ex);
  } catch (const analysis::JobError& e) {
    // Loading failed, and every process knows it (analysis/job.h): the first one says so.
    if (ex->index() == 0) throw;
    return e.code() == ErrorCode::Usage ? 2 : 1;
  } catch (const std::exception& e) {
    // A failure of this process alone would leave the others waiting in the next exchange:
    // the whole job ends.
    if (ex->size() == 1) throw;
    std::fprintf(stderr, "braid: error: %s\n", e.what());
#if defined(BRAID_HAVE_MPI_ANALYZE) && defined(BRAID_HAVE_MPI)
    analysis::mpi_abort(1);
#endif
    throw;
  }
  if (ex->index() != 0) return 0;  // the report is the first process's
  std::string text = o.json ? analysis::report_json(a) : analysis::report_text(a);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

void register_analyze(CLI::App& app, Action& run) {
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "analyze",
      "Analyze a multi-rank run: match collectives across ranks, align the ranks' clocks on\n"
      "them, and report per rank and step compute / communication / idle time, overlap and\n"
      "exposed communication, per collective arrival skew vs transfer time with the late rank\n"
      "and bus bandwidth, the critical path, an α-β cost model calibrated on the trace, and the\n"
      "parallelism (TP/SP/EP/PP/DP) of each communicator. Results are stored in the file\n"
      "(tables analysis_*, clock offsets in ranks) for the GUI unless --no-store.\n"
      "A job stored as one file per rank or node: give all its files; under\n"
      "`mpirun -np N braid analyze FILES...` the N processes share the files (each loads its\n"
      "own; they exchange collectives, per-rank results and the critical path's questions,\n"
      "not the traces) and print and store what one process would. Each file stores the\n"
      "job's results under its own run.");
  add_run_options(*cmd, o->files, ".braid file, or the files of one job (one per rank or node)",
                  o->run_id, o->step, "Only this step (ProfilerStep number)");
  cmd->add_flag("--json", o->json, "Machine-readable JSON instead of text");
  cmd->add_option("--profile", o->profile,
                  "Hardware profile for the cost model: h100-nvlink, h100-pcie, h100-ib,\n"
                  "a100-nvlink, cpu-shm, or a JSON file")
      ->capture_default_str();
  cmd->add_flag("--hta-compat", o->hta_compat,
                "Whole-run rows as HTA computes them by default: only GPU work launched before\n"
                "the last ProfilerStep by a call in the trace, times rounded to whole µs (a view\n"
                "for comparing with HTA: implies --no-store)");
  cmd->add_flag("--stream", o->stream,
                "One file: analyze it rank by rank and a batch of steps at a time, holding\n"
                "every rank's collectives, one rank's events and one batch, not the whole run\n"
                "(the same results). Chosen by itself when the run would take more than 1 GiB\n"
                "or half the memory left, and more than streaming it");
  cmd->add_flag("--no-stream", o->no_stream,
                "Hold the whole run, however large (refused, in one line, when it would not fit)")
      ->excludes("--stream");
  cmd->add_flag("--no-store", o->no_store, "Do not write the results into the files");
  cmd->add_flag("--keep-clocks", o->keep_clocks,
                "Use the clock offsets stored in the files instead of solving them");
  cmd->callback([o, &run] { run = [o] { return run_analyze(*o); }; });
}

static const VerbRegistration kRegister{30, "analyze", register_analyze};

}  // namespace braid::cli

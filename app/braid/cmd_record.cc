// braid record: run a command with the capture agent in it and all its children.
#include <cstdio>
#include <filesystem>

#include "app/braid/cli.h"
#include "capture/daemon/client.h"
#include "capture/daemon/daemon.h"
#include "capture/launcher.h"
#include "trace/error.h"

namespace braid::cli {

void register_record(CLI::App& app, Action& run) {
  struct Opts {
    capture::RecordOptions rec;
    std::string window = "all";
    std::string trace = "cuda,nvtx,nccl,api";
    std::string cupti = "yield";
    std::string steps;
    double duration = 0, delay = 0;
    bool profiler_api = false;
    std::string nvtx;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "record",
      "Run a command (training script, torchrun, mpirun, ...) and record its CUDA kernels,\n"
      "memory copies, CUDA API calls, NVTX ranges and NCCL calls into one .braid file per\n"
      "process (<stem>.rank<R>.braid beside -o; combine them with braid merge). The job runs\n"
      "unmodified: the agent is injected through CUDA_INJECTION64_PATH and LD_PRELOAD. Without a\n"
      "GPU or driver the command runs unchanged and braid says why nothing was captured.\n"
      "With --attach no file is written: every process registers with the node's braid daemon\n"
      "and captures only the windows `braid trigger` opens (the daemon writes them; see\n"
      "docs/daemon.md). Without a daemon the job runs unchanged and its processes register when\n"
      "one starts. The exit status is the command's.");
  auto* output = cmd->add_option("-o,--output", o->rec.output,
                                 "Output name; each process writes <stem>.rank<R>.braid beside it")
                     ->default_val("job.braid");
  cmd->add_flag("-f,--force", o->rec.force, "Replace the files of an earlier recording");
  cmd->add_flag("-q,--quiet", o->rec.quiet, "No summary line at the end");
  auto* g = cmd->add_option_group("window", "Capture window (default: the whole run)");
  g->add_option("--window", o->window,
                "The window as one spec: all, cuda-profiler-api, nvtx:NAME, steps:A-B, "
                "duration:SECONDS[@DELAY]");
  g->add_flag("--cuda-profiler-api", o->profiler_api,
              "Capture only between cudaProfilerStart() and cudaProfilerStop()");
  g->add_option("--nvtx", o->nvtx, "Capture only inside NVTX ranges with this name");
  g->add_option("--steps", o->steps,
                "Capture steps A to B, e.g. 10-20 (steps from NVTX ranges 'ProfilerStep#N' or "
                "'step N')");
  auto* duration =
      g->add_option("--duration", o->duration, "Capture this many seconds from CUDA's start");
  cmd->add_option("--delay", o->delay, "With --duration: wait this many seconds first")
      ->check(CLI::NonNegativeNumber);
  g->require_option(0, 1);
  cmd->add_option("--trace", o->trace,
                  "What to record, a comma-separated subset of cuda (kernels, copies, memsets, "
                  "syncs), nvtx (ranges, steps), nccl (NCCL calls), api (CUDA API records; NCCL "
                  "calls are tied to their kernels only with it); or all")
      ->default_val("cuda,nvtx,nccl,api");
  cmd->add_option("--cupti", o->cupti,
                  "When the job's own CUPTI client (torch.profiler) asks for CUPTI while braid "
                  "holds it and CUPTI serves one client: yield (hand it over, record the gap, take "
                  "it back when that client lets go) or hold (keep it; that client records no GPU "
                  "activity)")
      ->default_val("yield");
  cmd->add_option("--buffer-mb", o->rec.buffer_mb, "CUPTI activity buffer size, 1-10 MB")
      ->default_val(8);
  cmd->add_option("--max-buffers", o->rec.max_buffers,
                  "Most activity buffers in use at once; beyond it CUPTI drops (and counts) records")
      ->default_val(64);
  auto* attach = cmd->add_flag(
      "--attach", o->rec.attach,
      "Attach mode: no output file; the processes register with the braid daemon and capture "
      "the windows braid trigger opens");
  auto* socket = cmd->add_option("--socket", o->rec.socket,
                                 "With --attach: the daemon's socket (default: as braid daemon)");
  auto* job = cmd->add_option("--job", o->rec.job,
                              "With --attach: the job id to register under (default: "
                              "$SLURM_JOB_ID, $TORCHELASTIC_RUN_ID, else the script or "
                              "command name)");
  cmd->add_option("command", o->rec.command, "The command to run, after --")->required();
  cmd->callback([o, duration, output, attach, socket, job, &run] {
    bool with_duration = duration->count() > 0;
    bool with_attach = attach->count() > 0;
    bool attach_only = socket->count() > 0 || job->count() > 0;
    bool file_only = output->count() > 0 || with_duration || o->delay > 0 || o->profiler_api ||
                     !o->nvtx.empty() || !o->steps.empty() || o->window != "all" || o->rec.force;
    run = [o, with_duration, with_attach, attach_only, file_only] {
      o->rec.trace = capture::parse_trace(o->trace);
      o->rec.cupti = capture::parse_cupti_policy(o->cupti);
      if (!with_attach && attach_only)
        throw Error(ErrorCode::Usage, "record: --socket and --job go with --attach");
      if (with_attach && file_only)
        throw Error(ErrorCode::Usage,
                    "record: with --attach the daemon writes the files and braid trigger chooses "
                    "the window (--duration/--steps): no -o, -f or window options");
      if (with_attach) {
        if (o->rec.socket.empty()) o->rec.socket = daemon::default_socket_path();
        o->rec.socket = std::filesystem::absolute(o->rec.socket).string();
        if (o->rec.job.empty())
          o->rec.job = capture::default_job_id(o->rec.command,
                                               [](const char* n) { return std::getenv(n); });
        if (!o->rec.quiet) {
          std::string note;
          try {
            daemon::ClientConnection probe(o->rec.socket);
          } catch (const Error& e) {
            note = std::string("; ") + e.what() +
                   ": the job runs anyway and its processes register when a daemon starts";
          }
          std::fprintf(stderr, "braid record: attach mode, job '%s', daemon socket %s%s\n",
                       o->rec.job.c_str(), o->rec.socket.c_str(), note.c_str());
        }
        return capture::record(o->rec);
      }
      std::string w = o->window;
      if (o->profiler_api)
        w = "cuda-profiler-api";
      else if (!o->nvtx.empty())
        w = "nvtx:" + o->nvtx;
      else if (!o->steps.empty())
        w = "steps:" + o->steps;
      else if (with_duration)
        w = "duration:" + std::to_string(o->duration) + "@" + std::to_string(o->delay);
      else if (o->delay > 0)
        throw Error(ErrorCode::Usage, "record: --delay needs --duration");
      o->rec.window = capture::parse_window(w);
      return capture::record(o->rec);
    };
  });
}

static const VerbRegistration kRegister{60, "record", register_record};

}  // namespace braid::cli

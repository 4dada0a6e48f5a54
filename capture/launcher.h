// `braid record`: run a command with the capture agent injected into it and all its children.
#pragma once

#include <string>
#include <vector>

#include "capture/config.h"

namespace braid::capture {

struct RecordOptions {
  std::string output = "job.braid";  // each process writes <stem>.rank<R>.braid beside it
  std::vector<std::string> command;
  WindowSpec window;
  TraceSet trace;
  CuptiPolicy cupti = CuptiPolicy::Yield;  // --cupti: the job's own CUPTI client first or braid
  bool force = false;   // replace outputs left by an earlier recording
  bool quiet = false;
  int buffer_mb = 8;
  int max_buffers = 64;
  // Attach mode: no files; every process registers with the node daemon on `socket` under job
  // id `job` and captures the windows `braid trigger` opens (docs/daemon.md).
  bool attach = false;
  std::string socket;  // absolute path of the daemon's socket (required with attach)
  std::string job;     // empty: default_job_id()
};

// The job id attach mode registers under when --job is not given: $SLURM_JOB_ID ("slurm-<id>"),
// else $TORCHELASTIC_RUN_ID, else the script a launcher or interpreter runs (train.py -> "train"),
// else the command's name.
std::string default_job_id(const std::vector<std::string>& command, const GetEnv& getenv);

// Why nothing can be captured here, or "" when capture can run: no agent built, no CUDA driver
// (libcuda.so.1), cuInit failing, or no GPU.
std::string capture_unavailable_reason();

// The environment a recorded command gets (added to the current one): agent injection,
// NCCL interposer and profiler plugin, NVTX injection and the BRAID_CAPTURE_* settings.
std::vector<std::pair<std::string, std::string>> capture_environment(const RecordOptions& o);

// Runs the command (capturing when possible; in attach mode whenever the agent is built) and
// returns its exit status as a shell would
// (128 + signal when it was killed). Throws braid::Error on bad options or when the command
// cannot be started.
int record(const RecordOptions& o);

// The per-process files of a recording with output `output` (job.rank*.braid, job.pid*.braid).
std::vector<std::string> recorded_files(const std::string& output);

}  // namespace braid::capture

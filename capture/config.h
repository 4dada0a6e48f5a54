// What a capture is asked to do, as `braid record` passes it to the agent through the
// environment (BRAID_CAPTURE_*), the process's rank from its launcher's environment, and the
// capture window as a small state machine the agent feeds with what it observes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace braid::capture {

using GetEnv = std::function<const char*(const char*)>;

struct RankIdentity {
  int rank = -1, world_size = -1, local_rank = -1;
  std::string source;  // the variable it came from, e.g. "RANK", "OMPI_COMM_WORLD_RANK"
};
// torchrun/torch.distributed (RANK, WORLD_SIZE, LOCAL_RANK), Open MPI (OMPI_COMM_WORLD_*),
// Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), MPICH/Hydra (PMI_RANK, PMI_SIZE), in
// that order of preference.
RankIdentity rank_from_env(const GetEnv& getenv);

// Daemon: attach mode, where the node daemon opens and closes windows (open_duration,
// open_steps, close below); nothing is captured until it does.
enum class WindowKind { All, ProfilerApi, Nvtx, Steps, Duration, Daemon };
struct WindowSpec {
  WindowKind kind = WindowKind::All;
  std::string nvtx_name;                    // Nvtx: the range that opens the window
  int64_t first_step = -1, last_step = -1;  // Steps: inclusive
  double delay_s = 0, duration_s = 0;       // Duration: from the first CUDA activity
};
// "all", "cuda-profiler-api", "nvtx:<range name>", "steps:<a>-<b>" (or one step "steps:<a>"),
// "duration:<seconds>[@<delay seconds>]". Throws braid::Error(Usage) on anything else.
WindowSpec parse_window(std::string_view text);
std::string to_string(const WindowSpec& w);

// The step number a range name carries: "ProfilerStep#12", "step 12", "step_12", "Step#12".
std::optional<int64_t> step_from_range_name(std::string_view name);

// The CUDA runtime/driver calls whose API records are kept: launches, copies, memsets,
// synchronization and event record/wait (every other API would cost time and say little).
bool is_recorded_api(std::string_view name);

// What a capture records (`braid record --trace`): `cuda` kernels, copies, memsets and
// synchronization; `nvtx` NVTX ranges and steps; `nccl` NCCL calls (interposer and profiler
// plugin); `api` CUDA runtime/driver API records of launches, copies and synchronization (and the
// external correlation that ties an NCCL call to its kernel, which CUPTI records only with them).
// Windows work with any subset (their NVTX callbacks are separate from `nvtx`'s records).
struct TraceSet {
  bool cuda = true, nvtx = true, nccl = true, api = true;
  bool operator==(const TraceSet&) const = default;
};
// "cuda,nvtx,nccl,api" (any non-empty subset, any order) or "all". Throws braid::Error(Usage)
// naming the unknown word.
TraceSet parse_trace(std::string_view text);
std::string to_string(const TraceSet& t);

// What the agent does when the job's own CUPTI client (torch.profiler's Kineto, a CUPTI tool of
// the job) asks for CUPTI while braid holds it and CUPTI serves one subscriber (`braid record
// --cupti`): Yield hands it over (braid flushes, switches its records off and unsubscribes; the
// gap is a hole between capture windows and a diagnostic) and takes it back when that client
// unsubscribes or finalizes CUPTI; Hold keeps it (the client is refused; braid says so).
enum class CuptiPolicy { Yield, Hold };
// "yield" or "hold". Throws braid::Error(Usage) on anything else.
CuptiPolicy parse_cupti_policy(std::string_view text);
const char* to_string(CuptiPolicy p);

struct CaptureConfig {
  std::string output;   // "dir/job.braid": each process writes dir/job.rank<R>.braid
  // Attach mode (BRAID_CAPTURE_ATTACH): register with the node daemon on this socket and capture
  // only the windows it opens; no output file. `job` (BRAID_CAPTURE_JOB) names the job there.
  std::string attach_socket;
  std::string job;
  WindowSpec window;
  TraceSet trace;       // BRAID_CAPTURE_TRACE
  CuptiPolicy cupti = CuptiPolicy::Yield;  // BRAID_CAPTURE_CUPTI
  std::string command;  // what was recorded (runs.source)
  size_t buffer_bytes = 8u << 20;
  size_t prealloc_buffers = 4;
  size_t max_buffers = 64;
  int flush_ms = 500;
  int recalibrate_ms = 2000;
  bool enabled = false;  // BRAID_CAPTURE_OUTPUT or BRAID_CAPTURE_ATTACH was set
  bool attach() const { return !attach_socket.empty(); }
};
CaptureConfig config_from_env(const GetEnv& getenv);

// dir/job.braid -> dir/job.rank3.braid, or dir/job.pid1234.braid when the rank is unknown.
std::string output_path_for(const std::string& output, int rank, long pid);

// Decides when CUPTI activity is on. Each observation returns the new state when it changes.
class WindowController {
 public:
  explicit WindowController(WindowSpec spec);
  bool enabled() const { return enabled_; }
  bool finished() const { return finished_; }  // closed for good: nothing more to capture
  std::optional<bool> on_profiler_api(bool start);
  std::optional<bool> on_range_start(std::string_view name);
  std::optional<bool> on_range_end(std::string_view name);
  // Start/end ranges (nvtxRangeStartA/Ex, nvtxDomainRangeStartEx ... nvtxRangeEnd): not nested,
  // may end on another thread, so they are keyed by NVTX's range id. An end whose start was not
  // seen (before the callbacks were on) is ignored.
  std::optional<bool> on_range_start_id(uint64_t id, std::string_view name);
  std::optional<bool> on_range_end_id(uint64_t id);
  // Whether a start/end range of this id is open as far as the window knows.
  bool has_range(uint64_t id) const { return started_.count(id) > 0; }
  std::optional<bool> on_tick(double seconds_since_start);
  const WindowSpec& spec() const { return spec_; }

  // Attach mode (a controller made with WindowKind::Daemon). A duration window opens now and
  // stays open until close(); a steps window opens at the start of the next step range (step S)
  // and closes by itself at the end of step S+n-1, as a Steps window does. close() ends either.
  std::optional<bool> open_duration();
  void open_steps(int64_t n);
  std::optional<bool> close();
  bool steps_pending() const { return steps_to_arm_ > 0; }

 private:
  std::optional<bool> set(bool on);
  WindowSpec spec_;
  bool enabled_ = false, finished_ = false;
  int depth_ = 0;
  int64_t steps_to_arm_ = 0;  // attach-mode steps window waiting for its first step
  std::unordered_map<uint64_t, std::string> started_;  // open start/end ranges by id
};

}  // namespace braid::capture

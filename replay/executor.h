// The replay executor interface: one schedule (fusion/ir.h) run step by step on a backend.
//
// Backends: `sim` (replay/sim.h, discrete-event simulation with the cost model), `mpi`
// (replay/mpi_executor.h, one process per rank under mpirun, CPUs only) and `nccl`
// (replay/nccl_executor.h, one process per GPU). A schedule is first prepared (communicators,
// buffers, stream threads: everything outside the timed region), then run one step at a time, so
// the A/B runner can interleave a baseline and a fused schedule (A B A B ...).
//
// Multi-process backends run the same code on every process; each process executes its own
// rank(s) and `collect` gathers every rank's timeline on the reporting process (process 0).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/interpreter.h"
#include "fusion/ir.h"
#include "trace/model.h"

namespace braid::replay {

// Timing: compute busy-waits (or sleeps) its recorded duration, buffers have the schedule's
// dtype sizes. Check: every element is an int64 initialised with fusion::initial_value, compute
// writes fusion::compute_value and collectives move and sum the int64 values with wrap-around,
// so the final buffers equal fusion::interpret's.
enum class DataMode : uint8_t { Timing, Check };

// How the mpi backend spends a compute op's time: spinning on the clock (the CPU stays busy),
// sleeping until the deadline (frees the core), or Auto: spin when every stream of every rank
// on this host has a core of its own, sleep otherwise (oversubscribed runs).
enum class ComputeMode : uint8_t { Auto, Spin, Sleep };

// Compute and delay ops shorter than this never sleep in the mpi backend, whatever the compute
// mode: a sleeping thread wakes no sooner than the scheduler runs it again (35-160 µs measured
// on the 2-core VM, more under load), so a shorter sleep would time the wake-up, not the op.
// They spin to their deadline instead, which costs a core for at most this long.
constexpr Ns kShortestSleepNs = 50'000;

// On an oversubscribed host the mpi backend's waits for MPI operations yield the core for this
// long (covering the rounds of a collective whose members are all present), then nap.
constexpr Ns kYieldWindowNs = 1'000'000;

struct ReplayOptions {
  DataMode data = DataMode::Timing;
  ComputeMode compute = ComputeMode::Auto;
  double compute_scale = 1.0;      // compute and delay durations are multiplied by this
  Ns timeout_ns = 60'000'000'000;  // a rank stuck this long in one op ends the run (watchdog)
  int64_t max_buffer_bytes = int64_t{1} << 30;  // per rank; larger schedules are refused
  // The data check's int64 data per process (replay/ab.h, plan_check): a check over it runs on
  // the schedules' exact scaled copies, and is refused when even those do not fit.
  int64_t max_check_bytes = int64_t{1} << 30;
};

// A collective kind's calibrated cost on communicators of one size.
struct SizedLink {
  analysis::LinkCost link;
  double ns_per_element = 0;  // reducing kinds: per element moved (wire factor · count)
  // Measured corrections to the α-β line: {message bytes, measured - fitted ns}, by bytes. A
  // collective of b bytes costs the line plus the correction interpolated linearly between
  // the two nearest sizes (the nearest one's outside them), never below 0: one straight line
  // cannot follow both the 4 KiB and the 4 MiB collectives of a CPU transport.
  std::vector<std::pair<int64_t, double>> corrections;
  double correction_ns(int64_t bytes) const;
};

// A backend's costs on this host, as a calibration fits them (replay/host_calibration.h) and the
// sim prices ops with them (SimOptions).
struct HostCosts {
  // What a compute op of scaled duration d costs the backend: slowdown · d + overhead. Ops with d
  // below SimOptions::short_compute_below_ns use the short_ pair: the mpi backend spins them
  // (kShortestSleepNs), sharing the cores with the other ranks when the host is oversubscribed,
  // and sleeps longer ones there, paying the scheduler's wake-up.
  Ns compute_overhead_ns = 0;
  double compute_slowdown = 1.0;
  Ns short_compute_overhead_ns = 0;
  double short_compute_slowdown = 1.0;
  // A backend's own α-β per collective kind (a calibration fits one per probed op: MPI's
  // algorithms are not NCCL's), used instead of the profile's link with the steps and wire
  // factor of the algorithm the cost model picks; kinds not here use the profile.
  std::map<CollOp, analysis::LinkCost> op_links;
  // A reducing kind's cost per element it moves (wire factor · count), beyond its op_links:
  // MPI reduces on the CPU element by element, so a bfloat16 all-reduce costs more than a
  // float32 one of the same bytes (calibrated with probes of both).
  std::map<CollOp, double> reduce_ns_per_element;
  // Per kind and communicator size, from calibration probes on 2, 4, 8, ... ranks and the
  // world (MPI picks its algorithm by size): used before op_links. A communicator of a size
  // not probed takes the smallest probed size above its own, else the largest.
  std::map<CollOp, std::map<int, SizedLink>> sized_links;
  // The first collective each rank takes part in starts start_skew_ns after its last member
  // arrives (on an oversubscribed host the ranks leave the step's barrier at different times,
  // and the early ones wait for the late ones there).
  Ns start_skew_ns = 0;
  // Processor sharing on an oversubscribed host (a calibration of the mpi backend sets it):
  // rank r runs on core r % host_cores (as the backend pins it), and a collective progresses at
  // 1 / L of its rate, L the most rank-streams in running collectives on any core of its
  // members; its α-β time (op_links, the profile's link) is then its time on dedicated cores.
  // 0: every collective at full rate, whatever else runs.
  int host_cores = 0;
  // With host_cores: a member that reaches a collective before its peers spins on its core for
  // up to this long (the mpi backend's yield window) before it naps, loading the core as a
  // running member does. 0: waiting members cost nothing.
  Ns wait_spin_ns = 0;
  // Sibling groups (sibling_key in replay/common.h) that cost the same do not end together on
  // an oversubscribed host: they share the cores and finish staggered, and a collective whose
  // members come from several of them waits for the last. The k-th of K siblings (by
  // communicator id) costs (1 + sibling_stagger · (2k / (K - 1) - 1)) times its cost, so their
  // mean is unchanged and their ends spread over ±sibling_stagger of it (default model only;
  // a calibration measures it on its workload). 0: siblings end together.
  double sibling_stagger = 0;
};

// The sim backend's options (replay/sim.h), here so make_executor can take them.
struct SimOptions : HostCosts {
  double compute_scale = 1.0;  // compute and delay durations are multiplied by this
  // Compute ops of scaled duration below this use HostCosts' short_ pair; 0: one pair for all.
  Ns short_compute_below_ns = 0;
  // Every stream starts the step at step_start_ns (a backend's wake-up of its stream threads
  // after the step's barrier).
  Ns step_start_ns = 0;
  Ns compute_cost(Ns d) const {
    const bool s = d < short_compute_below_ns;
    return static_cast<Ns>(static_cast<double>(d) *
                           (s ? short_compute_slowdown : compute_slowdown)) +
           (s ? short_compute_overhead_ns : compute_overhead_ns);
  }
};

// One executed op of one rank, relative to the start of its step.
struct OpTime {
  int64_t op_id = -1;
  int32_t stream = 0;  // index of the IR stream on its rank
  Ns start = 0, end = 0;
};

// One step: per rank, its ops in execution order (only the local ranks before collect()).
struct StepRecord {
  std::vector<std::vector<OpTime>> ranks;
  // Time from the step's start to the rank's last op end.
  Ns rank_ns(int32_t rank) const;
  // The step time of the job: the slowest rank.
  Ns step_ns() const;
};

struct ReplayResult {
  std::string backend;
  RunKind kind = RunKind::Replayed;
  std::vector<StepRecord> steps;   // measured steps (after warm-up), all ranks on process 0
  std::vector<RankInfo> ranks;     // per rank: host, pid, device
  std::vector<std::string> notes;  // how the replay was done (compute mode, scale, ...)
};

// A schedule ready to run: communicators created, buffers allocated, stream threads started.
class PreparedReplay {
 public:
  virtual ~PreparedReplay() = default;
  // Runs one step (in Check mode after re-initialising every buffer) and keeps its timeline
  // when `measure` is true (false: a warm-up step). Returns this process's view of the step.
  virtual StepRecord run_step(bool measure = true) = 0;
  // Every measured step of every rank, complete on the reporting process. Collective on all
  // processes.
  virtual ReplayResult collect() = 0;
  // Check mode: the final contents of this process's ranks after the last step (indexed by
  // rank; ranks run elsewhere are empty).
  virtual std::vector<fusion::RankBuffers> buffers() const = 0;
  // The same, handed over: the replay keeps no copy (the sim moves its interpretation out).
  virtual std::vector<fusion::RankBuffers> take_buffers() { return buffers(); }
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view backend() const = 0;  // "sim", "mpi", "nccl"
  virtual RunKind run_kind() const = 0;          // Simulated or Replayed

  // Validates `s` (throws braid::Error naming the first problem) and prepares it. Collective.
  virtual std::unique_ptr<PreparedReplay> prepare(const fusion::Schedule& s,
                                                  const ReplayOptions& o) = 0;

  // Process topology, for code that runs on every process (the A/B runner, the CLI).
  virtual int process_index() const { return 0; }
  virtual int process_count() const { return 1; }
  bool reporting() const { return process_index() == 0; }
  // The ranks this process executes.
  virtual std::vector<int32_t> local_ranks(const fusion::Schedule& s) const;
  // When the job's ranks share a host with fewer cores than ranks and are pinned round-robin
  // (rank r on core r % cores): the number of cores; 0 otherwise (SimOptions::host_cores).
  virtual int host_cores() const { return 0; }

  // Cross-process helpers (trivial on one process). Collective.
  virtual void barrier() {}
  // Every process's lines, concatenated in process order, on the reporting process.
  virtual std::vector<std::string> gather_lines(const std::vector<std::string>& lines) {
    return lines;
  }
  // Sum of `v` over all processes, on every process.
  virtual int64_t sum_all(int64_t v) { return v; }
  // Ends the whole job after an error on one process (MPI_Abort); returns on one process.
  virtual void abort_job(int code) {}
};

// Runs `fn` on this process of `ex`'s job. An exception on one process of a multi-process job is
// printed there as "braid: error: rank N: ..." and ends every process (abort_job), so a failure
// on one rank never leaves the others waiting; on one process it propagates.
int run_guarded(Executor& ex, const std::function<int()>& fn);

// Why `backend` cannot run a schedule of `nranks` ranks from this process ("" when it can): the
// mpi and nccl backends need one process per rank, started by mpirun.
std::string launch_problem(std::string_view backend, int nranks);

// Backends compiled into this build ("sim" always; "mpi" with MPI; "nccl" with CUDA + NCCL).
std::vector<std::string> available_backends();
// Throws braid::Error(Unsupported) naming the backends of this build when `name` is not one.
// `model` is the cost model of the sim backend (ignored by the others).
// `sim` gives the sim its calibrated per-compute-op overheads (its compute_scale is replaced by
// each replay's ReplayOptions::compute_scale).
std::unique_ptr<Executor> make_executor(std::string_view name,
                                        const analysis::CostModel& model = analysis::CostModel(),
                                        const SimOptions& sim = {});

}  // namespace braid::replay

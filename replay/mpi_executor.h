// The `mpi` backend: real multi-process replay on CPUs, one MPI process per schedule rank
// (`mpirun -np N braid replay ...`).
//
// - Communicators: one MPI communicator per schedule communicator (MPI_Comm_create_group with
//   the members in communicator order, so MPI ranks are communicator positions), created in
//   schedule order in prepare(), before anything is timed.
// - Collectives: allreduce, allgather, reducescatter (MPI_Reduce_scatter_block), alltoall,
//   broadcast and reduce map to the MPI collective; send/recv to MPI_Send/MPI_Recv; manytomany
//   to MPI_Isend/MPI_Irecv of every chunk and one MPI_Waitall. Sums use unsigned integer types
//   of the dtype's size (wrap-around, like the reference interpreter).
// - Streams are threads (MPI_THREAD_MULTIPLE), events a condition variable per rank; compute
//   and delay ops take their recorded duration times the compute scale, spinning on the clock
//   or sleeping until the deadline (ComputeMode; ops under kShortestSleepNs always spin).
//   Pending MPI operations complete in MPI_Waitall, which yields the core between polls
//   (OpenMPI's mpi_yield_when_idle, set unless the environment sets it).
// - Each step starts after an MPI_Barrier; op times are relative to the barrier's exit.
// - A watchdog ends the job (MPI_Abort, naming the op, rank and communicator) when one op has
//   waited longer than ReplayOptions::timeout_ns; a rank that dies makes mpirun end every rank.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "replay/executor.h"

namespace braid::replay {

class MpiExecutor : public Executor {
 public:
  // Initialises MPI (MPI_THREAD_MULTIPLE) on first use; finalised at exit.
  MpiExecutor();
  std::string_view backend() const override { return "mpi"; }
  RunKind run_kind() const override { return RunKind::Replayed; }
  std::unique_ptr<PreparedReplay> prepare(const fusion::Schedule& s,
                                          const ReplayOptions& o) override;
  int process_index() const override;
  int process_count() const override;
  int host_cores() const override;
  std::vector<int32_t> local_ranks(const fusion::Schedule& s) const override;
  void barrier() override;
  std::vector<std::string> gather_lines(const std::vector<std::string>& lines) override;
  int64_t sum_all(int64_t v) override;
  void abort_job(int code) override;
};

// Initialises MPI (MPI_THREAD_MULTIPLE) once per process; finalised at exit.
void init_mpi();

// Every process's measured steps (its own rank's ops) gathered on process 0, with each rank's
// host, pid and device. Collective over MPI_COMM_WORLD.
ReplayResult gather_steps(const std::vector<StepRecord>& measured, const std::string& backend,
                          std::vector<std::string> notes, int32_t device = -1,
                          const std::string& device_name = "");

// What a job's PreparedReplay::buffers() returns on one process: an entry per schedule rank, all
// empty unless `check` (a data-check run), when the entry of this process's `rank` holds each of
// its buffers, read by `read(b, values)` into `values` (sized to buffer b's elements).
std::vector<fusion::RankBuffers> own_buffers(
    const fusion::Schedule& s, int rank, bool check,
    const std::function<void(size_t b, std::vector<int64_t>& values)>& read);

// The note of a job's result: "`head`compute `how` for <scale, %.3g> x the recorded duration,
// `data` data".
std::string compute_note(const std::string& head, const char* how, double scale, const char* data);

// True when this process was started by mpirun (OpenMPI, MPICH or a PMI launcher).
bool launched_by_mpirun();

}  // namespace braid::replay

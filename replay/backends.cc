// The backends compiled into this build (BRAID_HAVE_MPI / BRAID_HAVE_NCCL from CMake).
#include <algorithm>
#include <memory>
#include <string>

#include "replay/executor.h"
#include "replay/sim.h"
#include "trace/error.h"

#ifdef BRAID_HAVE_MPI
#include "replay/mpi_executor.h"
#endif
#ifdef BRAID_HAVE_NCCL
#include "replay/nccl_executor.h"
#endif

namespace braid::replay {

std::string launch_problem(std::string_view backend, int nranks) {
  if (backend == "sim" || nranks <= 1) return "";
  const auto have = available_backends();
  if (std::find(have.begin(), have.end(), backend) == have.end()) return "";  // make_executor says
#ifdef BRAID_HAVE_MPI
  if (launched_by_mpirun()) return "";
#endif
  return "the " + std::string(backend) + " backend runs one process per rank: start it as `mpirun -np " +
         std::to_string(nranks) + " braid ...` (as root add --allow-run-as-root; on one host with "
         "fewer cores add --oversubscribe)";
}

std::vector<std::string> available_backends() {
  std::vector<std::string> v{"sim"};
#ifdef BRAID_HAVE_MPI
  v.push_back("mpi");
#endif
#ifdef BRAID_HAVE_NCCL
  v.push_back("nccl");
#endif
  return v;
}

std::unique_ptr<Executor> make_executor(std::string_view name, const analysis::CostModel& model,
                                        const SimOptions& sim) {
  if (name == "sim") return std::make_unique<SimExecutor>(model, sim);
#ifdef BRAID_HAVE_MPI
  if (name == "mpi") return std::make_unique<MpiExecutor>();
#endif
#ifdef BRAID_HAVE_NCCL
  if (name == "nccl") return std::make_unique<NcclExecutor>();
#endif
  std::string have;
  for (const std::string& b : available_backends()) have += (have.empty() ? "" : ", ") + b;
  std::string why;
  if (name == "mpi" || name == "nccl")
    why = name == "mpi" ? " (this build found no MPI)" : " (this build found no CUDA toolkit with NCCL)";
  throw Error(ErrorCode::Unsupported, "replay backend '" + std::string(name) +
                                          "' is not available" + why + "; this build has: " + have);
}

}  // namespace braid::replay

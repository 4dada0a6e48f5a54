// The processes of an MPI job as an analysis's Exchange (analysis/exchange.h): `mpirun -np N
// braid analyze FILES...`. MPI is initialised on first use and finalised when the process exits.
#pragma once

#include <memory>

#include "analysis/exchange.h"

namespace braid::analysis {

std::unique_ptr<Exchange> mpi_exchange();

// Ends the whole MPI job at once (MPI_Abort): for a failure on one process that the others cannot
// know of, which would leave them waiting in the next exchange.
[[noreturn]] void mpi_abort(int code);

}  // namespace braid::analysis

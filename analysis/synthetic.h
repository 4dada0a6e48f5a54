// A synthetic multi-rank job with known answers, written to a `.braid` file through TraceWriter:
// data-parallel training steps with planted clock skews, a straggler and a known critical path.
// Tests of the analyses, the lift and the GUI use it.
//
// Each step on each rank, in true time relative to the step start S (µs), with d the
// straggler's extra backward time (0 on the other ranks):
//
//   stream 7 (compute): fwd gemm [0,100]  bwd gemm1 [100,200+d]  bwd gemm2 [200+d,300+d]
//                       optimizer (elementwise) [max arrival B + 80, +20]
//   stream 13 (comm):   all-reduce A on 'dp' from the end of gemm1 (event wait) to
//                       (last arrival of A) + 80; all-reduce B from max(end of A, end of gemm2)
//                       to (last arrival of B) + 80.
//
// The host launches every kernel well ahead of the GPU (cudaLaunchKernel calls with
// correlation ids, cudaEventRecord / cudaStreamWaitEvent around the comm kernels), except the
// first kernel of a step, launched 1 µs before it runs: the gap between steps is a host gap.
// The host's ProfilerStep of step s spans [S - 2, end of the optimizer], so every kernel is
// launched inside its own step.
// Steps start every `step_period` on the true clock; rank r records every time as
// true + clock_skew[r] (so the offset that aligns it is -clock_skew[r]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/model.h"

namespace braid::analysis {

struct SyntheticJob {
  int nranks = 4;
  int steps = 3;
  int straggler = 3;                  // -1: none
  Ns straggler_delay = 50'000;        // d
  std::vector<Ns> clock_skew;         // per rank (missing ranks: 0)
  Ns end_jitter = 0;                  // collective ends move by a deterministic ±jitter
  bool record_seq = true;             // collectives carry sequence numbers
  int drop_rank = -1, drop_step = -1; // drop all-reduce A of that step on that rank
  int untyped_rank = -1;              // that rank's collectives carry counts, no dtype or bytes
  std::string comm = "dp";
  std::vector<int> only_ranks;        // write only these ranks (a per-process file); empty: all
  int64_t count = 1 << 20;            // float32 elements per all-reduce
  Ns step_period = 1'000'000;
  Ns base = 1'700'000'000'000'000'000;  // the true time of step 0
};

// Writes the job as one run (kind imported, backend "synthetic") of a new file at `path`
// (replacing it) and returns the run id.
int64_t write_synthetic_job(const std::string& path, const SyntheticJob& job);

}  // namespace braid::analysis

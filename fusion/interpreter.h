// The reference interpreter: runs a schedule in memory on int64 data with exact collective
// semantics, so a rewritten schedule can be proven to compute the same buffers as the original.
//
// Semantics (docs/schedule-ir.md):
// - every buffer element starts as initial_value(rank, buffer, index) unless Options::init says
//   otherwise;
// - each stream runs its ops in order; compute with declared reads/writes sets every written
//   element to compute_value(...) of the elements read at the same relative position; opaque
//   compute, delay, record and wait leave data alone;
// - a wait blocks until its event is recorded; a collective (or send/recv pair) runs atomically
//   once every member is at it, reading all inputs before writing any output;
// - arithmetic wraps modulo 2^64 (sums are exact and order-independent).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fusion/ir.h"

namespace braid::fusion {

using RankBuffers = std::map<std::string, std::vector<int64_t>>;

struct StuckOp {
  OpRef ref;
  std::string op;      // describe(schedule, ref)
  std::string reason;  // what it waits for
};

struct Interpretation {
  std::vector<RankBuffers> buffers;  // final contents per rank (partial after a deadlock)
  bool deadlocked = false;
  std::vector<StuckOp> stuck;  // the op each unfinished stream is blocked at
  int64_t executed = 0;        // ops executed
  std::string deadlock_message() const;
};

struct InterpreterOptions {
  // Initial contents; default initial_value.
  std::function<int64_t(int32_t rank, const std::string& buffer, int64_t index)> init;
};

// The rank whose data a replicated compute or buffer (Compute::replicated, Buffer::replicated)
// takes on `rank`: the communicator's first member, so every member computes the same values;
// `rank` itself otherwise.
int32_t value_rank(const Schedule& s, int32_t rank, const std::string& replicated);

// Deterministic initial contents, in [0, 1000000) so values stay readable.
int64_t initial_value(int32_t rank, std::string_view buffer, int64_t index);

// out[i] = initial_value(rank, buffer, i) for i in [0, n), the name hashed once: how the
// interpreter and the replay backends fill a buffer.
void fill_initial_values(int32_t rank, std::string_view buffer, int64_t* out, int64_t n);

// The value compute `label` on `rank` writes at element `index` of buffer `buffer`, given the
// values read at the same relative position of each read slice (in order). Uses the absolute
// index, so splitting a compute into chunks with the same label gives the same data.
int64_t compute_value(std::string_view label, int32_t rank, std::string_view buffer,
                      int64_t index, const std::vector<int64_t>& inputs);

// What compute `c` on `rank` writes, one vector per write slice, given the contents of its read
// slices in order: element j of write w is compute_value(label, value_rank, w.buffer,
// w.offset + j, the reads' elements at j mod their counts). The one definition the interpreter
// and the replay backends' data checks share.
// The reads are views of the caller's buffers (nothing is copied); the outputs are computed
// before anything is written, so a write may overlap a read.
std::vector<std::vector<int64_t>> compute_outputs(const Schedule& s, int32_t rank, const Compute& c,
                                                  const std::vector<std::span<const int64_t>>& in);

// Runs `s`. Throws braid::Error(BadFormat) listing the problems when the schedule fails
// validation (other than deadlock, which the run itself reports in the result).
Interpretation interpret(const Schedule& s, const InterpreterOptions& opt = {});

}  // namespace braid::fusion

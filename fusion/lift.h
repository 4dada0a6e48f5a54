// Lifting a trace run into the schedule IR (DESIGN.md, "The schedule IR").
//
// Per rank and stream, the GPU activities of the run become ops in start order:
//   - kernels and memcpys -> opaque `compute` (duration from the trace; opaque, since a trace
//     does not say which buffers a kernel touches);
//   - kernels that carried a collective matched on every member rank (analysis/matching.h)
//     -> `collective` on the communicator, with a fresh in/out buffer pair per collective
//     sized from the trace's counts; collectives that are unmatched, mismatched, of an
//     operation the IR cannot express (send/recv without direction, gather, scatter, barrier),
//     a broadcast/reduce without root, or out of order with the other ranks stay as opaque
//     compute labelled with what they were;
//   - host gaps (a stream idle though its previous op and its dependency had finished) longer
//     than `min_gap_ns` -> `delay`;
//   - cross-stream dependencies inferred by analysis/timeline.h -> `record` after the producer
//     and `wait` before the consumer; consecutive collectives of one communicator on different
//     streams are ordered by an event too (NCCL runs a communicator's operations in one order).
// Collectives seen only on the host go on a stream named "host".
//
// Schedule ranks are numbered 0..n-1 in the order of the run's ranks; every assumption (rank
// renumbering, sizes, inferred dependencies, what was left opaque and why) is written into
// `Schedule::provenance`. The result passes fusion::validate(); lift_run throws
// braid::Error(Internal) naming the first problem otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/matching.h"
#include "analysis/run_data.h"
#include "analysis/timeline.h"
#include "fusion/ir.h"
#include "trace/reader.h"

namespace braid::fusion {

struct LiftOptions {
  int64_t step = -1;       // only the ops that start inside this step (steps table); -1: all
  Ns min_gap_ns = 1'000;   // shorter host gaps are not written as delays
  bool infer_dependencies = true;
  analysis::TimelineOptions timeline;
  // As in PipelineOptions: `cancel`, when set and true, stops the lift (braid::Error "cancelled",
  // nothing stored); `progress`, when set, is told each phase as it starts (index, count: load,
  // match, lift, store), braid-view's "Lift" running in the background.
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(size_t phase, size_t phases)> progress = nullptr;
};

// Bad input (braid::Error, message naming the file and run): a run with one rank (Usage), a run
// whose collectives match across ranks on no communicator (BadFormat), a step the trace does not
// have (Usage).
Schedule lift_run(const TraceReader& reader, int64_t run_id, const LiftOptions& opt = {});
// The same from a loaded run and its matching (what `braid analyze` already has).
Schedule lift(const analysis::RunData& run, const analysis::MatchResult& match,
              const LiftOptions& opt = {});

// The run (and step, -1: the whole run) a lifted schedule came from, read back from the
// provenance line lift writes (kept by the passes, so a fused schedule names it too); run -1
// when the schedule was not lifted.
struct LiftSource {
  int64_t run = -1;
  int64_t step = -1;
};
LiftSource lifted_from(const Schedule& s);
// The schedule communicator id lift gives a trace communicator ("" -> "default").
std::string lifted_comm_id(std::string_view trace_comm);

// Lifts `run` (-1: analysis::default_run) of the `.braid` file at `path`, optionally one step,
// and stores the schedule in the file as a root schedule (what `braid lift` does, and
// `braid fuse` and braid-view's "Lift" on a file with a run and no schedule). Throws
// braid::Error with nothing stored on bad input.
struct LiftedRun {
  int64_t run_id = -1;
  int64_t schedule_id = -1;
  Schedule schedule;
};
LiftedRun lift_into_file(const std::string& path, int64_t run = -1, int64_t step = -1);
// The same with options (`opt.step` is the step; cancel and progress as LiftOptions says).
LiftedRun lift_into_file(const std::string& path, int64_t run, const LiftOptions& opt);

// What `braid lift` prints: ranks and ops, collectives by operation with bytes, the collectives
// left opaque (by label), and the provenance (every assumption, and why what stayed opaque did).
std::vector<std::string> lift_summary(const Schedule& s);

}  // namespace braid::fusion

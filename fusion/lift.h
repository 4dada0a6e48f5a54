// Lifting a trace run into the schedule IR (../shared/DESIGN.md, "The schedule IR").
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
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/matching.h"
#include "analysis/run_data.h"
#include "analysis/timeline.h"
#include "fusion/ir.h"
#include "fusion/lift_et.h"
#include "trace/json.h"
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
  // The run's execution-trace data flow (fusion/lift_et.h; lift_run loads it): compute ops the
  // ET covers read and write storage ranges instead of being opaque, collectives take their
  // buffers from its tensors, and dependencies between streams come from the storages.
  const EtFlow* et = nullptr;
};

// What a lift found, for `braid lift`'s summary and --json: op counts, how many compute ops have
// data flow, which stayed opaque and why.
struct LiftReport {
  int64_t ops = 0, compute = 0, compute_with_dataflow = 0, collectives = 0, opaque_collectives = 0;
  int64_t dataflow_deps = 0, timing_deps = 0;
  bool execution_trace = false;  // the run has execution-trace data
  int64_t step = -1;             // the step lifted (-1: the whole run)
  std::string step_reason;       // why that step, when the lift chose it
  struct Opaque {
    std::string op, reason;
    int64_t count = 0;
  };
  std::vector<Opaque> opaque;  // grouped by (op's short name, reason), most first
  // The JSON `braid lift --json` prints (one writer: trace/json.h): an object of these fields,
  // or the fields into an object being written.
  std::string json() const;
  void write_fields(json::Writer& w) const;
};

// Bad input (braid::Error, message naming the file and run): a run with one rank (Usage), a run
// whose collectives match across ranks on no communicator (BadFormat), a step the trace does not
// have (Usage).
//
// A run with execution-trace data and no `opt.step` is lifted on the one step its execution
// traces cover (when they cover one), since the others' compute would be opaque.
Schedule lift_run(const TraceReader& reader, int64_t run_id, const LiftOptions& opt = {},
                  LiftReport* report = nullptr);
// The same from a loaded run and its matching (what `braid analyze` already has).
Schedule lift(const analysis::RunData& run, const analysis::MatchResult& match,
              const LiftOptions& opt = {}, LiftReport* report = nullptr);

// The provenance line a lifted schedule starts with ("lifted from trace run 3, step 552 by
// fusion::lift"), for people; programs read Schedule::lifted.
std::string lift_provenance_line(int64_t run, int64_t step);
// The schedule communicator id lift gives a trace communicator ("" -> "default").
std::string lifted_comm_id(std::string_view trace_comm);

// Where each rank's lifted ops lie: in the rank's own clock, the first start and last end of the
// ops of `step` (-1: the whole run; a CPU job's compute from its execution traces included), and
// the rank's clock offset aligned on the matched collectives (analysis/clock.h). The job's step
// starts at the earliest first op on the job axis; each rank starts its lifted step that much
// later (`lead`), which the lift writes as each stream's first delay, so ranks that started late
// in the trace start late in the replay (the skew that makes the others wait). A rank's original
// step time is from the job's step start to its last op (replay/fidelity.h).
struct LiftedSpan {
  Ns first = 0, last = 0;  // the rank's clock
  Ns offset = 0;           // job = rank clock + offset
  bool aligned = false;    // false: no matched collective links it (offset 0, lead 0)
  Ns lead = 0;             // first + offset - job_start (0 when not aligned)
  Ns step_ns = 0;          // last + offset - job_start (last - first when not aligned)
  bool has_ops = false;
};
struct LiftedSpans {
  Ns job_start = 0;
  std::map<int32_t, LiftedSpan> ranks;  // by trace rank
  double residual_rms_ns = 0;
  int anchors = 0;
};
LiftedSpans lifted_spans(const analysis::RunData& run, const analysis::MatchResult& match,
                         int64_t step, const EtFlow* et = nullptr);

// Lifts `run` (-1: analysis::default_run) of the `.braid` file at `path`, optionally one step,
// and stores the schedule in the file as a root schedule (what `braid lift` does, and
// `braid fuse` and braid-view's "Lift" on a file with a run and no schedule). Throws
// braid::Error with nothing stored on bad input.
struct LiftedRun {
  int64_t run_id = -1;
  int64_t schedule_id = -1;
  Schedule schedule;
  LiftReport report;
};
LiftedRun lift_into_file(const std::string& path, int64_t run = -1, int64_t step = -1);
// The same with options (`opt.step` is the step; cancel and progress as LiftOptions says).
LiftedRun lift_into_file(const std::string& path, int64_t run, const LiftOptions& opt);

// What `braid lift` prints: ranks and ops, collectives by operation with bytes, the collectives
// left opaque (by label), and the provenance (every assumption, and why what stayed opaque did).
std::vector<std::string> lift_summary(const Schedule& s);
// The same with what the lift reported: compute with data flow, opaque ops by reason.
std::vector<std::string> lift_summary(const Schedule& s, const LiftReport& report);

}  // namespace braid::fusion

// `braid analyze` of one file without holding the whole run: every rank's collectives and steps
// (load_skeleton, analysis/run_data.h) for matching and clock alignment, then
//   1. rank by rank: the rank's events in full (fill_rank), its metrics rows, top kernels and
//      its members' exposure, and where each step's GPU work lies on its streams; then the rank
//      is let go;
//   2. a batch of consecutive steps at a time (AnalyzeOptions::batch_ops GPU ops of all ranks,
//      about; by default one rank's share): each rank's window that holds the batch's work
//      (fill_window), its timeline, and the critical path of each step of the batch.
// What it holds: every rank's collectives and steps (and the launches of its collectives where
// one has no enqueue time), the matching and per-collective metrics, one rank's events, and one
// batch's windows; not every event of the run. The result is analyze()'s, to the
// nanosecond: a step's critical path walks only the GPU work that step launched, and the window
// of a rank holds that work, the stream predecessor of each piece, the work of other streams
// that ended just before it (its possible dependencies), and the launch calls of the steps.
// A run without steps has one critical path over the whole run: its ranks are then held whole.
#pragma once

#include <cstdint>

#include "analysis/analyze.h"
#include "trace/reader.h"

namespace braid::analysis {

// Whether analyze() streams `run` (AnalyzeOptions::stream).
bool streams(const TraceReader& reader, int64_t run, const AnalyzeOptions& opt);

// What analyze_streamed() holds at most, estimated from the row counts: the collectives with
// their launches, matching and metrics; one rank's events (the run's share of one rank); one
// batch of windows.
int64_t streamed_bytes(const TraceReader& reader, int64_t run, const AnalyzeOptions& opt);

// analyze() of `run`, streamed. Throws braid::Error(Unsupported) before it reads an event when
// even that would not fit (the collectives, one rank and one batch against memory_left()).
Analysis analyze_streamed(const TraceReader& reader, int64_t run, const AnalyzeOptions& opt);

}  // namespace braid::analysis

// What a `.braid` file holds beyond the events, when earlier stages have written it: the
// opportunities found by the fusion passes (placed on the timeline through the schedule they
// name), fused operations and the operations they replace, and the analysis tables.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "app/view/core/view_run.h"
#include "fusion/ir.h"
#include "fusion/schedule_store.h"
#include "trace/reader.h"

namespace braid::view {

struct OpportunityView {
  fusion::StoredOpportunity o;
  std::vector<int32_t> colls;  // the run's collectives its ops map to (all ranks of each match)
  Ns t0 = -1, t1 = -1;         // where they are on the run's axis, -1 when none maps
};

// A table of an analysis stage: every table the core schema does not define that has a
// `run_id` column, with this run's rows (shown as they are, so new analyses need no GUI change).
// Read by the store (TraceReader::extra_tables).
using AnalysisTable = TraceReader::TableText;

// One segment of the cross-rank critical path `braid analyze` found (analysis_critical_path),
// on the job axis. kind: kernel, memcpy, collective or gap (the GPU waiting for the host).
struct CriticalSegment {
  int64_t step = -1;
  std::string kind;
  int32_t rank = -1;
  int64_t stream = -1;
  Ns start = 0, end = 0;
  std::string name;
};

struct Extras {
  bool has_schedules = false;
  bool analyzed = false;  // the file has analysis_* tables for this run
  std::vector<CriticalSegment> critical_path;
  std::map<std::string, std::string> comm_dim;       // comm -> TP, DP, ... (analysis_communicators)
  std::map<std::string, std::string> comm_evidence;  // comm -> why
  std::vector<OpportunityView> opportunities;        // largest predicted saving first
  std::vector<AnalysisTable> analysis;
  std::string error;  // a problem reading them (shown, never fatal)
};

Extras load_extras(const ViewRun& run, size_t max_rows = 5000);

// The run's collectives that stand for op `op_id` of `s`: a schedule's collectives are matched
// to a trace's by (communicator, order within the communicator on the rank), the same rule
// that matches them across ranks. Element k holds every rank's instance of the matched
// collective in the k-th repetition of the schedule (a replay of several steps runs the
// schedule's collectives on each communicator once per step); at most `max_steps` elements.
std::vector<std::vector<int32_t>> colls_of_op_per_step(const ViewRun& d, const fusion::Schedule& s,
                                                       int64_t op_id, size_t max_steps = SIZE_MAX);
// The first repetition's instances (colls_of_op_per_step's element 0), or none.
std::vector<int32_t> colls_of_op(const ViewRun& d, const fusion::Schedule& s, int64_t op_id);

// A fused operation of the schedule a replayed run executed, and the parent-schedule
// operations it replaces, each placed on its run (baseline: the parent's run), step by step:
// the fused collective of B's k-th step stands for what A ran in its k-th step only.
struct FusedLink {
  int64_t op_id = -1;
  int32_t rank = -1;
  std::string what;    // "allreduce on 'dp'"
  int64_t order = -1;  // the op's position among its rank's collectives on its communicator
  std::vector<int64_t> replaces;
  struct Step {
    std::vector<int32_t> fused;     // in the fused run (every rank's instance)
    std::vector<int32_t> replaced;  // in the baseline run
  };
  std::vector<Step> steps;  // by repetition: steps[k] pairs B's k-th with A's k-th
};
// Empty when `fused` has no schedule or its schedule has no parent. Throws braid::Error on an
// unreadable schedule.
std::vector<FusedLink> fused_links(const ViewRun& baseline, const ViewRun& fused);

// The fused operations once each (the Compare tab's list): links of the same collective on
// different ranks (same description, communicator position and replaced count) together.
struct FusedOpSummary {
  std::string what;            // "allreduce on 'dp' #2": the 2nd collective on 'dp' of a step
  size_t replaces = 0;         // ops of the parent each rank's instance replaces
  std::vector<size_t> links;   // indexes into the fused_links result
  std::vector<int32_t> ranks;  // ranks it runs on
  size_t steps = 0;            // steps in which B ran it (and A what it replaces)
};
std::vector<FusedOpSummary> summarize_links(const std::vector<FusedLink>& links);

}  // namespace braid::view

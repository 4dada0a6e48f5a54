// The `sim` backend: a discrete-event simulation of a schedule with the α-β cost model.
//
// Every stream is an in-order queue with its own clock. Compute and delay ops take their
// recorded duration (times the compute scale, plus a per-op overhead, SimOptions in replay/executor.h); a wait starts no earlier
// than its event's record; a collective (or send/recv pair) starts when its last member arrives
// and takes CostModel::collective_ns for its op, size and communicator (members decide whether
// the intra- or inter-node link of the profile's topology is used). Each member's op spans from
// its own arrival to the common end, as a trace shows a collective kernel that waits for its
// peers. By default resources are not shared: concurrent collectives do not slow each other
// down and kernels on two streams of one device overlap fully (docs/replay.md). With
// SimOptions::host_cores (a calibrated oversubscribed host) collectives share the cores their
// members are pinned to (processor sharing).
//
// The simulation is event-driven over the dependency graph: each stream advances until it
// blocks on an event or a collective, and the op that unblocks it re-queues it, so a schedule
// of N ops simulates in O(N) (1024 ranks in well under a second, bench/bench_sim.cc). With
// processor sharing a collective's end depends on what runs beside it: once every stream is
// blocked, the collectives with all members present advance in time order on a fluid model of
// the cores until the first ends, which unblocks its members.
#pragma once

#include <memory>

#include "analysis/cost_model.h"
#include "fusion/validate.h"
#include "replay/executor.h"

namespace braid::replay {

struct SimResult {
  StepRecord step;                    // every rank's op times
  std::vector<fusion::OpRef> order;   // ops in the order the simulation completed them
  Ns step_ns() const { return step.step_ns(); }
};

// Simulates one step of `s`, which must be valid (see checked_matching).
SimResult simulate(const fusion::Schedule& s, const fusion::Matching& m,
                   const analysis::CostModel& model, const SimOptions& o = {});
// Validates, matches and simulates.
SimResult simulate(const fusion::Schedule& s, const analysis::CostModel& model,
                   const SimOptions& o = {});

// The sim backend as an Executor: one process; each step is the same simulation. In Check mode
// its data is the reference interpreter's (fusion::interpret), the sim's model of the data.
class SimExecutor : public Executor {
 public:
  explicit SimExecutor(analysis::CostModel model, SimOptions o = {})
      : model_(std::move(model)), opt_(o) {}
  std::string_view backend() const override { return "sim"; }
  RunKind run_kind() const override { return RunKind::Simulated; }
  std::unique_ptr<PreparedReplay> prepare(const fusion::Schedule& s,
                                          const ReplayOptions& o) override;
  const analysis::CostModel& model() const { return model_; }

 private:
  analysis::CostModel model_;
  SimOptions opt_;
};

}  // namespace braid::replay

// Per-rank stream timelines with the cross-stream dependencies the trace shows.
//
// Every GPU activity (kernel, memcpy/memset) becomes an op on its stream, in start order; a
// kernel that carried a collective points at it. Collectives seen only on the host (no GPU
// kernel) go on a pseudo-stream -1, with the host compute the lift may add (RankTrace::
// host_compute: a CPU job's ops; other threads' on pseudo-streams -2, -3, ...).
//
// Kineto and Nsight record the host calls cudaEventRecord / cudaStreamWaitEvent but not which
// event and stream they name, so dependencies are inferred from timing: an op whose start is
// later than both its stream predecessor's end and its launch time (when known) was held back
// by something else; if an op on another stream of the same rank ended within `dep_slack_ns`
// before it started (and after the stream was free), that op is taken as the dependency. The
// evidence of each edge (whether the rank issued cudaStreamWaitEvent at all, launch known or
// not) is kept, for the provenance of lifted schedules.
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/run_data.h"

namespace braid::analysis {

enum class OpType : uint8_t { Kernel, Memcpy, HostCollective, HostCompute };

struct GpuOp {
  OpType type = OpType::Kernel;
  int32_t index = -1;  // into RankTrace::kernels / memcpys / collectives / host_compute
  int32_t coll = -1;   // the collective this op carries (index into RankTrace::collectives)
  Ns start = 0, end = 0;
  Ns launch = -1;      // host launch time, -1 unknown
  Category category = Category::Other;
};

struct StreamOps {
  int64_t stream = 0;  // CUDA stream id, -1 for host-side collectives
  std::vector<GpuOp> ops;
};

struct OpPos {
  int32_t stream = -1;  // index into RankTimeline::streams
  int32_t index = -1;
  bool valid() const { return stream >= 0; }
  auto operator<=>(const OpPos&) const = default;
};

struct DepEdge {
  OpPos from, to;
  bool wait_event_seen = false;  // the rank issued cudaStreamWaitEvent calls
  bool launch_known = false;     // the waiting op's launch time is known
};

struct RankTimeline {
  int32_t rank = 0;
  std::vector<StreamOps> streams;  // by stream id
  std::vector<DepEdge> deps;       // cross-stream, at most one per waiting op
  std::map<int32_t, OpPos> coll_pos;  // collective index -> its op
  // The ops each step launched (op_step), in stream then start order: what a step's analyses
  // visit instead of every op of the rank. Ops in no step are not listed.
  std::map<int64_t, std::vector<OpPos>> by_step;

  const GpuOp& op(OpPos p) const { return streams[p.stream].ops[p.index]; }
  // The inferred dependency of `p`, or nullptr.
  const DepEdge* dep_of(OpPos p) const;
};

struct TimelineOptions {
  Ns dep_slack_ns = 5'000;  // how close an end must be to a start to explain it
  // A timeline of a window of the rank (fill_window, analysis/stream.h): which collectives the
  // whole rank's timeline put on the host pseudo-stream (host_side()), since a window's kernels
  // are only some of those that carry them. Null: decided by the rank's own kernels.
  const std::vector<bool>* host_side = nullptr;
  // Only the collectives that start in [colls_from, colls_to) (the rank's collectives are in start
  // order): a window's, whose other collectives its kernels cannot carry.
  Ns colls_from = INT64_MIN, colls_to = INT64_MAX;
};

RankTimeline build_timeline(const RankTrace& rank, const TimelineOptions& opt = {});

// Per collective of the rank, whether `tl` (a whole rank's timeline) has it on the host
// pseudo-stream: carried by no kernel.
std::vector<bool> host_side(const RankTimeline& tl, size_t collectives);

// The step an op belongs to (RankTrace::kernel_step / memcpy_step / collective_step), -1 none.
int64_t op_step(const RankTrace& rank, const GpuOp& op);

}  // namespace braid::analysis

// The data flow a lift takes from a run's execution traces (docs/import-et.md, docs/fusion.md
// "Proven and advice"): per rank, the ET ops `braid import --et` joined to the trace's CPU ops,
// each with the storage byte ranges it reads and writes.
//
// A storage id names an allocation only until it is freed: PyTorch's ET keys storages by their
// data pointer, which a later allocation may reuse. An op's output on a storage none of its
// inputs use is a fresh allocation and starts a new generation of that storage (its inner ops,
// which list the same tensor, do not); every access names the generation current when its op
// ran, in the order the ops were entered (node ids). A generation is one buffer of the lifted
// schedule.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/run_data.h"
#include "analysis/timeline.h"
#include "fusion/ir.h"
#include "trace/model.h"
#include "trace/reader.h"

namespace braid::fusion {

struct EtAccess {
  int64_t storage = 0;
  int32_t gen = 0;
  int64_t lo = 0, hi = 0;  // bytes of the storage
  std::string dtype;
  int32_t itemsize = 0;
  int64_t numel = 0;
  // The tensor covers [lo, hi) without gaps (a dense, non-overlapping layout).
  bool dense() const { return hi - lo == numel * itemsize; }
};

struct EtFlowOp {
  int64_t node = 0, parent = 0;
  std::string name;
  EtOpKind kind = EtOpKind::Op;
  bool joined = false;
  int64_t tid = -1;
  Ns start = -1, end = -1;
  int64_t step = -1;
  std::vector<EtAccess> reads, writes;  // inputs, outputs (an in-place op's self is both)
  // A joined descendant computes (kind Op with tensors) or communicates (kind Comm).
  bool computing_descendant = false;
  bool computes() const { return kind == EtOpKind::Op && (!reads.empty() || !writes.empty()); }
};

struct RankEtFlow {
  std::vector<EtFlowOp> ops;                       // by node id
  std::unordered_map<int64_t, int32_t> by_node;    // node id -> index into ops
  std::map<int64_t, std::vector<int32_t>> by_tid;  // joined ops per thread, by (start, -end)
  std::unordered_map<int64_t, std::pair<int64_t, Ns>> launches;  // correlation -> (tid, time)

  const EtFlowOp* parent_of(const EtFlowOp& op) const;
  // The innermost joined op on `tid` whose span holds `t` (nullptr: none).
  const EtFlowOp* innermost(int64_t tid, Ns t) const;
  // The op that launched the GPU activity with this correlation id: the innermost joined op
  // around its launch call, or its nearest ancestor that computes (nullptr: none).
  const EtFlowOp* launched_by(int64_t correlation) const;
  // The communication op at or above `op` (itself or an ancestor); nullptr when none.
  const EtFlowOp* comm_of(const EtFlowOp* op) const;
  // The joined communication op whose trace op started at `start` under this name.
  const EtFlowOp* comm_at(Ns start, std::string_view name) const;
};

struct EtFlow {
  std::map<int32_t, RankEtFlow> ranks;
  std::set<int64_t> steps;  // the steps holding joined ops (on any rank)
  bool empty() const { return ranks.empty(); }
};

// Loads the execution-trace tables of `run`; empty when the file has none.
EtFlow load_et_flow(const TraceReader& r, int64_t run);

// A CPU job's compute (analysis::RankTrace::host_compute) from its joined ET ops: those that
// compute and have no descendant that computes or communicates (aten::addmm, not the
// aten::linear around it; not a Python autograd function around its all-reduce), with
// their host times; the thread that issues the collectives is pseudo-stream -1, others -2, -3,
// ... `ref` indexes `flow.ops`.
std::vector<analysis::HostCompute> et_host_compute(const RankEtFlow& flow);

// `t` as the lift sees rank `rank`: a CPU job's (no kernels, no copies) with its compute from
// the execution traces (et_host_compute); unchanged otherwise or without an ET for the rank.
analysis::RankTrace with_host_compute(const analysis::RankTrace& t, const EtFlow* et, int32_t rank);

// The lifted buffer name of a storage generation ("st12", "st12.3").
std::string et_buffer_name(int64_t storage, int32_t gen);

}  // namespace braid::fusion

namespace braid::fusion {

// What a lift of one rank takes from its execution-trace data flow (fusion/lift.cc): pass 1
// tells it every op it will emit with the ET op behind it; finish() decides the buffers (one per
// storage generation, in the dtype of the collective that uses it, else of its first tensor),
// the cross-stream dependencies the storages imply, and the rank's outputs; pass 2 reads the
// slices back.
class EtRankPlan {
 public:
  struct Coll {
    std::optional<Slice> in, out;  // the collective's own tensors, when they fit its IR form
    // Otherwise a zero-time copy on the collective's stream stages the data: reads of the ET's
    // input tensors into the collective's own input buffer, and from its output buffer into the
    // ET's output tensors.
    bool stage_in = false, stage_out = false;
    std::vector<Slice> stage_reads, stage_writes;
  };

  // Pass 1. `op` may be null (no ET op: opaque compute). Collectives: `comm` null when the ET
  // has no op for it; in_n / out_n are element counts of `dtype` (-1: no such side).
  void add_compute(analysis::OpPos pos, const EtFlowOp* op, Ns start, Ns end);
  void add_collective(analysis::OpPos pos, const EtFlowOp* comm, CollOp op,
                      const std::string& dtype, int64_t in_n, int64_t out_n, Ns start, Ns end);
  void finish();

  // Pass 2.
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<std::string>& outputs() const { return outputs_; }
  // The compute's reads and writes (false: the op has no ET data and stays opaque).
  bool compute(analysis::OpPos pos, std::vector<Slice>& reads, std::vector<Slice>& writes) const;
  const Coll* collective(analysis::OpPos pos) const;
  // Producers on other streams that `pos` must wait for, from the storages (empty when the op
  // has no ET data: timing decides).
  const std::vector<analysis::OpPos>& deps(analysis::OpPos pos) const;
  bool has_flow(analysis::OpPos pos) const { return ops_.count(pos) && ops_.at(pos).flow; }
  int64_t dataflow_deps() const { return dep_count_; }

 private:
  struct Touch {
    analysis::OpPos pos;
    Ns start = 0, end = 0;
    std::vector<EtAccess> reads, writes;
    bool flow = false;
    bool coll = false;
    CollOp op = CollOp::Unknown;
    std::string dtype;
    int64_t in_n = -1, out_n = -1;
    std::optional<EtAccess> in, out;  // chosen tensors of a collective
  };
  struct BufInfo {
    std::string name, dtype;
    int32_t itemsize = 1;
    int64_t bytes = 0;
  };
  std::string key(const EtAccess& a) const;
  Slice slice(const EtAccess& a) const;

  std::map<analysis::OpPos, Touch> ops_;
  std::map<std::string, BufInfo> bufs_;  // by storage generation key
  std::map<analysis::OpPos, Coll> colls_;
  std::map<analysis::OpPos, std::vector<analysis::OpPos>> deps_;
  std::vector<Buffer> buffers_;
  std::vector<std::string> outputs_;
  int64_t dep_count_ = 0;
};

}  // namespace braid::fusion

// The Chimera rewrites side by side with the seeds' closed forms (issue 22, docs/fusion.md
// "Closed forms side by side"): per preset at the shapes of Chimera's experiments, the bytes on
// the wire per rank of the collectives the preset's rewrite replaces and of those it adds, from
// the seeds' ring formulas and as the simulator moves them, and the simulated communication and
// step time before and after. Used by bench/bench_chimera_bytes.cc (the table) and
// tests/fusion/chimera_bytes_test.cc (formula vs Braid within 5%).
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "fusion/dataflow.h"
#include "fusion/pass_schedules.h"
#include "fusion/pipeline.h"
#include "fusion/synth.h"
#include "replay/common.h"
#include "replay/sim.h"

namespace braid::fusion::testing {

// Bytes and times per rank (the rank with the most bytes replaced).
struct ChimeraRow {
  std::string preset, pass;
  size_t applied = 0;
  double formula_before = 0, formula_after = 0;  // bytes per rank, the seeds' formulas
  double braid_before = 0, braid_after = 0;      // bytes per rank as the simulator moves them
  Ns comm_before = 0, comm_after = 0;            // simulated time of those collectives, per rank
  Ns step_before = 0, step_after = 0;            // simulated step
  std::map<std::string, int> ops_before, ops_after;  // "all-reduce" -> count on that rank
  std::string formula;                               // the closed form, in words
};

// Bytes one rank puts on the wire for its member op of a collective, as the sim prices it: the
// member's nccl-tests size times the wire factor of the algorithm the cost model picks (a
// receive puts nothing on the wire; its send counts on the sender).
inline double sim_wire_bytes(const Schedule& s, const Collective& c,
                             const analysis::CostModel& cm) {
  if (c.op == CollOp::Recv) return 0;
  const Comm* comm = s.find_comm(c.comm);
  const int n = c.op == CollOp::Send ? 2 : static_cast<int>(comm->ranks.size());
  const int64_t bytes = fusion::collective_bytes(s, c);
  const CollOp op = replay::cost_op(c.op);
  const auto algo = cm.choose(op, bytes, n, c.comm, comm ? comm->ranks : std::vector<int32_t>{});
  return analysis::wire_factor(op, n, algo) * static_cast<double>(bytes);
}

inline Ns sim_coll_ns(const Schedule& s, const Collective& c, const analysis::CostModel& cm) {
  const Comm* comm = s.find_comm(c.comm);
  const int n =
      (c.op == CollOp::Send || c.op == CollOp::Recv) ? 2 : static_cast<int>(comm->ranks.size());
  return cm.collective_ns(replay::cost_op(c.op), fusion::collective_bytes(s, c), n, c.comm,
                          comm ? comm->ranks : std::vector<int32_t>{});
}

inline std::string kind_name(CollOp op) {
  switch (op) {
    case CollOp::AllReduce:
      return "AR";
    case CollOp::AllGather:
      return "AG";
    case CollOp::ReduceScatter:
      return "RS";
    case CollOp::AllToAll:
      return "A2A";
    case CollOp::Send:
      return "send";
    case CollOp::Recv:
      return "recv";
    case CollOp::ManyToMany:
      return "M2M";
    case CollOp::Broadcast:
      return "bcast";
    case CollOp::Reduce:
      return "reduce";
    default:
      return "other";
  }
}

// The Chimera rule of each preset.
inline std::string chimera_pass(const std::string& preset) { return preset; }

// The seeds' ring formulas (seed 000: AR 2(t-1)/t·B, AG and RS (t-1)/t·B, A2A (e-1)/e·B·k, P2P B,
// many-to-many scatter B; B = b·s·h bytes) applied to the collectives the preset's rewrite
// replaces and adds on the rank that replaces the most, forward and backward together. G: the
// bytes of the weights whose gradients become partial per TP rank (router + local experts).
inline void chimera_formula(const Preset& p, ChimeraRow& row) {
  const double B = static_cast<double>(p.model.micro_batch * p.model.seq * p.model.hidden *
                                       dtype_bytes_of(p.model.dtype));
  const double t = p.layout.tp, e = p.layout.ep, k = static_cast<double>(p.model.top_k);
  const double ar = 2 * (t - 1) / t, ag = (t - 1) / t, a2a = (e - 1) / e * k;
  const double G = static_cast<double>(
      (p.model.hidden * p.model.experts +
       p.model.experts / p.layout.ep * 2 * p.model.hidden * p.model.ffn_size()) *
      dtype_bytes_of(p.model.dtype));
  if (p.name == "tp-pp") {
    // Each stage's sending rank: AR + P2P (forward to the next stage, backward to the previous)
    // -> RS + P2P of B/t + the receiving group's AG.
    row.formula_before = ar * B + B;
    row.formula_after = ag * B + B / t + ag * B;
    row.formula = "AR + P2P = (2(t-1)/t + 1)·B -> RS + P2P/t + AG = (2(t-1)/t + 1/t)·B";
  } else if (p.name == "tp-ep") {
    // Forward: attention AR + dispatch and combine A2A; backward: both A2A again. After: RS,
    // four A2A of B/t, AG of the layer output and of the input gradient (the RS's backward),
    // and the AR of the partial router / expert gradients.
    row.formula_before = ar * B + 4 * a2a * B;
    row.formula_after = ag * B + 4 * a2a * B / t + 2 * ag * B + 2 * (t - 1) / t * G;
    row.formula = "AR + 4 A2A -> RS + 4 A2A/t + 2 AG + AR(G)";
  } else if (p.name == "sp-ep") {
    // Forward: AG of the sequence shards + 2 A2A (the output read by shard); backward: AG of
    // the output gradient, 2 A2A, RS of the input gradient. After: 4 A2A of B/t and the AR of
    // the partial gradients.
    row.formula_before = 3 * ag * B + 4 * a2a * B;
    row.formula_after = 4 * a2a * B / t + 2 * (t - 1) / t * G;
    row.formula = "2 AG + RS + 4 A2A -> 4 A2A/t + AR(G)";
  } else if (p.name == "pp-ep") {
    // A receiving-stage rank: dispatch A2A (forward; the P2P into it it only receives) and the
    // backward A2A + P2P back -> the many-to-many gather it sends (B); the scatter it receives.
    row.formula_before = 2 * a2a * B + B;
    row.formula_after = B;
    row.formula = "2 A2A + P2P -> M2M (B)";
  } else if (p.name == "pp-sp") {
    // A sending rank: AG of the stage output's shards + P2P of the full activation -> one
    // many-to-many multicast of its shard to the t receivers (B).
    row.formula_before = ag * B + B;
    row.formula_after = B;
    row.formula = "AG + P2P -> M2M (B)";
  }
}

inline ChimeraRow chimera_row(const std::string& preset, const analysis::CostModel& cm) {
  ChimeraRow row;
  row.preset = preset;
  row.pass = chimera_pass(preset);
  const Preset p = preset_at_chimera_shape(preset);
  const Schedule s = synthesize(p.model, p.layout, cm);
  PipelineOptions o;
  o.passes = {row.pass};
  o.step_ns = [&cm](const Schedule& x) { return replay::simulate(x, cm).step_ns(); };
  const PipelineResult r = run_pipeline(s, cm, o);
  row.applied = r.applied.size();
  row.step_before = r.baseline_step_ns;
  row.step_after = r.fused_step_ns;
  // Ops of the fused schedule by id: a rewrite may change an op in place (an All-Reduce that
  // becomes a Reduce-Scatter keeps its id); it counts as replaced and added.
  std::map<int64_t, const Op*> fused;
  for (const auto& rk : r.schedule.ranks)
    for (const auto& st : rk.streams)
      for (const auto& op : st.ops) fused[op.id] = &op;
  auto changed = [&](const Op& op) {
    auto it = fused.find(op.id);
    return it == fused.end() || !(*it->second == op);
  };
  std::set<int64_t> changed_ids;
  for (const auto& rk : s.ranks)
    for (const auto& st : rk.streams)
      for (const auto& op : st.ops)
        if (op.collective() && changed(op)) changed_ids.insert(op.id);
  const int64_t first_new = s.next_op_id();
  struct Acc {
    double before = 0, after = 0;
    Ns tb = 0, ta = 0;
    std::map<std::string, int> ob, oa;
  };
  std::vector<Acc> acc(s.ranks.size());
  for (size_t i = 0; i < s.ranks.size(); ++i) {
    for (const auto& st : s.ranks[i].streams)
      for (const auto& op : st.ops)
        if (const Collective* c = op.collective(); c && changed_ids.count(op.id)) {
          acc[i].before += sim_wire_bytes(s, *c, cm);
          acc[i].tb += sim_coll_ns(s, *c, cm);
          ++acc[i].ob[kind_name(c->op)];
        }
    for (const auto& st : r.schedule.ranks[i].streams)
      for (const auto& op : st.ops)
        if (const Collective* c = op.collective();
            c && (op.id >= first_new || changed_ids.count(op.id))) {
          acc[i].after += sim_wire_bytes(r.schedule, *c, cm);
          acc[i].ta += sim_coll_ns(r.schedule, *c, cm);
          ++acc[i].oa[kind_name(c->op)];
        }
  }
  size_t most = 0;
  for (size_t i = 0; i < acc.size(); ++i)
    if (acc[i].before > acc[most].before) most = i;
  row.braid_before = acc[most].before;
  row.braid_after = acc[most].after;
  row.comm_before = acc[most].tb;
  row.comm_after = acc[most].ta;
  row.ops_before = acc[most].ob;
  row.ops_after = acc[most].oa;
  chimera_formula(p, row);
  return row;
}

}  // namespace braid::fusion::testing

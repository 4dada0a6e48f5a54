// Schedules shared by the replay tests: presets shrunk to tiny shapes, fused forms (the
// synthesizer's Megatron forms, and the rewrite pipeline where it is built), the all-reduce
// decomposition, and a deliberately broken rewrite.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fusion/interpreter.h"
#include "fusion/ir.h"
#include "fusion/synth.h"
#include "fusion/validate.h"
#include "fusion/schedules.h"
#include "replay/data_check.h"

#ifdef BRAID_HAVE_PIPELINE
#include "fusion/pipeline.h"
#endif

namespace braid::replay::testing {

using fusion::testing::sl;
inline fusion::Compute compute_op(std::string label, Ns ns, std::vector<fusion::Slice> reads,
                                  std::vector<fusion::Slice> writes) {
  return fusion::testing::comp(std::move(label), ns, std::move(reads), std::move(writes));
}

// A preset at a tiny model shape with compute durations from `profile` (its layout untouched).
inline std::pair<fusion::ModelShape, fusion::ParallelLayout> tiny_preset(const std::string& name) {
  fusion::Preset p = fusion::preset(name);
  fusion::ModelShape m = p.model;
  m.layers = p.layout.pp;
  m.hidden = 32;
  m.heads = 4;
  m.seq = 16;
  m.micro_batch = 1;
  m.ffn = 64;
  if (m.moe()) {
    m.experts = 4;
    m.top_k = 2;
  }
  m.micro_batches = p.layout.pp > 1 ? p.layout.pp : 1;
  return {m, p.layout};
}

inline fusion::Schedule synth_tiny(const std::string& name,
                                   const analysis::CostModel& cm = analysis::CostModel(
                                       *analysis::find_profile("cpu-shm"))) {
  auto [m, l] = tiny_preset(name);
  return fusion::synthesize(m, l, cm);
}

// A baseline and a data-equivalent fused form of a preset. The synthesizer's own fused forms for
// tp-sp (Megatron SP instead of the All-Reduce) and pp-sp (send shards instead of the gathered
// output); the rewrite pipeline for the others when it is built.
struct Pair {
  std::string what;
  fusion::Schedule baseline, fused;
};

inline std::vector<Pair> fused_pairs(const std::vector<std::string>& presets) {
  const analysis::CostModel cm(*analysis::find_profile("cpu-shm"));
  std::vector<Pair> v;
  for (const std::string& name : presets) {
    auto [m, l] = tiny_preset(name);
    fusion::Schedule base = fusion::synthesize(m, l, cm);
    if (name == "tp-sp") {
      fusion::ParallelLayout f = l;
      f.sp = fusion::SpMode::ReduceScatter;
      v.push_back({name + " (Megatron SP)", base, fusion::synthesize(m, f, cm)});
    }
    if (name == "pp-sp") {
      fusion::ParallelLayout f = l;
      f.pp_send_full = false;
      v.push_back({name + " (send shards)", base, fusion::synthesize(m, f, cm)});
    }
#ifdef BRAID_HAVE_PIPELINE
    fusion::PipelineResult r = fusion::run_pipeline(base, cm);
    if (!r.applied.empty()) v.push_back({name + " (pipeline)", base, r.schedule});
#endif
  }
  return v;
}

// Two ranks: an all-reduce of `g` (baseline) or the same as reduce-scatter + all-gather (fused).
inline fusion::Schedule allreduce_pair(bool decomposed, int n = 2, int64_t count = 8) {
  fusion::Schedule s;
  s.name = decomposed ? "rs+ag" : "allreduce";
  fusion::Comm world{"world", {}};
  for (int r = 0; r < n; ++r) world.ranks.push_back(r);
  s.comms.push_back(world);
  for (int r = 0; r < n; ++r) {
    s.add_buffer(r, "x", "float32", count);
    s.add_buffer(r, "g", "float32", count);
    s.add_buffer(r, "y", "float32", count);
    if (decomposed) s.add_buffer(r, "shard", "float32", count / n);
    s.ranks[r].outputs = {"g", "y"};
    const int st = s.add_stream(r, "main");
    s.append(r, st, compute_op("grad", 200'000, {sl("x", 0, count)}, {sl("g", 0, count)}));
    auto coll = [&](CollOp op, int64_t c, fusion::Slice in, fusion::Slice out) {
      fusion::Collective k;
      k.op = op;
      k.comm = "world";
      k.dtype = "float32";
      k.count = c;
      k.in = std::move(in);
      k.out = std::move(out);
      k.label = std::string(to_string(op));
      return k;
    };
    if (!decomposed) {
      s.append(r, st, coll(CollOp::AllReduce, count, sl("g", 0, count), sl("g", 0, count)));
    } else {
      s.append(r, st, coll(CollOp::ReduceScatter, count / n, sl("g", 0, count), sl("shard", 0, count / n)));
      s.append(r, st, coll(CollOp::AllGather, count / n, sl("shard", 0, count / n), sl("g", 0, count)));
    }
    s.append(r, st, compute_op("use", 100'000, {sl("g", 0, count)}, {sl("y", 0, count)}));
  }
  return s;
}

// A deliberately broken rewrite of `s`: on one rank, two collectives of the same op, dtype and
// input count exchange their input slices (still a valid schedule). The first such swap that
// changes an output in the reference interpreter; an empty schedule when none does.
inline fusion::Schedule broken_rewrite(const fusion::Schedule& s, int32_t* rank_out = nullptr) {
  const fusion::Interpretation ref = fusion::interpret(s);
  for (int32_t r = static_cast<int32_t>(s.ranks.size()) - 1; r >= 0; --r) {
    std::vector<fusion::OpRef> colls;
    for (int32_t st = 0; st < static_cast<int32_t>(s.ranks[r].streams.size()); ++st)
      for (int32_t i = 0; i < static_cast<int32_t>(s.ranks[r].streams[st].ops.size()); ++i)
        if (const auto* c = s.ranks[r].streams[st].ops[i].collective(); c && !c->in.empty())
          colls.push_back({r, st, i});
    for (size_t a = 0; a < colls.size(); ++a)
      for (size_t b = a + 1; b < colls.size() && b < a + 8; ++b) {
        const auto& ca = *s.op(colls[a]).collective();
        const auto& cb = *s.op(colls[b]).collective();
        if (ca.op != cb.op || ca.dtype != cb.dtype || ca.in.count != cb.in.count || ca.in == cb.in)
          continue;
        fusion::Schedule t = s;
        t.name = s.name + " (broken)";
        std::swap(t.op(colls[a]).collective()->in, t.op(colls[b]).collective()->in);
        if (!fusion::validate(t).empty()) continue;
        const fusion::Interpretation got = fusion::interpret(t);
        if (got.deadlocked) continue;
        for (int32_t q = 0; q < static_cast<int32_t>(s.ranks.size()); ++q)
          if (!replay::compare_exact(q, ref.buffers[q], got.buffers[q],
                                     replay::preserved_buffers(s, t, q)).ok()) {
            if (rank_out) *rank_out = r;
            return t;
          }
      }
  }
  return {};
}

}  // namespace braid::replay::testing

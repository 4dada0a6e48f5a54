// Benchmark of the fusion pipeline (`braid fuse`): every synthesizer preset at the fusion tests'
// shapes (2 layers per stage, hidden 16, seq 8, 4 heads, ffn 32, at most 2 micro-batches, 4
// experts), the whole default pipeline run several times. Reports the median wall time per preset
// and checks its own output first: the fused schedule validates, every run applies the same
// findings, and the reference interpreter gives the fused schedule the original's outputs.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "fusion/interpreter.h"
#include "fusion/pass_schedules.h"  // tests/fusion: the tests' preset shapes
#include "fusion/pipeline.h"
#include "fusion/synth.h"
#include "fusion/validate.h"

using namespace braid;

namespace {

fusion::Schedule test_shape(const std::string& name) {
  return fusion::testing::preset_at_test_shape(name);
}

// Outputs of `a` (its declared ones, all buffers when none) equal in `b` on every rank.
bool same_outputs(const fusion::Schedule& a, const fusion::Schedule& b) {
  auto x = fusion::interpret(a), y = fusion::interpret(b);
  if (x.deadlocked || y.deadlocked) return false;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    std::vector<std::string> outs = a.ranks[r].outputs;
    if (outs.empty())
      for (const auto& buf : a.ranks[r].buffers) outs.push_back(buf.name);
    for (const std::string& o : outs)
      if (!y.buffers[r].count(o) || x.buffers[r].at(o) != y.buffers[r].at(o)) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Run the fusion pipeline on every synthesizer preset at the tests' shapes."};
  int runs = 5;
  std::vector<std::string> presets;
  app.add_option("--runs", runs, "Repetitions per preset")->capture_default_str();
  app.add_option("--preset", presets, "Presets to run (default: all)");
  fusion::PipelineOptions opt;
  app.add_option("--pass", opt.passes, "Passes to run, in order (default: the whole pipeline)");
  CLI11_PARSE(app, argc, argv);
  if (presets.empty()) presets = fusion::preset_names();
  const analysis::CostModel cm;
  std::printf("%-8s %6s %6s %8s %8s  %s\n", "preset", "ranks", "ops", "applied", "advice",
              "pipeline median (min, max) s");
  for (const std::string& name : presets) {
    fusion::Schedule s = test_shape(name);
    std::vector<double> secs;
    size_t applied = 0, advice = 0;
    fusion::Schedule fused;
    for (int i = 0; i < runs; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      fusion::PipelineResult r = fusion::run_pipeline(s, cm, opt);
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (i > 0 && (r.applied.size() != applied || !(r.schedule == fused))) {
        std::fprintf(stderr, "FAILED: %s: runs disagree\n", name.c_str());
        return 1;
      }
      applied = r.applied.size();
      advice = r.advice.size();
      fused = std::move(r.schedule);
    }
    if (!fusion::validate(fused).empty() || !same_outputs(s, fused)) {
      std::fprintf(stderr, "FAILED: %s: the fused schedule is invalid or changes outputs\n",
                   name.c_str());
      return 1;
    }
    std::sort(secs.begin(), secs.end());
    std::printf("%-8s %6zu %6zu %8zu %8zu  %.3f (%.3f, %.3f)\n", name.c_str(), s.ranks.size(),
                s.op_count(), applied, advice, secs[secs.size() / 2], secs.front(), secs.back());
    std::fflush(stdout);
  }
  return 0;
}

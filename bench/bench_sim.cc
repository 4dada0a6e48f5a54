// Benchmark of the sim replay backend: a synthesized training step of a large job (default the
// `dense` preset's layout with DP raised to 1024 ranks) simulated several times. Reports the
// median time of validation + matching and of the simulation itself; checks that every op ran
// and that repeated simulations agree.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "fusion/synth.h"
#include "fusion/validate.h"
#include "replay/common.h"
#include "replay/sim.h"

using namespace braid;

int main(int argc, char** argv) {
  CLI::App app{"Simulate a synthesized step of a large job with the sim replay backend."};
  std::string preset = "dense";
  int ranks = 1024, runs = 5, host_cores = 0;
  app.add_option("--preset", preset, "Synthesizer preset whose layout is scaled")->capture_default_str();
  app.add_option("--ranks", ranks, "World size (DP is raised to reach it)")->capture_default_str();
  app.add_option("--runs", runs, "Repetitions")->capture_default_str();
  app.add_option("--host-cores", host_cores,
                 "Processor sharing on this many cores (SimOptions::host_cores; 0: off)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  fusion::Preset p = fusion::preset(preset);
  fusion::ParallelLayout l = p.layout;
  l.dp = std::max(1, ranks / (l.tp * l.pp));
  fusion::ModelShape m = p.model;
  m.layers = 2 * l.pp;
  const auto t_synth = std::chrono::steady_clock::now();
  fusion::Schedule s = fusion::synthesize(m, l);
  const double synth_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_synth).count();
  std::printf("schedule: preset %s, %d ranks (tp %d pp %d dp %d), %zu ops, synthesized in %.2f s\n",
              preset.c_str(), l.world(), l.tp, l.pp, l.dp, s.op_count(), synth_s);

  const analysis::CostModel cm;
  std::vector<double> check_s, sim_s;
  Ns step = -1;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fusion::Matching match = replay::checked_matching(s);
    auto t1 = std::chrono::steady_clock::now();
    replay::SimOptions so;
    so.host_cores = host_cores;
    so.wait_spin_ns = host_cores > 0 ? replay::kYieldWindowNs : 0;
    replay::SimResult r = replay::simulate(s, match, cm, so);
    auto t2 = std::chrono::steady_clock::now();
    check_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    sim_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    size_t executed = 0;
    for (const auto& rk : r.step.ranks) executed += rk.size();
    if (executed != s.op_count()) {
      std::fprintf(stderr, "FAILED: %zu of %zu ops simulated\n", executed, s.op_count());
      return 1;
    }
    if (step >= 0 && r.step_ns() != step) {
      std::fprintf(stderr, "FAILED: simulations disagree (%lld vs %lld ns)\n",
                   static_cast<long long>(r.step_ns()), static_cast<long long>(step));
      return 1;
    }
    step = r.step_ns();
  }
  std::sort(check_s.begin(), check_s.end());
  std::sort(sim_s.begin(), sim_s.end());
  std::printf("simulated step: %.3f ms (profile %s)\n", static_cast<double>(step) * 1e-6,
              cm.profile().name.c_str());
  std::printf("validate + match: median %.3f s (min %.3f, max %.3f)\n", check_s[check_s.size() / 2],
              check_s.front(), check_s.back());
  std::printf("simulate:         median %.3f s (min %.3f, max %.3f), %.1f M ops/s\n",
              sim_s[sim_s.size() / 2], sim_s.front(), sim_s.back(),
              static_cast<double>(s.op_count()) / sim_s[sim_s.size() / 2] * 1e-6);
  return 0;
}

// Regenerates the table of docs/fusion.md "Closed forms side by side" (issue 22): per Chimera
// preset at the shapes of Chimera's experiments, on a profile (default: the RTX 4080 PCIe one in
// assets/profiles), the bytes on the wire per rank of the collectives the preset's rewrite
// replaces and adds, from the seeds' formulas and as the simulator moves them, and the simulated
// communication and step time before and after.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "analysis/hardware.h"
#include "fusion/chimera_bytes.h"

using namespace braid;

int main(int argc, char** argv) {
  CLI::App app{
      "Chimera rewrites at Chimera's shapes: bytes per rank (seed formulas vs Braid's sim) "
      "and simulated times."};
  std::string profile = std::string(BRAID_ASSETS) + "/profiles/rtx4080-pcie4.json";
  std::vector<std::string> presets{"tp-pp", "tp-ep", "sp-ep", "pp-ep", "pp-sp"};
  bool ops = false;
  app.add_option("--profile", profile, "Hardware profile (name or JSON)")->capture_default_str();
  app.add_option("--preset", presets, "Presets (default: tp-pp tp-ep sp-ep pp-ep pp-sp)");
  app.add_flag("--ops", ops, "Also list the collectives replaced and added on that rank");
  CLI11_PARSE(app, argc, argv);
  const analysis::CostModel cm(analysis::load_profile(profile));
  std::printf(
      "| preset | applied | formula before MB | formula after MB | formula ratio | Braid before MB "
      "| "
      "Braid after MB | Braid ratio | comm before ms | comm after ms | step before ms | "
      "step after ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& p : presets) {
    const auto r = fusion::testing::chimera_row(p, cm);
    auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    std::printf(
        "| %s | %zu | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %.1f | %.1f | %.1f | %.1f |\n",
        p.c_str(), r.applied, r.formula_before / 1e6, r.formula_after / 1e6,
        ratio(r.formula_before, r.formula_after), r.braid_before / 1e6, r.braid_after / 1e6,
        ratio(r.braid_before, r.braid_after), r.comm_before / 1e6, r.comm_after / 1e6,
        r.step_before / 1e6, r.step_after / 1e6);
    if (ops) {
      std::string t = "    " + p + " replaced:";
      for (const auto& [k, n] : r.ops_before) t += " " + std::to_string(n) + " " + k;
      t += "; added:";
      for (const auto& [k, n] : r.ops_after) t += " " + std::to_string(n) + " " + k;
      std::printf("%s\n", t.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

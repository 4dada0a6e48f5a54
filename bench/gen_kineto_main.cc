// braid-gen-kineto: writes a synthetic Kineto trace and prints what it wrote as JSON.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "bench/gen_kineto.h"
#include "trace/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Write a synthetic PyTorch-profiler (Kineto) trace of one rank"};
  braid::bench::KinetoGenOptions o;
  double size_mb = 1024;
  std::string out;
  app.add_option("--size-mb", size_mb,
                 "approximate size in MB (10^6 bytes; the last step "
                 "may overshoot it)")
      ->check(CLI::PositiveNumber);
  app.add_option("--rank", o.rank, "rank of the trace");
  app.add_option("--world", o.world_size, "world size");
  app.add_option("--seed", o.seed, "random seed (same seed, same file)");
  app.add_option("--layers", o.layers, "transformer layers per step");
  app.add_option("-o,--output", out, "output .json")->required();
  CLI11_PARSE(app, argc, argv);
  o.target_bytes = static_cast<uint64_t>(size_mb * 1e6);
  try {
    auto t0 = std::chrono::steady_clock::now();
    braid::bench::KinetoGenCounts c = braid::bench::generate_kineto(o, out);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << c.to_json() << "\n";
    std::fprintf(stderr, "wrote %s: %.1f MB in %.2f s (%.0f MB/s)\n", out.c_str(), c.bytes / 1e6, s,
                 c.bytes / 1e6 / s);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-gen-kineto: %s\n", e.what());
    return 1;
  }
  return 0;
}

// braid-bench-capture-summary FILE: the capture overhead table from bench/capture_overhead.sh's
// measurements (bench/capture_summary.h). Exit 1 with one line on a malformed file.
#include <cstdio>
#include <fstream>

#include "bench/capture_summary.h"
#include "trace/error.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MEASUREMENTS\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "braid-bench-capture-summary: %s: cannot be read\n", argv[1]);
    return 1;
  }
  try {
    std::fputs(braid::bench::overhead_table(braid::bench::summarize_overhead(in, argv[1])).c_str(),
               stdout);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-bench-capture-summary: %s\n", e.what());
    return 1;
  }
  return 0;
}

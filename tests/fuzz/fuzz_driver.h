// The importers' fuzz targets share this driver (tests/fuzz/*_fuzz.cc, docs/testing.md).
//
// A target says how its inputs become a file the importer reads (`materialize`) and where its
// seeds come from (the real traces in shared/data/traces, the project's fixtures). Built with
// clang -fsanitize=fuzzer (BRAID_LIBFUZZER) each target is a libFuzzer target; otherwise the
// driver's main() is a bounded mutation fuzzer with a fixed seed:
//
//   TARGET SECONDS [SEED] [--min-inputs N]   mutate the seeds for SECONDS (the suite: a few)
//   TARGET --replay FILE...                  run saved inputs once each (regression inputs)
//
// An input fails the run when the import throws anything but braid::Error, crashes, takes over
// 20 s (a hang), trips a sanitizer, or stores a time outside trace/time_range.h's range. The
// failing input is kept (its path is printed) so it can become a regression test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/import/importer.h"

namespace braid::fuzz {

struct Target {
  const char* name;
  TraceFormat format;
  // Writes `input` as the file(s) the importer reads into `dir`; returns the path to import, or
  // "" when the input does not make a file (e.g. SQL that builds no database).
  std::string (*materialize)(const std::string& input, const std::string& dir);
  std::vector<std::string> (*seeds)();
  std::vector<std::string> tokens;  // dictionary of the format's interesting pieces
};

// Imports one input; aborts the process (after printing the input's path) on a failure.
void run_one(const Target& t, const std::string& input);

int main(const Target& t, int argc, char** argv);

// Helpers for the targets' seed lists.
std::string read_file(const std::string& path, size_t limit = SIZE_MAX);
std::string gunzip_file(const std::string& path, size_t limit = SIZE_MAX);
void write_file(const std::string& path, const std::string& data);

}  // namespace braid::fuzz

// The entry points of a target: libFuzzer's, and the bounded mutation driver's main().
#ifdef BRAID_LIBFUZZER
#define BRAID_FUZZ_TARGET(target)                                                    \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {          \
    braid::fuzz::run_one(target, std::string(reinterpret_cast<const char*>(data), size)); \
    return 0;                                                                        \
  }
#else
#define BRAID_FUZZ_TARGET(target) \
  int main(int argc, char** argv) { return braid::fuzz::main(target, argc, argv); }
#endif

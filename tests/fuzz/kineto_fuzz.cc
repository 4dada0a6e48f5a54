// Fuzz target for the Kineto JSON importer.
//
// Built two ways: with clang -fsanitize=fuzzer it is a libFuzzer target (LLVMFuzzerTestOneInput);
// otherwise this file's main() is a small mutation fuzzer that runs for a bounded time over seed
// inputs (synthetic events and slices of the real traces), so the test suite exercises it on
// every run. Any exception other than braid::Error, and any crash, is a failure.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "trace/error.h"
#include "trace/import/importer.h"
#include "trace/writer.h"

namespace {

std::string g_dir;

std::string scratch_dir() {
  if (g_dir.empty()) {
    char tmpl[] = "/tmp/braid-fuzz-XXXXXX";
    g_dir = mkdtemp(tmpl);
  }
  return g_dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in = scratch_dir() + "/in.json";
  std::string out = scratch_dir() + "/out.braid";
  FILE* f = std::fopen(in.c_str(), "wb");
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    braid::TraceWriter w(out, braid::TraceWriter::Mode::Overwrite);
    braid::ImportOptions opts;
    braid::ImportStats stats;
    braid::import_traces(w, {in}, braid::TraceFormat::Kineto, opts, stats);
    w.commit();
  } catch (const braid::Error&) {
    // Expected for bad input: a clear error, nothing written.
  }
  return 0;
}

#ifndef BRAID_LIBFUZZER
#include <zlib.h>

static std::string gunzip(const std::string& path, size_t limit) {
  std::string out;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[65536];
  int n;
  while (out.size() < limit && (n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  if (out.size() > limit) out.resize(limit);
  return out;
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 20.0;
  unsigned seed = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 12345u;
  std::vector<std::string> seeds = {
      R"J({"traceEvents":[{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllGather_RING_LL(x)","pid":0,"tid":7,"ts":10.5,"dur":2,"args":{"stream":7,"correlation":3,"Collective name":"_allgather_base","In msg nelems":4,"Out msg nelems":16,"dtype":"BFloat16","Process Group Name":"3","Group size":4}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":9,"dur":1,"args":{"correlation":3}},{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":1,"ts":8,"dur":3,"args":{"Collective name":"allreduce","dtype":"Float"}}],"distributedInfo":{"rank":1,"world_size":4,"pg_config":"[{'pg_name': '3', 'ranks': [0, 1]}]"},"baseTimeNanoseconds":1000})J",
      R"([{"ph":"X","cat":"user_annotation","name":"ProfilerStep#3","pid":1,"tid":1,"ts":1,"dur":100},{"ph":"M","name":"thread_name","pid":0,"tid":7,"args":{"name":"stream 7"}}])",
  };
  // Slices of real traces: their opening (metadata + first events) and a middle window.
  const char* real[] = {"hta/tests/data/trace_filter/sampled_rank-0.json.gz",
                        "tracelens/tests/traces/b200/eager_trace.json.gz"};
  for (const char* r : real) {
    std::string text = gunzip(std::string(BRAID_TRACES_DIR) + "/" + r, 64 << 10);
    if (!text.empty()) seeds.push_back(text);
  }
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  const std::string tokens[] = {"{", "}", "[", "]", ",", ":", "\"", "\\", "\"ts\":", "1e308",
                                "-1", "null", "\"traceEvents\":", "\"ph\":\"X\"", "\xff", "0.0000001"};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long iterations = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string s = seeds[pick(seeds.size())];
    int edits = 1 + static_cast<int>(pick(8));
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t at = pick(s.size());
      switch (pick(6)) {
        case 0: s[at] = static_cast<char>(s[at] ^ (1 << pick(8))); break;           // bit flip
        case 1: s.erase(at, 1 + pick(16)); break;                                    // delete
        case 2: s.insert(at, tokens[pick(std::size(tokens))]); break;               // token
        case 3: s.resize(at); break;                                                 // truncate
        case 4: s.insert(at, s.substr(pick(s.size()), pick(64))); break;            // splice
        default: s[at] = static_cast<char>(pick(256)); break;                       // byte
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    ++iterations;
  }
  std::filesystem::remove_all(scratch_dir());
  std::printf("kineto fuzz: %ld inputs in %.0f s, no crash\n", iterations, seconds);
  return 0;
}
#endif

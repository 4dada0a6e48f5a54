// Import benchmark: a generated Kineto trace (default 1 GiB uncompressed) into a .braid file,
// end to end (read, parse, link, SQLite with indexes, fsync, rename). Validates the result
// against the generator's exact counts before it reports anything, then prints throughput
// (MB/s and events/s), per-run times with their median, and the peak resident memory.
//
//   braid-bench-import [--size-mb 1024] [--runs 3] [--keep DIR]
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "bench/gen_kineto.h"
#include "trace/import/importer.h"
#include "trace/json.h"
#include "trace/reader.h"
#include "trace/writer.h"

using namespace braid;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  CLI::App app{"Kineto JSON import benchmark (validates its own output)"};
  int size_mb = 1024, runs = 3;
  std::string dir = "/tmp";
  app.add_option("--size-mb", size_mb, "Size of the generated trace in MB")->capture_default_str();
  app.add_option("--runs", runs, "Timed imports")->capture_default_str();
  app.add_option("--dir", dir, "Scratch directory")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::string json = dir + "/braid-bench-kineto.json", out = dir + "/braid-bench-kineto.braid";
  bench::KinetoGenOptions g;
  g.target_bytes = static_cast<uint64_t>(size_mb) << 20;
  g.rank = 3;
  g.world_size = 8;
  double t0 = now();
  auto counts = bench::generate_kineto(g, json);
  std::fprintf(stderr, "generated %.1f MB (%lld events) in %.1f s\n", counts.bytes / 1e6,
               static_cast<long long>(counts.events), now() - t0);

  std::vector<double> secs;
  ImportStats last;
  for (int i = 0; i < runs; ++i) {
    std::filesystem::remove(out);
    double s = now();
    TraceWriter w(out, TraceWriter::Mode::Create);
    ImportOptions opts;
    ImportStats stats;
    import_traces(w, {json}, TraceFormat::Kineto, opts, stats);
    w.commit();
    secs.push_back(now() - s);
    last = stats;
    std::fprintf(stderr, "run %d: %.2f s\n", i + 1, secs.back());
  }

  // Validate before reporting.
  TraceReader r(out);
  int64_t kernels = 0, memcpys = 0, memsets = 0, apis = 0, colls = 0, steps = 0;
  std::map<std::string, int64_t> colls_by_op;
  for (const RunRow& run : r.runs()) {
    const TraceReader::Counts n = r.counts(run.run_id);
    kernels += n.kernels;
    memcpys += n.memcpys;
    memsets += n.memsets;
    apis += n.api_calls;
    steps += n.steps;
    for (const auto& [op, k] : r.stream_collectives_by_op(run.run_id)) {
      colls += k;
      colls_by_op[op] += k;
    }
  }
  bool ok = kernels == counts.kernels && memcpys == counts.memcpys && memsets == counts.memsets &&
            apis == counts.cpu_ops + counts.runtime && colls == counts.nccl_kernels &&
            steps == counts.steps && last.events == counts.events;
  for (int op = 0; op < kNumCollOps; ++op) {
    if (!counts.nccl_by_op[op]) continue;
    ok &= colls_by_op[std::string(to_string(static_cast<CollOp>(op)))] == counts.nccl_by_op[op];
  }
  if (!ok) {
    std::fprintf(stderr, "VALIDATION FAILED: kernels %lld/%lld memcpys %lld/%lld apis %lld/%lld "
                 "collectives %lld/%lld steps %lld/%lld events %lld/%lld\n",
                 (long long)kernels, (long long)counts.kernels, (long long)memcpys,
                 (long long)counts.memcpys, (long long)apis,
                 (long long)(counts.cpu_ops + counts.runtime), (long long)colls,
                 (long long)counts.nccl_kernels, (long long)steps, (long long)counts.steps,
                 (long long)last.events, (long long)counts.events);
    return 1;
  }
  std::sort(secs.begin(), secs.end());
  double med = secs[secs.size() / 2];
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  json::Writer w;
  w.begin_object()
      .field("bench", "import_kineto")
      .field_fixed("mb", counts.bytes / 1e6, 1)
      .field("events", counts.events)
      .field("rows", last.rows)
      .field("runs", runs)
      .field_fixed("median_s", med, 3)
      .field_fixed("min_s", secs.front(), 3)
      .field_fixed("max_s", secs.back(), 3)
      .field_fixed("mb_per_s", counts.bytes / 1e6 / med, 1)
      .field_fixed("events_per_s", counts.events / med, 0)
      .field_fixed("peak_rss_mb", ru.ru_maxrss / 1024.0, 1)
      .field_fixed("braid_mb", std::filesystem::file_size(out) / 1e6, 1)
      .field("validated", true)
      .end_object();
  std::printf("%s\n", w.str().c_str());
  std::filesystem::remove(json);
  std::filesystem::remove(out);
  return 0;
}

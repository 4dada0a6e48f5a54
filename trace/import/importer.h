// Importers: one file per format under trace/import/, all writing through TraceWriter.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trace/diagnostics.h"
#include "trace/writer.h"

namespace braid {

namespace et {
struct HostOps;
}

// Et: a PyTorch execution trace, imported only with the trace of the same run (import_traces).
enum class TraceFormat { Auto, Kineto, Nsys, Chakra, Legacy, Et };
std::string_view to_string(TraceFormat f);
TraceFormat trace_format_from_string(std::string_view s);  // throws Usage on unknown names

// Looks at a file's first bytes (through gzip) and says what it is; throws BadFormat when it is
// none of the supported formats, NotFound when it cannot be opened.
TraceFormat detect_format(const std::string& path);

struct ImportOptions {
  // Called now and then with the bytes of the input files (as stored on disk, compressed or not)
  // consumed so far and their total. Importers call it with their own file's numbers;
  // import_traces() turns those into numbers for the whole import.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Rank to give a file that does not name its own (per-file; empty: the file's index).
  std::vector<int32_t> ranks;
  // PyTorch execution traces, the i-th of the i-th trace file (`braid import --et`); execution
  // traces among the trace files themselves are paired by process id, else by the rank their
  // file name gives (docs/import-et.md).
  std::vector<std::string> et_files;
};

struct ImportStats {
  int64_t files = 0;
  uint64_t bytes = 0;   // uncompressed bytes parsed
  int64_t events = 0;   // trace events read
  int64_t rows = 0;     // rows written to the store
  std::vector<std::string> notes;  // one line per execution trace joined (et::JoinReport)
};

// What every format importer gets: the writer, the run all files go into, and the counters.
struct ImportContext {
  TraceWriter& writer;
  int64_t run;
  const ImportOptions& options;
  ImportStats& stats;
  // Each rank comes from one file only; a second file claiming it is refused.
  std::vector<std::pair<int32_t, std::string>> claimed;
  void claim_rank(int32_t rank, const std::string& file);
  // The one way importers write a diagnostic (trace/diagnostics.h): nothing when count <= 0;
  // the table's severity unless `severity` is given.
  void diagnose(diag::Code code, int64_t count, std::string detail, int32_t rank = -1,
                std::optional<Severity> severity = std::nullopt) {
    if (count <= 0) return;
    writer.add_diagnostic(run, severity
                                   ? diag::make(code, *severity, count, std::move(detail), rank)
                                   : diag::make(code, count, std::move(detail), rank));
  }
  // Set when execution traces are to be joined: the importer of trace file `index` keeps its CPU
  // ops in (*host_ops)[index] (trace/import/et.h), with the rank, process and steps it found.
  std::vector<et::HostOps>* host_ops = nullptr;
  // Rank for the file at `index` when the file does not say.
  int32_t default_rank(size_t index) const {
    return index < options.ranks.size() ? options.ranks[index] : static_cast<int32_t>(index);
  }
};

// Imports `files` (one per rank, several ranks make one run) into a new run of `writer` and
// returns its id; execution traces (options.et_files, and any among `files`) are joined to the
// trace of their rank (trace/import/et.h). Throws braid::Error naming the offending file.
int64_t import_traces(TraceWriter& writer, const std::vector<std::string>& files,
                      TraceFormat format, const ImportOptions& options, ImportStats& stats);

// Per-format entry points (one file each).
void import_kineto(ImportContext& ctx, const std::string& file, size_t index);
void import_nsys(ImportContext& ctx, const std::string& file, size_t index);
void import_chakra(ImportContext& ctx, const std::string& file, size_t index);
void import_legacy(ImportContext& ctx, const std::string& file, size_t index);

// The rank a file's name gives (legacy profiler traces name it nowhere else): the digits after
// the last "rank" (rank-3.json, trace_rank3.json), else after "worker", else the name's last
// number.
std::optional<int32_t> rank_from_file_name(const std::string& path);

}  // namespace braid

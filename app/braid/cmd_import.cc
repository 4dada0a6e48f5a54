// braid import: traces -> .braid
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "app/braid/cli.h"
#include "trace/error.h"
#include "trace/import/importer.h"

namespace braid::cli {

void register_import(CLI::App& app, Action& run) {
  struct Opts {
    std::vector<std::string> files, ets;
    std::string out, format = "auto";
    std::vector<int32_t> ranks;
    bool append = false, force = false, quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "import",
      "Import trace files into a .braid file. Several files (one per rank) make one run.\n"
      "Formats: PyTorch profiler / Kineto Chrome-trace JSON (plain or .gz), Nsight Systems\n"
      "SQLite export (nsys export --type sqlite), Chakra execution traces (.et protobuf, JSON,\n"
      "or a tar(.gz) of them), and the legacy autograd-profiler JSON of PyTorch without Kineto.\n"
      "PyTorch execution traces (ExecutionTraceObserver / ExecutionGraphObserver JSON, plain or\n"
      ".gz) come with the Kineto or legacy trace of the same run: --et E0 E1 ... gives the i-th\n"
      "to the i-th trace file; one given among the files is paired with the trace of its\n"
      "process id, else of the rank its name gives. Their ops are joined to the trace's CPU ops\n"
      "and their tensor arguments stored, for `braid lift`'s data flow (docs/import-et.md).\n"
      "An input none of whose events can be read is an error. The output is written to a\n"
      "temporary file and renamed at the end: an interrupted or failed import leaves any\n"
      "existing output untouched.");
  cmd->add_option("files", o->files, "Trace files, one per rank")->required()->check(CLI::ExistingFile);
  cmd->add_option("--et", o->ets, "PyTorch execution traces, one per trace file, in the same order")
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->out, "Output .braid file (default: <first input>.braid)");
  cmd->add_option("-f,--format", o->format, "Input format: auto, kineto, nsys, chakra, legacy")
      ->capture_default_str();
  cmd->add_option("--rank", o->ranks,
                  "Rank of each file, in order (default: the rank the file names, else its "
                  "position)");
  cmd->add_flag("-a,--append", o->append, "Add a new run to an existing .braid file");
  cmd->add_flag("--force", o->force, "Replace an existing output file");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress or summary output");
  cmd->callback([o, &run] {
    run = [o] {
      if (o->append && o->force) throw Error(ErrorCode::Usage, "--append and --force exclude each other");
      if (o->out.empty()) {
        std::string stem = std::filesystem::path(o->files[0]).filename().string();
        for (const char* ext : {".gz", ".json", ".sqlite", ".et", ".tar", ".pt.trace"})
          if (stem.size() > std::strlen(ext) && stem.ends_with(ext)) stem.resize(stem.size() - std::strlen(ext));
        o->out = stem + ".braid";
      }
      auto mode = o->append ? TraceWriter::Mode::Append
                  : o->force ? TraceWriter::Mode::Overwrite
                             : TraceWriter::Mode::Create;
      TraceFormat fmt = trace_format_from_string(o->format);
      double t0 = now_seconds();
      Progress progress("importing", !o->quiet);
      ImportOptions opts;
      opts.ranks = o->ranks;
      opts.et_files = o->ets;
      opts.progress = [&](uint64_t done, uint64_t all) { progress.update(done, all); };
      ImportStats stats;
      TraceWriter w(o->out, mode);
      int64_t run_id = import_traces(w, o->files, fmt, opts, stats);
      w.commit();
      progress.done();
      double dt = now_seconds() - t0;
      if (!o->quiet)
        std::printf("imported %lld file%s (%.1f MB, %lld events) as run %lld of %s in %.2f s "
                    "(%.1f MB/s)\n",
                    static_cast<long long>(stats.files), stats.files == 1 ? "" : "s",
                    static_cast<double>(stats.bytes) / 1e6, static_cast<long long>(stats.events),
                    static_cast<long long>(run_id), o->out.c_str(), dt,
                    dt > 0 ? static_cast<double>(stats.bytes) / 1e6 / dt : 0.0);
      if (!o->quiet)
        for (const std::string& line : stats.notes)
          std::printf("  execution trace: %s\n", line.c_str());
      return 0;
    };
  });
}

static const VerbRegistration kRegister{10, "import", register_import};

}  // namespace braid::cli

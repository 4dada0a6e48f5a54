// braid demo: the main job on its built-in default. For now: import the bundled two-rank
// sample trace and print its summary.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "app/braid/cli.h"
#include "trace/error.h"
#include "trace/import/importer.h"
#include "trace/reader.h"
#include "trace/summary.h"

namespace braid::cli {

void register_demo(CLI::App& app, Action& run) {
  struct Opts {
    std::string out = "demo.braid";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "demo",
      "Run the built-in demonstration: import the bundled two-rank PyTorch profiler sample\n"
      "(assets/samples) into a .braid file and print its summary.");
  cmd->add_option("-o,--output", o->out, "Output .braid file (replaced if present)")
      ->capture_default_str();
  cmd->callback([o, &run] {
    run = [o] {
      namespace fs = std::filesystem;
      fs::path dir = fs::path(assets_dir()) / "samples";
      std::vector<std::string> files;
      std::error_code ec;
      for (auto& e : fs::directory_iterator(dir, ec))
        if (e.path().filename().string().starts_with("demo_rank")) files.push_back(e.path().string());
      if (files.empty())
        throw Error(ErrorCode::NotFound, dir.string() + ": bundled sample traces not found (set BRAID_ASSETS_DIR)");
      std::sort(files.begin(), files.end());
      std::printf("braid demo: importing %zu sample rank traces from %s\n", files.size(), dir.c_str());
      ImportOptions opts;
      ImportStats stats;
      TraceWriter w(o->out, TraceWriter::Mode::Overwrite);
      import_traces(w, files, TraceFormat::Kineto, opts, stats);
      w.commit();
      TraceReader reader(o->out);
      std::string text = summary_text(o->out, summarize(reader));
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    };
  });
}

static const VerbRegistration kRegister{90, "demo", register_demo};

}  // namespace braid::cli

// Chrome-trace JSON export that Perfetto's UI and chrome://tracing open.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "trace/reader.h"

namespace braid {

struct ChromeExportOptions {
  int64_t run = -1;  // -1: the first run in the file
};

// Writes one process per rank and one thread per stream (GPU streams and CPU threads);
// collectives carry their metadata as args. Output goes to `out_path` through a temporary file.
struct ChromeExportStats {
  int64_t events = 0;
};
ChromeExportStats export_chrome(const TraceReader& reader, const std::string& out_path,
                                const ChromeExportOptions& options);

}  // namespace braid

#include "trace/export/chrome.h"

#include "trace/error.h"

namespace braid {
// Placeholder until the exporter lands (work in progress in this session).
ChromeExportStats export_chrome(const TraceReader&, const std::string& out_path,
                                const ChromeExportOptions&) {
  throw Error(ErrorCode::Unsupported, out_path + ": chrome export is not built yet");
}
}  // namespace braid

#include "trace/error.h"
#include "trace/import/importer.h"

namespace braid {
// Placeholder until the nsys importer lands (work in progress in this session).
void import_nsys(ImportContext&, const std::string& file, size_t) {
  throw Error(ErrorCode::Unsupported, file + ": nsys import is not built yet");
}
}  // namespace braid

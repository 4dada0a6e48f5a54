#include "trace/error.h"
#include "trace/import/importer.h"

namespace braid {
// Placeholder until the chakra importer lands (work in progress in this session).
void import_chakra(ImportContext&, const std::string& file, size_t) {
  throw Error(ErrorCode::Unsupported, file + ": chakra import is not built yet");
}
}  // namespace braid

#include "trace/error.h"
#include "trace/import/importer.h"
namespace braid {
void import_kineto(ImportContext&, const std::string& file, size_t) {
  throw Error(ErrorCode::Unsupported, file + ": kineto import is not built yet");
}
}  // namespace braid

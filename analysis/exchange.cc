#include "analysis/exchange.h"

#include "trace/error.h"

namespace braid::analysis {

void WireIn::need(size_t n) const {
  if (b_.size() - at_ < n)
    throw Error(ErrorCode::Internal, "a message between the analysis processes ended early (" +
                                         std::to_string(b_.size()) + " bytes)");
}

std::string WireIn::str() {
  const int64_t n = i64();
  if (n < 0) need(SIZE_MAX);
  need(static_cast<size_t>(n));
  std::string s(b_.substr(at_, static_cast<size_t>(n)));
  at_ += static_cast<size_t>(n);
  return s;
}

}  // namespace braid::analysis

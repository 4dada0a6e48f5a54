// Short names for the ops a lifted schedule holds, for text that people read (`braid lift`,
// `fuse`, `ab`, findings): a compute op by its aten op ("aten::addmm") or its kernel's base name
// with the functor that tells kernels apart ("vectorized_elementwise_kernel<addcmul>"), never a
// namespace, template argument list or signature. The full labels stay in the schedule and in
// --json.
#pragma once

#include <string>
#include <string_view>

namespace braid::fusion {

std::string short_label(std::string_view label);

}  // namespace braid::fusion

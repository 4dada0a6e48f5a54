// Numbers for people: durations and byte counts as the text reports print them.
#pragma once

#include <cstdint>
#include <string>

#include "trace/model.h"

namespace braid {

std::string format_ns(Ns ns);         // "1.234 ms"
std::string format_bytes(int64_t b);  // "12.5 MiB"

}  // namespace braid

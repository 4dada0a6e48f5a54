#include "trace/format.h"

#include <cinttypes>
#include <cstdio>

namespace braid {

std::string format_ns(Ns ns) {
  char buf[64];
  double v = static_cast<double>(ns);
  if (ns < 0) v = -v;
  const char* sign = ns < 0 ? "-" : "";
  if (v < 1e3)
    std::snprintf(buf, sizeof buf, "%s%.0f ns", sign, v);
  else if (v < 1e6)
    std::snprintf(buf, sizeof buf, "%s%.3f us", sign, v / 1e3);
  else if (v < 1e9)
    std::snprintf(buf, sizeof buf, "%s%.3f ms", sign, v / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%s%.3f s", sign, v / 1e9);
  return buf;
}

std::string format_bytes(int64_t b) {
  char buf[64];
  double v = static_cast<double>(b);
  if (b < 1024)
    std::snprintf(buf, sizeof buf, "%" PRId64 " B", b);
  else if (v < 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024);
  else if (v < 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", v / 1048576);
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", v / 1073741824.0);
  return buf;
}

}  // namespace braid

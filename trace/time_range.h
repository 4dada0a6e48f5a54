// What a stored time may be, and checked conversions into it.
//
// Every time a `.braid` file holds is int64 nanoseconds in a rank's own clock: since the Unix
// epoch, or since the origin of a relative clock (a profiler session's start, a replay's), which
// can put a merged rank's times before it. A time is at most kMaxTimeNs (2100-01-01 after the
// epoch, 130 years) either side of the origin; a value outside that, or a span that ends before
// it starts, cannot be a time: importers refuse it or skip its event and count it (diagnostics
// `kineto.bad_time`, `nsys.bad_time`), and the writer drops and counts (`store.bad_time`) any row
// that still is not one, so no arithmetic on stored times (differences, sums of two) overflows.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "trace/model.h"

namespace braid {

inline constexpr Ns kMaxTimeNs = 4'102'444'800'000'000'000;  // 2100-01-01T00:00:00Z in ns

// True when -kMaxTimeNs <= t <= kMaxTimeNs.
constexpr bool valid_time(Ns t) { return t >= -kMaxTimeNs && t <= kMaxTimeNs; }
// True when both ends are times and start <= end.
constexpr bool valid_span(Ns start, Ns end) {
  return valid_time(start) && valid_time(end) && start <= end;
}

// a + b, or nothing when it overflows int64.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b, or nothing when it overflows int64.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The integer nearest to `v`, or nothing for NaN, an infinity or a value outside int64 (a plain
// cast of those is undefined behaviour).
inline std::optional<int64_t> round_to_int64(long double v) {
  if (!std::isfinite(v)) return std::nullopt;
  v = std::nearbyint(v);
  // 2^63 is exactly representable; every value below it converts.
  if (v < -9223372036854775808.0L || v >= 9223372036854775808.0L) return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace braid

// The data check of an A/B replay: the buffers a rewrite claims to preserve, compared between
// two runs on the same deterministic inputs (baseline vs fused) or against the reference
// interpreter. Integer data (the int64 Check mode of the mpi backend, integer dtypes) and copies
// compare bitwise; floating-point data (a GPU replay's float reductions) within a tolerance.
// Mismatches are reported by rank, buffer and index.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fusion/interpreter.h"
#include "fusion/ir.h"
#include "trace/json.h"

namespace braid::replay {

struct Mismatch {
  int32_t rank = 0;
  std::string buffer;
  int64_t index = 0;
  double expected = 0, actual = 0;  // int64 values are exact below 2^53
  int64_t expected_bits = 0, actual_bits = 0;
  // Checked on a scaled copy (fusion/scale.h): element `index` stands for the full-size elements
  // [index * scale, (index + 1) * scale) of the buffer.
  int64_t scale = 1;
};

struct DataCheck {
  int64_t buffers = 0;    // buffers compared
  int64_t elements = 0;   // elements compared
  int64_t mismatches = 0;
  std::vector<Mismatch> first;        // the first few mismatches, in (rank, buffer, index) order
  std::vector<std::string> problems;  // missing buffers, different sizes
  // Checked on exact scaled copies (replay/ab.h, plan_check): the compared buffers' elements at
  // full size, and the largest divisor among them; scale 1: checked at full size.
  int64_t full_elements = 0;
  int64_t scale = 1;
  bool ok() const { return mismatches == 0 && problems.empty(); }
  void merge(const DataCheck& o, size_t max_report = 20);
  // Readable lines: a summary, then one line per reported mismatch and problem.
  std::vector<std::string> lines(std::string_view expected_name,
                                 std::string_view actual_name) const;
  // " on the exact scaled copies (...)" when scaled, else "".
  std::string scale_note() const;
  // {"ok", "buffers", "elements", "mismatches", "scale", "full_elements", "first": [...],
  // "problems": [...]} (docs/cli.md, "JSON output").
  void write_json(json::Writer& w) const;
};

// The buffers of `rank` a rewrite from `baseline` to `fused` must preserve: the fused schedule's
// outputs, else the baseline's outputs, else every buffer of the baseline on that rank.
std::vector<std::string> preserved_buffers(const fusion::Schedule& baseline,
                                           const fusion::Schedule& fused, int32_t rank);

// Bitwise comparison of int64 data.
DataCheck compare_exact(int32_t rank, const fusion::RankBuffers& expected,
                        const fusion::RankBuffers& actual, const std::vector<std::string>& names,
                        size_t max_report = 20);

using FloatBuffers = std::map<std::string, std::vector<double>>;
struct Tolerance {
  double rel = 1e-5;
  double abs = 1e-6;
};
// Floating-point comparison: buffers of a floating-point dtype (`dtypes` by name) compare within
// |actual - expected| <= abs + rel * |expected|; others bitwise.
DataCheck compare_float(int32_t rank, const FloatBuffers& expected, const FloatBuffers& actual,
                        const std::vector<std::string>& names,
                        const std::map<std::string, std::string>& dtypes, Tolerance tol,
                        size_t max_report = 20);

bool is_floating_dtype(std::string_view dtype);

}  // namespace braid::replay

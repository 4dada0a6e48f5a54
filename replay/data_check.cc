#include "replay/data_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace braid::replay {

namespace {

template <typename T>
DataCheck compare(int32_t rank, const std::map<std::string, std::vector<T>>& expected,
                  const std::map<std::string, std::vector<T>>& actual,
                  const std::vector<std::string>& names, size_t max_report, auto equal) {
  DataCheck d;
  for (const std::string& name : names) {
    auto e = expected.find(name), a = actual.find(name);
    if (e == expected.end() || a == actual.end()) {
      d.problems.push_back("rank " + std::to_string(rank) + " buffer '" + name + "' is missing in " +
                           (e == expected.end() ? "the expected" : "the actual") + " run");
      continue;
    }
    if (e->second.size() != a->second.size()) {
      d.problems.push_back("rank " + std::to_string(rank) + " buffer '" + name + "' has " +
                           std::to_string(a->second.size()) + " elements, expected " +
                           std::to_string(e->second.size()));
      continue;
    }
    ++d.buffers;
    d.elements += static_cast<int64_t>(e->second.size());
    for (size_t i = 0; i < e->second.size(); ++i) {
      if (equal(name, e->second[i], a->second[i])) continue;
      ++d.mismatches;
      if (d.first.size() < max_report) {
        Mismatch m;
        m.rank = rank;
        m.buffer = name;
        m.index = static_cast<int64_t>(i);
        m.expected = static_cast<double>(e->second[i]);
        m.actual = static_cast<double>(a->second[i]);
        if constexpr (sizeof(T) == 8) {
          std::memcpy(&m.expected_bits, &e->second[i], 8);
          std::memcpy(&m.actual_bits, &a->second[i], 8);
        }
        d.first.push_back(m);
      }
    }
  }
  return d;
}

}  // namespace

void DataCheck::merge(const DataCheck& o, size_t max_report) {
  buffers += o.buffers;
  elements += o.elements;
  mismatches += o.mismatches;
  full_elements += o.full_elements;
  scale = std::max(scale, o.scale);
  for (const Mismatch& m : o.first)
    if (first.size() < max_report) first.push_back(m);
  problems.insert(problems.end(), o.problems.begin(), o.problems.end());
}

std::string DataCheck::scale_note() const {
  if (scale <= 1) return "";
  return " on the exact scaled copies (each element stands for up to " + std::to_string(scale) +
         " elements; " + std::to_string(full_elements) + " at full size)";
}

std::vector<std::string> DataCheck::lines(std::string_view expected_name,
                                          std::string_view actual_name) const {
  std::vector<std::string> v;
  char buf[512];
  if (ok()) {
    std::snprintf(buf, sizeof buf, "data check passed: %lld elements of %lld buffers identical",
                  static_cast<long long>(elements), static_cast<long long>(buffers));
    v.push_back(buf + scale_note());
    return v;
  }
  std::snprintf(buf, sizeof buf,
                "data check FAILED: %lld of %lld elements differ (%.*s vs %.*s), %zu other problems",
                static_cast<long long>(mismatches), static_cast<long long>(elements),
                static_cast<int>(expected_name.size()), expected_name.data(),
                static_cast<int>(actual_name.size()), actual_name.data(), problems.size());
  v.push_back(buf + scale_note());
  for (const Mismatch& m : first) {
    std::snprintf(buf, sizeof buf, "  rank %d buffer '%s' index %lld: %.*s %.17g, %.*s %.17g",
                  m.rank, m.buffer.c_str(), static_cast<long long>(m.index),
                  static_cast<int>(expected_name.size()), expected_name.data(), m.expected,
                  static_cast<int>(actual_name.size()), actual_name.data(), m.actual);
    v.push_back(buf);
    if (m.scale > 1)
      v.back() += " (full-size elements " + std::to_string(m.index * m.scale) + "-" +
                  std::to_string((m.index + 1) * m.scale - 1) + ")";
  }
  if (mismatches > static_cast<int64_t>(first.size()))
    v.push_back("  ... and " + std::to_string(mismatches - static_cast<int64_t>(first.size())) +
                " more");
  for (const std::string& p : problems) v.push_back("  " + p);
  return v;
}

void DataCheck::write_json(json::Writer& w) const {
  w.begin_object().field("ok", ok()).field("buffers", buffers).field("elements", elements);
  w.field("mismatches", mismatches).field("scale", scale).field("full_elements", full_elements);
  w.key("first").begin_array();
  for (const Mismatch& m : first) {
    w.begin_object().field("rank", m.rank).field("buffer", m.buffer).field("index", m.index);
    w.field("expected_bits", m.expected_bits).field("actual_bits", m.actual_bits);
    w.field("scale", m.scale).end_object();
  }
  w.end_array().array_of("problems", problems).end_object();
}

std::vector<std::string> preserved_buffers(const fusion::Schedule& baseline,
                                           const fusion::Schedule& fused, int32_t rank) {
  const fusion::RankSchedule* b =
      rank < static_cast<int32_t>(baseline.ranks.size()) ? &baseline.ranks[rank] : nullptr;
  const fusion::RankSchedule* f =
      rank < static_cast<int32_t>(fused.ranks.size()) ? &fused.ranks[rank] : nullptr;
  if (f && !f->outputs.empty()) return f->outputs;
  if (b && !b->outputs.empty()) return b->outputs;
  std::vector<std::string> v;
  if (b)
    for (const fusion::Buffer& buf : b->buffers) v.push_back(buf.name);
  return v;
}

DataCheck compare_exact(int32_t rank, const fusion::RankBuffers& expected,
                        const fusion::RankBuffers& actual, const std::vector<std::string>& names,
                        size_t max_report) {
  return compare(rank, expected, actual, names, max_report,
                 [](const std::string&, int64_t e, int64_t a) { return e == a; });
}

bool is_floating_dtype(std::string_view d) {
  return d.starts_with("float") || d.starts_with("bfloat") || d.starts_with("double") ||
         d.starts_with("half") || d.starts_with("fp");
}

DataCheck compare_float(int32_t rank, const FloatBuffers& expected, const FloatBuffers& actual,
                        const std::vector<std::string>& names,
                        const std::map<std::string, std::string>& dtypes, Tolerance tol,
                        size_t max_report) {
  return compare(rank, expected, actual, names, max_report,
                 [&](const std::string& name, double e, double a) {
                   auto it = dtypes.find(name);
                   const bool floating = it != dtypes.end() && is_floating_dtype(it->second);
                   if (!floating) return std::memcmp(&e, &a, sizeof e) == 0;
                   if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a);
                   return std::fabs(a - e) <= tol.abs + tol.rel * std::fabs(e);
                 });
}

}  // namespace braid::replay

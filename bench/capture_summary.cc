#include "bench/capture_summary.h"

#include <algorithm>
#include <cstdio>
#include <istream>
#include <sstream>

#include "trace/error.h"

namespace braid::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v >= 100 ? "%.0f" : "%.2f", v);
  return b;
}

}  // namespace

std::vector<OverheadRow> summarize_overhead(std::istream& in, const std::string& source) {
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, std::vector<double>>> values;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream l(line);
    std::string config, workload, extra;
    double v = 0;
    if (!(l >> config >> workload >> v) || (l >> extra) || v < 0 ||
        (config != "none" && config != "floor" && config != "braid" && config != "torch"))
      throw Error(ErrorCode::BadFormat,
                  source + ":" + std::to_string(no) +
                      ": expected '<none|floor|braid|torch> <workload> <value>', got '" + line +
                      "'");
    if (!values.count(workload)) order.push_back(workload);
    values[workload][config].push_back(v);
  }
  std::vector<OverheadRow> rows;
  for (auto& w : order) {
    OverheadRow r;
    r.workload = w;
    for (auto& [config, vs] : values[w]) {
      r.median[config] = median(vs);
      r.runs[config] = static_cast<int>(vs.size());
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string overhead_table(const std::vector<OverheadRow>& rows) {
  std::string out =
      "| workload | plain | CUPTI floor | braid | braid - floor | braid - plain | braid ratio | "
      "floor ratio | torch.profiler | torch ratio |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (auto& r : rows) {
    auto get = [&](const char* c) -> const double* {
      auto it = r.median.find(c);
      return it == r.median.end() ? nullptr : &it->second;
    };
    const double *none = get("none"), *floor = get("floor"), *braid = get("braid"),
                 *torch = get("torch");
    auto cell = [](const double* v) { return v ? fmt(*v) : std::string(""); };
    auto diff = [](const double* a, const double* b) {
      return a && b ? (*a >= *b ? "+" : "") + fmt(*a - *b) : std::string("");
    };
    auto ratio = [](const double* a, const double* b) {
      return a && b && *b > 0 ? fmt(*a / *b) + "x" : std::string("");
    };
    out += "| " + r.workload + " | " + cell(none) + " | " + cell(floor) + " | " + cell(braid) +
           " | " + diff(braid, floor) + " | " + diff(braid, none) + " | " + ratio(braid, none) +
           " | " + ratio(floor, none) + " | " + cell(torch) + " | " + ratio(torch, none) + " |\n";
  }
  return out;
}

}  // namespace braid::bench

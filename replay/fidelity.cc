#include "replay/fidelity.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "replay/ab.h"
#include "trace/error.h"
#include "trace/reader.h"

namespace braid::replay {

Fidelity fidelity(const std::string& path, int64_t run, const ReplayResult& replayed,
                  const fusion::LiftSource& lifted) {
  TraceReader reader(path);
  bool found = false;
  std::string have;
  for (const RunRow& r : reader.runs()) {
    found |= r.run_id == run;
    have += (have.empty() ? "" : ", ") + std::to_string(r.run_id) + " (" +
            std::string(to_string(r.kind)) + ")";
  }
  if (!found)
    throw Error(ErrorCode::NotFound,
                path + ": no run " + std::to_string(run) + " to compare with (runs: " + have + ")");
  Fidelity f;
  f.original_run = run;
  std::map<int32_t, std::vector<double>> steps;
  for (const Step& s : reader.steps(run))
    if (lifted.run != run || lifted.step < 0 || s.step == lifted.step)
      steps[s.rank].push_back(static_cast<double>(s.end - s.start));
  std::map<int32_t, Ns> original;
  auto span_of = [&](bool with_memcpys) {
    std::map<int32_t, std::pair<Ns, Ns>> span;
    auto add = [&](int32_t rank, Ns start, Ns end) {
      auto [it, fresh] = span.emplace(rank, std::make_pair(start, end));
      if (!fresh) {
        it->second.first = std::min(it->second.first, start);
        it->second.second = std::max(it->second.second, end);
      }
      return true;
    };
    reader.kernels(run, [&](const Kernel& k) { return add(k.rank, k.start, k.end); });
    if (with_memcpys)
      reader.memcpys(run, [&](const Memcpy& m) { return add(m.rank, m.start, m.end); });
    for (auto& [rank, se] : span) original[rank] = se.second - se.first;
  };
  if (lifted.run == run && lifted.step < 0) {
    f.original_source = "GPU activity span (the lifted whole run)";
    span_of(true);
  } else if (!steps.empty()) {
    f.original_source = lifted.run == run ? "step " + std::to_string(lifted.step) : "steps";
    for (auto& [rank, v] : steps) original[rank] = static_cast<Ns>(quantile(v, 0.5));
  } else {
    f.original_source = "kernel span";
    span_of(false);
  }
  if (lifted.run == run) {
    // Schedule rank i is the run's i-th rank (fusion::lift renumbers).
    std::map<int32_t, Ns> by_index;
    int32_t i = 0;
    for (auto& [rank, ns] : original) by_index[i++] = ns;
    original = std::move(by_index);
  }
  const int32_t n = replayed.steps.empty() ? 0 : static_cast<int32_t>(replayed.steps[0].ranks.size());
  for (int32_t r = 0; r < n; ++r) {
    std::vector<double> v;
    for (const StepRecord& s : replayed.steps) v.push_back(static_cast<double>(s.rank_ns(r)));
    RankFidelity rf;
    rf.rank = r;
    rf.replayed_ns = static_cast<Ns>(quantile(v, 0.5));
    auto it = original.find(r);
    rf.original_ns = it == original.end() ? 0 : it->second;
    f.ranks.push_back(rf);
  }
  return f;
}

double median_ratio(const Fidelity& f) {
  std::vector<double> v;
  for (const RankFidelity& r : f.ranks)
    if (r.original_ns > 0) v.push_back(r.ratio());
  return v.empty() ? 0 : quantile(v, 0.5);
}

std::vector<std::string> Fidelity::lines() const {
  std::vector<std::string> v;
  char buf[256];
  std::snprintf(buf, sizeof buf, "fidelity vs run %lld (original step time from its %s):",
                static_cast<long long>(original_run), original_source.c_str());
  v.push_back(buf);
  v.push_back("  rank   original ms   replayed ms   replayed/original");
  for (const RankFidelity& r : ranks) {
    if (r.original_ns > 0)
      std::snprintf(buf, sizeof buf, "  %4d   %11.3f   %11.3f   %.3f", r.rank,
                    static_cast<double>(r.original_ns) * 1e-6,
                    static_cast<double>(r.replayed_ns) * 1e-6, r.ratio());
    else
      std::snprintf(buf, sizeof buf, "  %4d   %11s   %11.3f   -", r.rank, "-",
                    static_cast<double>(r.replayed_ns) * 1e-6);
    v.push_back(buf);
  }
  if (double m = median_ratio(*this); m > 0) {
    std::snprintf(buf, sizeof buf, "  median replayed/original over ranks: %.3f (%+.1f%%)", m,
                  100 * (m - 1));
    v.push_back(buf);
  }
  return v;
}

}  // namespace braid::replay

#include "replay/executor.h"

#include <algorithm>
#include <cstdio>
#include <exception>

namespace braid::replay {

double SizedLink::correction_ns(int64_t bytes) const {
  if (corrections.empty()) return 0;
  if (bytes <= corrections.front().first) return corrections.front().second;
  if (bytes >= corrections.back().first) return corrections.back().second;
  auto hi = std::lower_bound(corrections.begin(), corrections.end(), bytes,
                             [](const auto& p, int64_t b) { return p.first < b; });
  auto lo = hi - 1;
  const double f =
      static_cast<double>(bytes - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second);
}

Ns StepRecord::rank_ns(int32_t rank) const {
  Ns end = 0;
  if (rank < 0 || rank >= static_cast<int32_t>(ranks.size())) return 0;
  for (const OpTime& t : ranks[rank]) end = std::max(end, t.end);
  return end;
}

Ns StepRecord::step_ns() const {
  Ns end = 0;
  for (int32_t r = 0; r < static_cast<int32_t>(ranks.size()); ++r) end = std::max(end, rank_ns(r));
  return end;
}

std::vector<int32_t> Executor::local_ranks(const fusion::Schedule& s) const {
  std::vector<int32_t> v;
  for (const auto& r : s.ranks)
    if (r.rank % process_count() == process_index()) v.push_back(r.rank);
  return v;
}

int run_guarded(Executor& ex, const std::function<int()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    if (ex.process_count() <= 1) throw;
    std::fprintf(stderr, "braid: error: rank %d: %s\n", ex.process_index(), e.what());
    std::fflush(stderr);
    ex.abort_job(1);
    throw;
  }
}

}  // namespace braid::replay

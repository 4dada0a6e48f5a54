#include "replay/executor.h"

#include <algorithm>
#include <cstdio>
#include <exception>

namespace braid::replay {

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

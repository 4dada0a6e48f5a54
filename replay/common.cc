#include "replay/common.h"

#include <time.h>

#include "analysis/cost_model.h"
#include "replay/sim.h"
#include "trace/error.h"

namespace braid::replay {

int element_size(std::string_view dtype) {
  int n = dtype_size(normalize_dtype(dtype));
  return n > 0 ? n : 4;
}

CollOp cost_op(CollOp op) { return op == CollOp::Recv ? CollOp::Send : op; }

std::string sibling_key(const fusion::MatchGroup& g) {
  if (g.op == CollOp::Send || g.op == CollOp::Recv) return {};
  std::string k;
  for (char c : g.comm)
    if (c < '0' || c > '9')
      k += c;
    else if (k.empty() || k.back() != '#')
      k += '#';
  return k + "|" + std::to_string(g.members.size()) + "|" + std::string(to_string(g.op)) + "|" +
         std::to_string(g.seq);
}

fusion::Matching checked_matching(const fusion::Schedule& s) {
  std::vector<std::string> problems = fusion::validate(s);
  if (!problems.empty()) {
    std::string msg = "schedule '" + s.name + "' cannot be replayed: " + problems[0];
    if (problems.size() > 1) msg += " (and " + std::to_string(problems.size() - 1) + " more)";
    throw Error(ErrorCode::BadFormat, msg);
  }
  return fusion::match_collectives(s);
}

std::vector<fusion::OpRef> global_order(const fusion::Schedule& s, const fusion::Matching& m) {
  // A simulation with every duration zero completes ops in a dependency-respecting order.
  analysis::HardwareProfile zero = analysis::default_profile();
  zero.intra_node = {"none", 0, 0};
  zero.inter_node = {"none", 0, 0};
  SimOptions o;
  o.compute_scale = 0;
  return simulate(s, m, analysis::CostModel(zero), o).order;
}

Ns monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Ns>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace braid::replay

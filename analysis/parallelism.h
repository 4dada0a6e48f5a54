// Which parallelism dimension (TP, SP, EP, PP, DP) each communicator serves, with the evidence.
//
// Rules, first that applies:
//   1. the communicator's name or description names a dimension ("tp", "tensor", "dp",
//      "data_parallel", "pp", "pipeline", "ep", "expert", "moe", "sp", "sequence", "cp");
//   2. only point-to-point traffic (send/recv) -> PP;
//   3. all-to-all is the most frequent operation -> EP;
//   4. members are consecutive ranks within one node (≤ gpus_per_node):
//      all-gather and reduce-scatter both used, more than all-reduce -> SP; otherwise -> TP;
//   5. members strided across nodes, or the whole world, with all-reduce or reduce-scatter /
//      all-gather (gradient synchronization or sharded data parallelism) -> DP.
// Otherwise "unknown". The evidence string says which rule and the numbers behind it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "analysis/matching.h"

namespace braid::analysis {

struct CommLabel {
  std::string comm;
  std::string dim;       // TP, SP, EP, PP, DP, unknown
  std::string evidence;
  int32_t nranks = 0;
  std::vector<int32_t> members;            // global ranks (the trace's list where it has one)
  std::map<CollOp, int64_t> op_counts;     // collectives per op, over the run's ranks
  int64_t bytes = 0;                       // total bytes of its collectives (known sizes)
};

std::vector<CommLabel> infer_parallelism(const RunData& run, const MatchResult& match,
                                         int gpus_per_node = 8);

}  // namespace braid::analysis

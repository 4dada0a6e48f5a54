// CUDA graphs holding NCCL calls, free of CUDA's headers. A call made while its stream is being
// captured launches nothing: capture turns its launches into graph nodes (the agent hears of each
// node CUPTI reports created while the call runs), and every launch of the instantiated graph runs
// them again. The book keeps, per node, the captured calls it belongs to, and which nodes each
// executable graph holds (instantiation clones the nodes, and CUPTI reports the clones' ids in
// the records of a launch), so that each graph launch can be turned into one replayed call per
// captured call, linked to that launch's records of its nodes.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "capture/nccl_event.h"

namespace braid::capture {

class GraphBook {
 public:
  // `c` was captured and created `nodes` of graph `graph` (a grouped call: the group's nodes too).
  void captured(uint32_t graph, const std::vector<uint64_t>& nodes, const NcclCall& c);
  // Instantiation: executable graph `exec` was made from graph `graph`; `original` cloned to
  // `node`.
  void exec_created(uint32_t exec, uint32_t graph);
  void cloned(uint64_t original, uint64_t node, uint32_t exec);
  // A launch of `exec`: `fn` once per captured call in it, with the ids its nodes may carry in the
  // launch's records (the clones' and the originals').
  void launched(uint32_t exec,
                const std::function<void(const NcclCall&, const std::vector<uint64_t>&)>& fn);

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<NcclCall>> node_calls_;   // node -> calls it belongs to
  std::unordered_map<uint32_t, std::vector<uint64_t>> graph_nodes_;  // NCCL nodes of each graph
  std::unordered_map<uint32_t, std::vector<uint64_t>> exec_nodes_;   // clones in each executable
  std::unordered_map<uint32_t, uint32_t> exec_graph_;                // executable -> its graph
};

}  // namespace braid::capture

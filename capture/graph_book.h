// CUDA graphs holding NCCL calls, free of CUDA's headers. A call made while its stream is being
// captured launches nothing: capture turns its launches into graph nodes (the agent hears of each
// node CUPTI reports created while the call runs), and every launch of the instantiated graph runs
// them again. The book keeps, per node, the captured calls it belongs to, and which nodes each
// executable graph holds, so that each graph launch can be turned into one replayed call per
// captured call, linked to that launch's records of its nodes.
//
// What CUPTI 13 reports at instantiation (cudaGraphInstantiate / cuGraphInstantiate), and so what
// the book is told: GRAPHEXEC_CREATE_STARTING; the executable's own copy of every node, each
// reported created (GRAPHNODE_CREATED) and cloned (GRAPHNODE_CLONED: `node` the copy,
// `originalNode` the captured node, `graph` the copy's graph, whose id is the id the executable
// graph gets, `graphExec` not set yet); then GRAPHEXEC_CREATED (`graph` the original graph,
// `graphExec` the executable). The kernel and copy records of a launch carry the launch's
// correlation id, the copy's node id (`graphNodeId`) and, in `graphId`, the executable's id.
// Sources: NVIDIA's CUPTI sample cuda_graphs_trace (maps a record's graphNodeId through the
// GRAPHNODE_CLONED callback, and skips the nodes created during instantiation) and Triton's Proton
// profiler (CuptiProfiler.cpp: "when a graph is cloned under the stream capture mode, graphId is
// the same as the graphExecId to be created"; a kernel record's graphId "actually refers to
// graphExecId", as NVIDIA confirmed to them). Braid's first H100 run (issue 32) saw what
// trusting `graphExec` in GRAPHNODE_CLONED gives: no clone known, 40 replays of a graph's
// all-reduce with their copy records present and none linked.
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
  // Instantiation: executable graph `exec` was made from graph `graph`.
  void exec_created(uint32_t exec, uint32_t graph);
  // `original` was cloned to `node`, a node of graph `clone_graph` (for an instantiation, the
  // graph whose id the executable takes); `exec` when CUPTI named the executable (0 otherwise).
  // True when `original` belongs to a captured NCCL call (the clone then does too).
  bool cloned(uint64_t original, uint64_t node, uint32_t clone_graph, uint32_t exec);
  // The clones an instantiation made (the ones cloned() said true for, on the instantiating
  // thread between GRAPHEXEC_CREATE_STARTING and GRAPHEXEC_CREATED) belong to `exec`.
  void exec_holds(uint32_t exec, const std::vector<uint64_t>& clones);
  // A launch of `exec`: `fn` once per captured call in it, in capture order, with the ids its
  // nodes may carry in the launch's records (the executable's copies and the originals).
  void launched(uint32_t exec,
                const std::function<void(const NcclCall&, const std::vector<uint64_t>&)>& fn);

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<NcclCall>> node_calls_;   // node -> calls it belongs to
  std::unordered_map<uint32_t, std::vector<uint64_t>> graph_nodes_;  // NCCL nodes of each graph
  std::unordered_map<uint32_t, std::vector<uint64_t>> exec_nodes_;   // NCCL nodes of executables
  std::unordered_map<uint32_t, uint32_t> exec_graph_;                // executable -> its graph
};

}  // namespace braid::capture

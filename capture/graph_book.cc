#include "capture/graph_book.h"

#include <algorithm>
#include <map>

namespace braid::capture {
namespace {

void add_unique(std::vector<uint64_t>& v, uint64_t n) {
  if (std::find(v.begin(), v.end(), n) == v.end()) v.push_back(n);
}

}  // namespace

void GraphBook::captured(uint32_t graph, const std::vector<uint64_t>& nodes, const NcclCall& c) {
  std::lock_guard lk(mu_);
  auto& in_graph = graph_nodes_[graph];
  for (uint64_t n : nodes) {
    auto& calls = node_calls_[n];
    if (calls.empty()) in_graph.push_back(n);
    calls.push_back(c);
  }
}

void GraphBook::exec_created(uint32_t exec, uint32_t graph) {
  std::lock_guard lk(mu_);
  exec_graph_[exec] = graph;
}

bool GraphBook::cloned(uint64_t original, uint64_t node, uint32_t clone_graph, uint32_t exec) {
  std::lock_guard lk(mu_);
  auto it = node_calls_.find(original);
  if (it == node_calls_.end()) return false;  // not an NCCL call's node
  std::vector<NcclCall> calls = it->second;
  node_calls_[node] = std::move(calls);
  // A clone of a clone (cudaGraphClone, then instantiation) is found from the graph it is in.
  add_unique(graph_nodes_[clone_graph], node);
  if (exec) add_unique(exec_nodes_[exec], node);
  return true;
}

void GraphBook::exec_holds(uint32_t exec, const std::vector<uint64_t>& clones) {
  std::lock_guard lk(mu_);
  for (uint64_t n : clones) add_unique(exec_nodes_[exec], n);
}

void GraphBook::launched(
    uint32_t exec, const std::function<void(const NcclCall&, const std::vector<uint64_t>&)>& fn) {
  // call id -> (the call, the node ids of its records), in capture order.
  std::map<int64_t, std::pair<NcclCall, std::vector<uint64_t>>> calls;
  {
    std::lock_guard lk(mu_);
    auto add = [&](uint64_t node) {
      auto it = node_calls_.find(node);
      if (it == node_calls_.end()) return;
      for (const NcclCall& c : it->second) {
        auto& entry = calls.try_emplace(c.call_id, c, std::vector<uint64_t>{}).first->second;
        add_unique(entry.second, node);
      }
    };
    // The executable's copies: as told at instantiation, else the graph that shares its id (the
    // copies' graph, as CUPTI numbers them).
    if (auto e = exec_nodes_.find(exec); e != exec_nodes_.end())
      for (uint64_t n : e->second) add(n);
    else if (auto c = graph_nodes_.find(exec); c != graph_nodes_.end())
      for (uint64_t n : c->second) add(n);
    // The originals (a CUPTI that reports them in a launch's records).
    if (auto g = exec_graph_.find(exec); g != exec_graph_.end())
      if (auto n = graph_nodes_.find(g->second); n != graph_nodes_.end())
        for (uint64_t node : n->second) add(node);
  }
  for (auto& [id, entry] : calls) fn(entry.first, entry.second);
}

}  // namespace braid::capture

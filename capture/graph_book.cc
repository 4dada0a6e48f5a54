#include "capture/graph_book.h"

#include <map>

namespace braid::capture {

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

void GraphBook::cloned(uint64_t original, uint64_t node, uint32_t exec) {
  std::lock_guard lk(mu_);
  auto it = node_calls_.find(original);
  if (it == node_calls_.end()) return;  // not an NCCL call's node
  std::vector<NcclCall> calls = it->second;
  node_calls_[node] = std::move(calls);
  exec_nodes_[exec].push_back(node);
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
        entry.second.push_back(node);
      }
    };
    if (auto e = exec_nodes_.find(exec); e != exec_nodes_.end())
      for (uint64_t n : e->second) add(n);
    if (auto g = exec_graph_.find(exec); g != exec_graph_.end())
      if (auto n = graph_nodes_.find(g->second); n != graph_nodes_.end())
        for (uint64_t node : n->second) add(node);
  }
  for (auto& [id, entry] : calls) fn(entry.first, entry.second);
}

}  // namespace braid::capture

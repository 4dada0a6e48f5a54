// The registry of every pass (fusion/pass.h: all_passes, find_pass), in the pipeline's order:
// a new pass is added here.
#include <memory>
#include <string_view>
#include <vector>

#include "fusion/pass.h"
#include "fusion/passes/passes.h"

namespace braid::fusion {

const std::vector<std::unique_ptr<Pass>>& all_passes() {
  static const std::vector<std::unique_ptr<Pass>> v = [] {
    std::vector<std::unique_ptr<Pass>> p;
    p.push_back(passes::make_decompose());
    p.push_back(passes::make_reorder());
    p.push_back(passes::make_tp_sp());
    p.push_back(passes::make_tp_ep());
    p.push_back(passes::make_pp_ep());
    p.push_back(passes::make_pp_sp());
    p.push_back(passes::make_tp_pp());
    p.push_back(passes::make_sp_ep());
    p.push_back(passes::make_coalesce());
    p.push_back(passes::make_dedup());
    p.push_back(passes::make_coc());
    return p;
  }();
  return v;
}

const Pass* find_pass(std::string_view name) {
  for (const auto& p : all_passes())
    if (p->name() == name) return p.get();
  return nullptr;
}

}  // namespace braid::fusion

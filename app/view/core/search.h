// Search by name: every event whose name contains the text (case-insensitive), in time order.
#pragma once

#include <string_view>
#include <vector>

#include "app/view/core/layout.h"
#include "app/view/core/view_run.h"

namespace braid::view {

struct SearchResult {
  std::vector<Hit> hits;  // at most `limit`, earliest first
  int64_t total = 0;      // all matches
};

SearchResult search_events(const ViewRun& d, std::string_view text, size_t limit = 1000);

}  // namespace braid::view

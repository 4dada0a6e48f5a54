#include "app/view/core/search.h"

#include <algorithm>
#include <cctype>

namespace braid::view {
namespace {

bool contains_nocase(std::string_view hay, std::string_view needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  });
  return it != hay.end();
}

}  // namespace

SearchResult search_events(const ViewRun& d, std::string_view text, size_t limit) {
  SearchResult out;
  if (text.empty()) return out;
  // Names are interned: test each distinct name once, then scan ids.
  std::vector<uint8_t> match(d.strings.size(), 0);
  bool any = false;
  for (size_t i = 1; i < d.strings.size(); ++i)
    if (contains_nocase(d.strings[i], text)) match[i] = 1, any = true;
  if (!any) return out;
  std::vector<std::pair<Ns, Hit>> found;
  for (size_t li = 0; li < d.lanes.size(); ++li)
    for (size_t ri = 0; ri < d.lanes[li].rows.size(); ++ri) {
      const auto& ev = d.lanes[li].rows[ri].packed();
      for (size_t k = 0; k < ev.size(); ++k)
        if (ev[k].name < match.size() && match[ev[k].name]) {
          ++out.total;
          found.push_back({ev[k].start, Hit{static_cast<int>(li), static_cast<int>(ri),
                                            static_cast<int64_t>(k), 1}});
          // Keep memory bounded on huge result sets: trim to the earliest `limit`.
          if (found.size() >= 4 * limit + 1024) {
            std::nth_element(found.begin(), found.begin() + static_cast<ptrdiff_t>(limit),
                             found.end(), [](auto& a, auto& b) { return a.first < b.first; });
            found.resize(limit);
          }
        }
    }
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first < b.first; });
  if (found.size() > limit) found.resize(limit);
  for (auto& [t, h] : found) out.hits.push_back(h);
  return out;
}

}  // namespace braid::view

#include "app/view/core/layout.h"

namespace braid::view {

RunLayout layout_run(const ViewRun& d, const std::vector<uint8_t>& collapsed,
                     const LayoutOptions& opt) {
  RunLayout out;
  float y = 0;
  for (size_t g = 0; g < d.groups.size(); ++g) {
    GroupBox box;
    box.group = static_cast<int>(g);
    box.collapsed = g < collapsed.size() && collapsed[g];
    box.y0 = y;
    y += opt.header_h;
    if (!box.collapsed) {
      for (int li : d.groups[g].lanes) {
        const Lane& l = d.lanes[li];
        float h = opt.row_h * static_cast<float>(std::max<size_t>(1, l.rows.size()));
        out.lanes.push_back({li, y, y + h});
        y += h + opt.lane_gap;
      }
    }
    box.y1 = y;
    out.groups.push_back(box);
  }
  out.height = y;
  return out;
}

std::optional<Hit> hit_test(const ViewRun& d, const RunLayout& layout, const TimeAxis& axis,
                            Ns shift, float x, float y, const LayoutOptions& opt, float slop) {
  for (const LaneBox& b : layout.lanes) {
    if (y < b.y0 || y >= b.y1) continue;
    int r = static_cast<int>((y - b.y0) / opt.row_h);
    const Lane& l = d.lanes[b.lane];
    if (r < 0 || r >= static_cast<int>(l.rows.size())) return std::nullopt;
    std::vector<DrawItem> items;
    fold_row(l.rows[r], axis, shift, opt.min_px, items);
    const DrawItem* best = nullptr;
    float best_dist = slop + 1;
    for (const DrawItem& it : items) {
      float dist = x < it.x0 ? it.x0 - x : x > it.x1 ? x - it.x1 : 0.f;
      if (dist <= slop && dist < best_dist) {
        best = &it;
        best_dist = dist;
      }
    }
    if (!best) return std::nullopt;
    return Hit{b.lane, r, best->first, best->count, best->category};
  }
  return std::nullopt;
}

}  // namespace braid::view

// Vertical layout of a run's lanes (grouped per rank, groups collapsible) and hit-testing of a
// point against the drawn events.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "app/view/core/lod.h"
#include "app/view/core/view_run.h"

namespace braid::view {

struct LayoutOptions {
  float row_h = 16.f;     // one row of events
  float header_h = 18.f;  // a rank's header (its name, collapse toggle, busy strip)
  float lane_gap = 3.f;   // space below each lane
  float min_px = 1.f;     // events narrower than this are folded; gaps this wide stay (lod.h)
};

struct LaneBox {
  int lane = -1;
  float y0 = 0, y1 = 0;  // rows at y0 + r * row_h
};
struct GroupBox {
  int group = -1;
  float y0 = 0, y1 = 0;  // header at [y0, y0 + header_h)
  bool collapsed = false;
};
struct RunLayout {
  std::vector<GroupBox> groups;
  std::vector<LaneBox> lanes;  // lanes of expanded groups, top to bottom
  float height = 0;
};

// `collapsed[g]` collapses group g (missing entries: expanded). y = 0 is the section's top.
RunLayout layout_run(const ViewRun& d, const std::vector<uint8_t>& collapsed,
                     const LayoutOptions& opt = {});

struct Hit {
  int lane = -1, row = -1;
  int64_t index = -1;  // first event of the drawn item
  int64_t count = 0;   // > 1: a folded block
  uint8_t category = 0;  // the event's, or the folded block's dominant category
};

// What is drawn under (x, y) (section coordinates; x from the axis's left edge), with the same
// folding as the drawing, within `slop` pixels horizontally.
std::optional<Hit> hit_test(const ViewRun& d, const RunLayout& layout, const TimeAxis& axis,
                            Ns shift, float x, float y, const LayoutOptions& opt = {},
                            float slop = 1.f);

}  // namespace braid::view

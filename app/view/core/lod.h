// Level of detail for a row of events: the visible window by binary search, and runs of events
// narrower than a pixel folded into one counted block (the way Tracy draws zones), so the work
// per row is bounded by the row's width in pixels, not by its event count. Every event at
// least `min_px` wide is drawn as itself, and a block never swallows a gap of `min_px` or more,
// so the gaps between steps stay visible.
#pragma once

#include <cstdint>
#include <vector>

#include "app/view/core/time_axis.h"
#include "app/view/core/view_run.h"

namespace braid::view {

struct DrawItem {
  float x0 = 0, x1 = 0;  // pixels from the left of the axis (may extend past the edges)
  int64_t first = 0;     // index of the first event in the row
  int64_t count = 1;     // > 1: a folded block of `count` events
  uint8_t category = 0;  // the event's, or the block's dominant one (by time; sampled, lod.cc)
};

// Index of the first event of `row` that ends after `t` (events overlap [t, ...)).
int64_t first_visible(const Row& row, Ns t);
// Index of the first event of `row` that starts at or after `t`.
int64_t first_starting_at(const Row& row, Ns t);

// Appends the draw items of `row` for the axis's visible window, times shifted by `-shift`
// (compare mode aligns runs). Events narrower than `min_px` are folded together with their
// neighbours while the gap between them is under `min_px` as well; at most one item per
// `min_px` of width plus one per event drawn as itself.
void fold_row(const Row& row, const TimeAxis& axis, Ns shift, float min_px,
              std::vector<DrawItem>& out);

}  // namespace braid::view

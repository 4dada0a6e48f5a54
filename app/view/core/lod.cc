#include "app/view/core/lod.h"

#include <algorithm>

namespace braid::view {

int64_t first_visible(const Row& row, Ns t) {
  // Events do not overlap: of those starting before t, only the last can end after it; of
  // those starting at t, the ones of no length end at it.
  size_t f = row.first_start_from(0, t);
  if (f > 0 && row.end(f - 1) > t) return static_cast<int64_t>(f - 1);
  while (f < row.size() && row.end(f) <= t) ++f;
  return static_cast<int64_t>(f);
}

int64_t first_starting_at(const Row& row, Ns t) {
  return static_cast<int64_t>(row.first_start_from(0, t));
}

namespace {

// The category with the most time among events [i, j): exact for small blocks, else from 16
// evenly spaced samples, so a block costs a bounded number of reads however many it holds.
uint8_t dominant_category(const Row& row, int64_t i, int64_t j) {
  constexpr int64_t kSamples = 16;
  const auto& ev = row.packed();
  Ns time[256] = {};
  uint8_t best = static_cast<uint8_t>(ev[i].category);
  auto add = [&](int64_t k) {
    const uint8_t c = static_cast<uint8_t>(ev[k].category);
    time[c] += std::max<Ns>(1, row.end(static_cast<size_t>(k)) - ev[k].start);
    if (time[c] > time[best]) best = c;
  };
  if (j - i <= kSamples) {
    for (int64_t k = i; k < j; ++k) add(k);
  } else {
    for (int64_t s = 0; s < kSamples; ++s) add(i + (j - i - 1) * s / (kSamples - 1));
  }
  return best;
}

}  // namespace

void fold_row(const Row& row, const TimeAxis& axis, Ns shift, float min_px,
              std::vector<DrawItem>& out) {
  const auto& ev = row.packed();
  auto end = [&](int64_t k) { return row.end(static_cast<size_t>(k)); };
  const auto n = static_cast<int64_t>(ev.size());
  const Ns t_end = axis.t1() + shift;
  int64_t i = first_visible(row, axis.t0() + shift);
  while (i < n && ev[i].start < t_end) {
    float x0 = axis.x_of(ev[i].start - shift);
    float x1 = axis.x_of(end(i) - shift);
    if (x1 - x0 >= min_px) {
      out.push_back({x0, x1, i, 1, static_cast<uint8_t>(ev[i].category)});
      ++i;
      continue;
    }
    // Fold: jump (binary search) to the first event starting min_px after the block's end,
    // as long as what lies in between is small and close; each jump advances >= min_px.
    int64_t j = i + 1;
    float block_end = x1;
    while (j < n) {
      auto k = static_cast<int64_t>(
          row.first_start_from(static_cast<size_t>(j), axis.t_of(block_end + min_px) + shift));
      if (k <= j) {
        // The next event starts at least min_px after the block: stop unless it is small and
        // touching (cannot be: it starts min_px away), so the block ends here.
        break;
      }
      // Events j..k-1 start within min_px of the block's end; take them in.
      float e1 = axis.x_of(end(k - 1) - shift);
      if (e1 - axis.x_of(ev[k - 1].start - shift) >= min_px) {
        // A wide event inside the window: close the block before it.
        k = k - 1;
        if (k <= j) break;
        e1 = axis.x_of(end(k - 1) - shift);
      }
      block_end = std::max(block_end, e1);
      j = k;
    }
    out.push_back(
        {x0, std::max(block_end, x0 + 1.f), i, j - i,
         j - i == 1 ? static_cast<uint8_t>(ev[i].category) : dominant_category(row, i, j)});
    i = j;
  }
}

}  // namespace braid::view

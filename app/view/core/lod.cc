#include "app/view/core/lod.h"

#include <algorithm>

namespace braid::view {

int64_t first_visible(const Row& row, Ns t) {
  // Ends are sorted as starts are (events of a row do not overlap).
  int64_t lo = 0, n = static_cast<int64_t>(row.size());
  while (n > 0) {
    const int64_t half = n / 2;
    if (row.end(static_cast<size_t>(lo + half)) <= t) {
      lo += half + 1;
      n -= half + 1;
    } else {
      n = half;
    }
  }
  return lo;
}

int64_t first_starting_at(const Row& row, Ns t) {
  const auto& ev = row.packed();
  auto it = std::lower_bound(ev.begin(), ev.end(), t,
                             [](const PackedEvent& e, Ns v) { return e.start < v; });
  return it - ev.begin();
}

namespace {

// First index >= `from` whose event starts at or after `t`, by galloping from `from`: the
// answer is usually close, so this touches a few nearby cache lines instead of a whole
// binary search's worth of distant ones.
int64_t gallop_start(const std::vector<PackedEvent>& ev, int64_t from, Ns t) {
  const auto n = static_cast<int64_t>(ev.size());
  if (from >= n || ev[from].start >= t) return from;
  int64_t lo = from, step = 1;  // ev[lo].start < t
  while (lo + step < n && ev[lo + step].start < t) {
    lo += step;
    step *= 2;
  }
  auto hi = std::min(n, lo + step);
  auto it = std::lower_bound(ev.begin() + lo + 1, ev.begin() + hi, t,
                             [](const PackedEvent& e, Ns v) { return e.start < v; });
  return it - ev.begin();
}

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
      int64_t k = gallop_start(ev, j, axis.t_of(block_end + min_px) + shift);
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

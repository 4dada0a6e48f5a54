// The colour of each event category (the categories of `braid info`), shared by the drawing
// and the screenshot tests, which look for these colours at known places.
#pragma once

#include <cstdint>
#include <string>

namespace braid::view {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// `category` is a braid::Category code or kCategoryCpu / kCategoryAnnotation.
Rgb category_color(uint8_t category);
// "gemm", "comm.allreduce", "cpu", "annotation", ...
std::string category_name(uint8_t category);

// Colours of the frame, for the tests to tell events from the background.
inline constexpr Rgb kBackground{24, 26, 31};
inline constexpr Rgb kLaneBackground{32, 35, 42};
inline constexpr Rgb kFoldedColor{140, 144, 156};

}  // namespace braid::view

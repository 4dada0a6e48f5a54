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

// The Metrics tab's stacked bar (stats.h MetricsBar), part by part, and its late-rank chart.
inline constexpr Rgb kBarCompute{66, 133, 244};      // computation alone (gemm blue)
inline constexpr Rgb kBarOverlapped{102, 187, 106};  // communication hidden under computation
inline constexpr Rgb kBarExposed{229, 57, 53};       // exposed communication (allreduce red)
inline constexpr Rgb kBarMemory{141, 110, 99};       // memory traffic alone (memory brown)
inline constexpr Rgb kBarIdle{84, 88, 100};          // no GPU activity
inline constexpr Rgb kBarLate{255, 167, 38};         // late-rank chart: others' wait

}  // namespace braid::view

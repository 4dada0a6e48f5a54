// The horizontal mapping between job time (ns) and pixels, the navigation on it (zoom at a
// point, pan, fit) and the ruler's tick marks with units that adapt to the zoom.
//
// Job times are epoch-like int64 values (~1.7e18 ns) that a double cannot hold to the
// nanosecond, so the axis keeps an integer origin and works in doubles relative to it.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "trace/model.h"

namespace braid::view {

class TimeAxis {
 public:
  // The finest zoom: 1/64 ns per pixel; the coarsest: 1000 s per pixel.
  static constexpr double kMinNsPerPx = 1.0 / 64;
  static constexpr double kMaxNsPerPx = 1e12;

  // Times are shown (ruler labels) relative to the origin, e.g. the start of the run.
  void set_origin(Ns origin);
  Ns origin() const { return origin_; }
  // Keeps the visible time window: ns per pixel scale with the width.
  void set_width(float px);
  float width() const { return width_; }
  double ns_per_px() const { return ns_per_px_; }

  Ns t0() const { return origin_ + static_cast<Ns>(std::llround(t0_)); }
  Ns t1() const { return origin_ + static_cast<Ns>(std::llround(t0_ + ns_per_px_ * width_)); }
  double rel0() const { return t0_; }  // t0 - origin, exact to a fraction of a ns

  // Shows [a, b] across the width.
  void set_window(Ns a, Ns b);
  // Shows [a, b] with `margin` (a fraction of the span) on each side.
  void fit(Ns a, Ns b, double margin = 0.02);

  float x_of(Ns t) const {
    return static_cast<float>((static_cast<double>(t - origin_) - t0_) / ns_per_px_);
  }
  Ns t_of(float x) const {
    return origin_ + static_cast<Ns>(std::llround(t0_ + static_cast<double>(x) * ns_per_px_));
  }

  // factor < 1 zooms in, > 1 zooms out; the time under `x` stays under `x`.
  void zoom_at(float x, double factor);
  // Moves the view by `dx` pixels (positive: content moves right, earlier times come in).
  void pan_px(float dx);

 private:
  Ns origin_ = 0;
  double t0_ = 0;  // left edge, relative to origin_
  double ns_per_px_ = 1;
  float width_ = 1;
};

struct Tick {
  Ns t = 0;  // job time
  bool major = false;
  std::string label;  // major ticks only: time since the origin
};

// Ticks at 1/2/5 x 10^k ns (relative to the origin) so that minor ticks are at least `min_px`
// apart; majors land on round multiples and are labelled in the unit of their step.
std::vector<Tick> ruler_ticks(const TimeAxis& axis, float min_px = 12.f);

// "12 ns", "3.400 us", "1.250 ms", "2.500 s": enough digits to tell neighbouring values apart.
std::string format_duration(double ns);
// A time label with the precision that a tick step calls for: format_time(1.5e6, 5e5) = "1.5 ms".
std::string format_time(double t, double step);

}  // namespace braid::view

#include "app/view/core/time_axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace braid::view {

void TimeAxis::set_origin(Ns origin) {
  t0_ += static_cast<double>(origin_ - origin);
  origin_ = origin;
}

void TimeAxis::set_width(float px) {
  // The same time window stays visible when the width changes (window resize, first frame).
  px = std::max(1.f, px);
  ns_per_px_ = std::clamp(ns_per_px_ * width_ / px, kMinNsPerPx, kMaxNsPerPx);
  width_ = px;
}

void TimeAxis::set_window(Ns a, Ns b) {
  if (b <= a) b = a + 1;
  t0_ = static_cast<double>(a - origin_);
  ns_per_px_ = std::clamp(static_cast<double>(b - a) / width_, kMinNsPerPx, kMaxNsPerPx);
}

void TimeAxis::fit(Ns a, Ns b, double margin) {
  double span = std::max<double>(1.0, static_cast<double>(b - a));
  auto m = static_cast<Ns>(std::llround(span * margin));
  set_window(a - m, b + m);
}

void TimeAxis::zoom_at(float x, double factor) {
  double t = t0_ + static_cast<double>(x) * ns_per_px_;
  ns_per_px_ = std::clamp(ns_per_px_ * factor, kMinNsPerPx, kMaxNsPerPx);
  t0_ = t - static_cast<double>(x) * ns_per_px_;
}

void TimeAxis::pan_px(float dx) { t0_ -= static_cast<double>(dx) * ns_per_px_; }

namespace {

struct Unit {
  double ns;
  const char* name;
};
constexpr Unit kUnits[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "us"}, {1, "ns"}};

const Unit& unit_for(double magnitude) {
  for (const Unit& u : kUnits)
    if (magnitude >= u.ns) return u;
  return kUnits[3];
}

}  // namespace

std::string format_duration(double ns) {
  double a = std::fabs(ns);
  const Unit& u = unit_for(a);
  double v = ns / u.ns;
  char buf[48];
  if (u.ns == 1 && a == std::floor(a))
    std::snprintf(buf, sizeof buf, "%.0f ns", v);
  else if (std::fabs(v) >= 100)
    std::snprintf(buf, sizeof buf, "%.1f %s", v, u.name);
  else if (std::fabs(v) >= 10)
    std::snprintf(buf, sizeof buf, "%.2f %s", v, u.name);
  else
    std::snprintf(buf, sizeof buf, "%.3f %s", v, u.name);
  return buf;
}

std::string format_time(double t, double step) {
  // The unit in which ten steps are at least 1; as many decimals as the step needs in it.
  const Unit& u = unit_for(step * 10);
  double v = t / u.ns;
  double s = step / u.ns;
  int decimals = 0;
  while (decimals < 6 &&
         std::fabs(s * std::pow(10, decimals) - std::round(s * std::pow(10, decimals))) > 1e-6)
    ++decimals;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, u.name);
  return buf;
}

std::vector<Tick> ruler_ticks(const TimeAxis& axis, float min_px) {
  std::vector<Tick> out;
  double min_step = std::max(axis.ns_per_px() * min_px, 1.0);
  double decade = std::pow(10.0, std::floor(std::log10(min_step)));
  double mant = 10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (decade * m >= min_step) {
      mant = m;
      break;
    }
  double step = decade * mant;
  // Majors on 5x or 10x the step (1 -> 5, 2 -> 10, 5 -> 10 -> "round" values).
  double major = step * (mant == 2.0 ? 5 : mant == 5.0 ? 2 : 5);
  double rel0 = axis.rel0(), rel1 = rel0 + axis.ns_per_px() * axis.width();
  auto k0 = static_cast<int64_t>(std::ceil(rel0 / step));
  auto k1 = static_cast<int64_t>(std::floor(rel1 / step));
  auto per_major = static_cast<int64_t>(std::llround(major / step));
  for (int64_t k = k0; k <= k1 && out.size() < 4096; ++k) {
    Tick t;
    double rel = static_cast<double>(k) * step;
    t.t = axis.origin() + static_cast<Ns>(std::llround(rel));
    t.major = k % per_major == 0;
    if (t.major) t.label = format_time(rel, major);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace braid::view

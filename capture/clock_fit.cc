#include "capture/clock_fit.h"

#include <algorithm>
#include <cmath>
#include <ctime>

namespace braid::capture {

int64_t host_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

ClockFit::Sample ClockFit::sample(const std::function<int64_t()>& device_now,
                                  const std::function<int64_t()>& host_now, int tries) {
  Sample best;
  int64_t best_width = INT64_MAX;
  for (int i = 0; i < std::max(1, tries); ++i) {
    int64_t h0 = host_now();
    int64_t d = device_now();
    int64_t h1 = host_now();
    if (h1 - h0 < best_width) {
      best_width = h1 - h0;
      best = {d, h0 + (h1 - h0) / 2};
    }
  }
  return best;
}

void ClockFit::add(Sample s) {
  std::lock_guard lk(mu_);
  samples_.push_back(s);
  while (samples_.size() > window_) samples_.pop_front();
}

bool ClockFit::refit() {
  std::lock_guard lk(mu_);
  if (samples_.empty()) return false;
  Fit f;
  // Work relative to the newest sample: differences fit a double exactly, absolute ns do not.
  f.ref_device = samples_.back().device;
  f.ref_host = samples_.back().host;
  f.samples = static_cast<int>(samples_.size());
  if (samples_.size() >= 2) {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (auto& s : samples_) {
      double x = static_cast<double>(s.device - f.ref_device);
      double y = static_cast<double>(s.host - f.ref_host);
      n += 1; sx += x; sy += y; sxx += x * x; sxy += x * y;
    }
    double den = n * sxx - sx * sx;
    if (den > 0) {
      f.slope = (n * sxy - sx * sy) / den;
      double icpt = (sy - f.slope * sx) / n;  // host offset at ref_device
      f.ref_host += static_cast<int64_t>(std::llround(icpt));
    }
  } else if (!fits_.empty()) {
    f.slope = fits_.back().slope;  // one new sample: keep the rate, move the offset
  }
  double ss = 0;
  for (auto& s : samples_) {
    // Differences first: absolute ns do not fit a double's mantissa.
    double e = static_cast<double>(s.host - f.ref_host) -
               f.slope * static_cast<double>(s.device - f.ref_device);
    ss += e * e;
  }
  f.residual_ns = std::sqrt(ss / static_cast<double>(samples_.size()));
  if (fits_.empty()) {
    f.from_device = INT64_MIN;
  } else {
    // The new fit takes over after the oldest sample it shares with the previous window's end.
    f.from_device = samples_.size() >= 2 ? samples_[samples_.size() - 2].device
                                         : samples_.back().device;
    f.from_device = std::max(f.from_device, fits_.back().from_device);
  }
  fits_.push_back(f);
  return true;
}

int64_t ClockFit::to_host(int64_t device) const {
  std::lock_guard lk(mu_);
  if (fits_.empty()) return device;
  auto it = std::upper_bound(fits_.begin(), fits_.end(), device,
                             [](int64_t d, const Fit& f) { return d < f.from_device; });
  const Fit& f = it == fits_.begin() ? fits_.front() : *(it - 1);
  double dx = static_cast<double>(device - f.ref_device);
  return f.ref_host + static_cast<int64_t>(std::llround(f.slope * dx));
}

std::vector<ClockFit::Fit> ClockFit::fits() const {
  std::lock_guard lk(mu_);
  return fits_;
}

bool ClockFit::empty() const {
  std::lock_guard lk(mu_);
  return fits_.empty();
}

}  // namespace braid::capture

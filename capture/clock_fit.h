// Maps device (CUPTI) timestamps onto the host clock with a least-squares line fitted to
// (device, host) sample pairs, refitted during a capture so slow drift between the two clocks
// does not accumulate. Each refit covers device times from where the previous one ended.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace braid::capture {

// The host clock of every capture row and of the window edges: CLOCK_REALTIME in ns.
int64_t host_now_ns();

class ClockFit {
 public:
  struct Sample {
    int64_t device = 0, host = 0;
  };
  struct Fit {
    int64_t from_device = INT64_MIN;  // first device time this fit maps
    int64_t ref_device = 0, ref_host = 0;
    double slope = 1.0;
    double residual_ns = 0;  // RMS of the samples' distance to the line
    int samples = 0;
  };

  explicit ClockFit(size_t window = 16) : window_(window) {}

  // Takes one pair by reading the host clock around the device clock `tries` times and keeping
  // the read with the narrowest host bracket.
  static Sample sample(const std::function<int64_t()>& device_now,
                       const std::function<int64_t()>& host_now, int tries = 5);

  void add(Sample s);
  // Fits the latest `window` samples; returns false (and keeps the old fit) with fewer than 2.
  bool refit();
  int64_t to_host(int64_t device) const;
  std::vector<Fit> fits() const;
  bool empty() const;

 private:
  size_t window_;
  mutable std::mutex mu_;
  std::deque<Sample> samples_;
  std::vector<Fit> fits_;
};

}  // namespace braid::capture

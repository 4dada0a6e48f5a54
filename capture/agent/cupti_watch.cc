// Other CUPTI clients as the agent watches for them (cupti_state.h): what they did, said once
// per kind on stderr and counted in diagnostics, and the canary that notices a client taking
// CUPTI's activity buffers by a way the exported functions (cupti_clients.cc) do not see: while
// a window is open, a DEVICE record dumped into braid's buffers every recalibration period must
// come back through them.
#include <cupti.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include "capture/agent/agent.h"
#include "capture/agent/cupti_state.h"
#include "capture/cupti_parse.h"
#include "trace/diagnostics.h"

namespace braid::capture::agent {

namespace {
// What another CUPTI client did, said once per code on stderr and counted in diagnostics.
std::atomic<bool> g_said_contended{false}, g_said_taken{false};
}  // namespace

void report_other_client(bool taken, const std::string& detail) {
  std::atomic<bool>& said = taken ? g_said_taken : g_said_contended;
  if (!said.exchange(true)) std::fprintf(stderr, "braid capture: %s\n", detail.c_str());
  Agent* a = Agent::running();
  if (!a) return;
  Diagnostic d;
  diag::set_code(d, taken ? diag::Code::capture_cupti_taken : diag::Code::capture_cupti_contended);
  d.detail = detail;
  a->pipeline().post(d);
}

std::string result_name(CUptiResult rc) {
  const char* s = nullptr;
  cuptiGetResultString(rc, &s);
  return s ? s : "CUPTI error " + std::to_string(static_cast<int>(rc));
}

namespace {

// Canary: while a window is open, a DEVICE record dumped into braid's buffers every
// recalibration period must come back through them; two in a row that do not mean another
// client took the activity API by a way the exported functions do not see.
std::atomic<bool> g_canary_out{false};
int g_canary_misses = 0;                              // writer thread only
std::chrono::steady_clock::time_point g_last_canary;  // writer thread only
}  // namespace

void canary_tick(int period_ms) {
  if (!window_kinds_on() || !braid_registered() || g_said_taken.load()) {
    g_canary_out.store(false);
    g_canary_misses = 0;
    return;
  }
  auto now = std::chrono::steady_clock::now();
  if (now - g_last_canary < std::chrono::milliseconds(period_ms)) return;
  g_last_canary = now;
  if (g_canary_out.load()) {
    if (++g_canary_misses >= 2) {
      report_other_client(true,
                          "no activity buffer has reached braid for two checks although its window "
                          "is open: another CUPTI client took CUPTI's activity buffers (braid's "
                          "kernel, copy and API records stop here)");
      return;
    }
  } else {
    g_canary_misses = 0;
  }
  g_canary_out.store(true);
  cuptiActivityEnableAndDump(CUPTI_ACTIVITY_KIND_DEVICE);
}

namespace {

// Hands parsed records on, noting the canary's DEVICE record.
class CanaryHandler final : public ActivityHandler {
 public:
  explicit CanaryHandler(ActivityHandler& h) : h_(h) {}
  void on_kernel(const KernelActivity& k) override { h_.on_kernel(k); }
  void on_mem(const MemActivity& m) override { h_.on_mem(m); }
  void on_api(const ApiActivity& a) override { h_.on_api(a); }
  void on_sync(const SyncActivity& s) override { h_.on_sync(s); }
  void on_marker(const MarkerActivity& m) override { h_.on_marker(m); }
  void on_external_correlation(const ExternalCorrelationActivity& e) override {
    h_.on_external_correlation(e);
  }
  void on_device(const DeviceActivity& d) override {
    g_canary_out.store(false);
    h_.on_device(d);
  }
  void on_unhandled(uint32_t kind) override { h_.on_unhandled(kind); }

 private:
  ActivityHandler& h_;
};

}  // namespace

void parse_with_canary(const uint8_t* buf, size_t valid, ActivityHandler& h) {
  CanaryHandler ch(h);
  ParseStats st = parse_activity_buffer(buf, valid, ch);
  (void)st;
}

}  // namespace braid::capture::agent

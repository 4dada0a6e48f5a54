#include "trace/temp_cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace braid {
namespace {

// Async-signal-safe: a fixed buffer and unlink(). One slot: a command fills one output at a time.
char g_temp_path[4096];
std::atomic<bool> g_temp_set{false};

void on_signal(int sig) {
  if (g_temp_set.load()) unlink(g_temp_path);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void register_temp_for_cleanup(const std::string& p) {
  if (p.size() + 1 > sizeof g_temp_path) return;
  g_temp_set = false;
  std::memcpy(g_temp_path, p.c_str(), p.size() + 1);
  g_temp_set = true;
}

void unregister_temp_for_cleanup() { g_temp_set = false; }

void install_temp_cleanup_on_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

}  // namespace braid

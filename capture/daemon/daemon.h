// `braid daemon`: one per node. Agents of running jobs register over a Unix socket; a trigger
// opens a capture window in every registered process of a job; the agents stream their records
// back and the daemon writes one `.braid` per node and capture (capture::FileSink: durable as it
// goes). Single-threaded: one poll() loop over the listening socket and every connection, so no
// agent or client can block another. docs/daemon.md describes operation, docs/daemon-protocol.md
// the messages.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/daemon/protocol.h"
#include "capture/file_sink.h"
#include "trace/model.h"

namespace braid::daemon {

struct DaemonOptions {
  std::string socket_path;  // default_socket_path() when empty
  std::string out_dir;      // where captures go unless a trigger names another directory
  // After Close (or a steps window's time limit), how long an agent may stay silent before it
  // counts as lost: every batch of records a pending agent sends restarts the wait, so a slow
  // node still delivering is waited for, up to close_max_ms after the close in all.
  int64_t close_grace_ms = 10'000;
  int64_t close_max_ms = 120'000;
  // A steps window that has not finished after this long is closed.
  int64_t steps_timeout_ms = 600'000;
  // Per-connection cap on queued outgoing bytes; a peer that does not read is dropped.
  size_t max_queued_bytes = 64u << 20;
  std::function<void(const std::string&)> log;  // one line per event; none when empty
};

// $XDG_RUNTIME_DIR/braid/daemon.sock, else /run/braid/daemon.sock for root, else
// /tmp/braid-<uid>/daemon.sock.
std::string default_socket_path();

struct DaemonStats {
  int64_t agents_registered = 0, agents_now = 0;
  int64_t captures_started = 0, captures_completed = 0;
  int64_t records = 0, dropped = 0, agents_lost = 0;
  int64_t refused_peers = 0, protocol_errors = 0;
};

class Daemon {
 public:
  // Creates the socket's directory (0700) and the socket (0600). Refuses to start when another
  // daemon answers on the socket; removes a stale socket file. Throws braid::Error.
  explicit Daemon(DaemonOptions opts);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves until stop(). Captures in progress at stop are finished with what arrived (their
  // agents count as lost), so every started capture ends as a valid file.
  void run();
  void stop();  // from any thread or a signal handler
  const std::string& socket_path() const { return opts_.socket_path; }
  DaemonStats stats() const;  // thread-safe snapshot

 private:
  struct Conn;
  struct Capture;

  void accept_new();
  void on_readable(Conn& c);
  void on_frame(Conn& c, MsgType type, std::string_view payload);
  void on_hello(Conn& c, std::string_view p);
  void on_trigger(Conn& c, std::string_view p);
  void on_records(Conn& c, std::string_view p);
  void on_done(Conn& c, std::string_view p);
  void on_rank(Conn& c, std::string_view p);
  // Moves `c`'s rows of `cap` onto rank `to` (only its own); refused with the diagnostic
  // daemon.rank_conflict when another process of the capture holds that rank. Returns the rank
  // c's rows are stored under afterwards.
  int32_t rerank(Capture& cap, const Conn& c, int32_t to);
  void send(Conn& c, std::string bytes);
  void write_pending(Conn& c);
  void drop(Conn& c, const std::string& why);  // closes after sending what is queued
  void agent_gone(Conn& c, const std::string& why);
  void check_deadlines();
  void finish(Capture& cap);
  std::string status_json() const;
  void log(const std::string& line) const;
  int64_t now_ms() const;

  DaemonOptions opts_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  uint64_t next_conn_ = 1, next_capture_ = 1;
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::map<uint64_t, std::unique_ptr<Capture>> captures_;
  std::vector<std::string> completed_;  // JSON objects of the last completed captures
  // The counters stats() returns: the serving thread adds to them (count), any thread reads them.
  void count(int64_t DaemonStats::*counter, int64_t n = 1);
  mutable std::mutex stats_mu_;
  DaemonStats stats_;
};

}  // namespace braid::daemon

// The two kinds of daemon peers: command-line clients (`braid trigger`, `braid status`) over a
// blocking connection, and agents (the capture agent in attach mode, or the tests' fake agents)
// through AgentClient, which keeps the job running whatever the daemon does.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "capture/daemon/protocol.h"
#include "capture/daemon/records_codec.h"
#include "capture/sink.h"

namespace braid::daemon {

// A blocking connection for command-line clients.
class ClientConnection {
 public:
  // Throws braid::Error(NotFound) with a hint when no daemon listens at `socket_path`.
  explicit ClientConnection(const std::string& socket_path);
  ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  void send(const std::string& frame);
  // The next message, or nothing after `timeout_ms` (-1: wait forever). Throws braid::Error
  // when the daemon closes the connection or breaks the protocol.
  std::optional<FrameReader::Frame> read(int timeout_ms = -1);

 private:
  int fd_ = -1;
  std::string path_;
  FrameReader in_;
};

struct AgentIdentity {
  int64_t pid = -1;
  int32_t rank = -1, local_rank = -1, world_size = -1;
  std::string job_id, host, devices;
};

// An agent's link to its node daemon. A background thread connects (retrying every
// `retry_ms` while the daemon is absent), registers, and calls `on_open` / `on_close` when the
// daemon opens or closes a capture window. Records go through sink(capture_id). When the daemon
// goes away mid-window the window is closed (on_close), records are dropped and counted, and the
// job is never blocked or failed.
class AgentClient {
 public:
  struct Callbacks {
    std::function<void(const Open&)> on_open;
    std::function<void(uint64_t capture_id)> on_close;
  };
  AgentClient(std::string socket_path, AgentIdentity id, Callbacks cb, int retry_ms = 500);
  ~AgentClient();  // disconnects; an open window is ended with Done("agent exiting")
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  bool registered() const { return registered_; }
  uint64_t agent_id() const { return agent_id_; }
  // Blocks up to timeout_ms for registration; true when registered.
  bool wait_registered(int timeout_ms);

  // Sends a whole frame; false (and the bytes counted as dropped by the caller) when there is
  // no daemon, or the daemon took none of it for send_patience_ms (then the connection is
  // given up). Thread-safe; only the calling thread waits.
  bool send_frame(const std::string& frame);
  // How long a send waits for a daemon that is not reading: kSendPatienceMs while the job runs
  // (longer than the daemon's default close grace, so the daemon's policy decides who is
  // late), shorter at exit so a hung daemon cannot hold the job's exit.
  static constexpr int kSendPatienceMs = 30'000;
  static constexpr int kExitSendPatienceMs = 2'000;
  void set_send_patience_ms(int ms) { send_patience_ms_.store(ms); }
  // The process learnt its rank (from its largest communicator): tells the daemon now when
  // registered (a Rank message: `braid status` and a capture in progress follow it), and
  // registers with it from then on. Thread-safe; repeating the same rank sends nothing.
  void update_rank(int32_t rank, int32_t world_size);
  // Ends a window: every record of `capture_id` has been sent.
  void done(uint64_t capture_id, int64_t dropped, const std::string& reason);
  // In a forked child (which has no client thread): drops the inherited connection so the
  // daemon sees the parent leave when it does. The object must not be used or destroyed after.
  void abandon_in_forked_child();

 private:
  void loop();
  bool connect_once();
  void disconnect(const std::string& why);
  void send_rank_if_dirty();  // on the client's thread

  std::string path_;
  AgentIdentity id_;  // rank and world_size guarded by state_mu_ (update_rank)
  Callbacks cb_;
  int retry_ms_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> registered_{false};
  std::atomic<uint64_t> agent_id_{0};
  std::atomic<int> fd_{-1};
  std::atomic<int> send_patience_ms_{kSendPatienceMs};
  std::atomic<bool> rank_dirty_{false};  // update_rank asked the client's thread to send it
  int wake_[2] = {-1, -1};
  std::mutex send_mu_;
  std::mutex state_mu_;
  std::condition_variable state_cv_;
  uint64_t open_capture_ = 0;  // guarded by state_mu_
  int32_t hello_rank_ = -1, hello_world_ = -1;  // what the last hello said; state_mu_
  std::thread thread_;
};

// A capture::Sink that streams records of one capture window to the daemon. Buffers up to
// `batch_bytes` before sending; records that cannot be sent (no daemon) are counted in
// dropped(), never retried, never blocking.
class DaemonSink final : public capture::RowSink<DaemonSink> {
 public:
  DaemonSink(AgentClient& client, uint64_t capture_id, size_t batch_bytes = 1u << 20);

  StrId intern(std::string_view s) override;
  void replace_window(Ns old_start, const CaptureWindow& w) override {
    enc_.replace_window(old_start, w), after_add();
  }
  void set_rank_info(const RankInfo& r) override { enc_.rank_info(r); }
  void add_stream(const StreamInfo& s) override { enc_.stream(s); }
  void add_communicator(const Communicator& c) override { enc_.communicator(c); }
  void set_diagnostic(const Diagnostic& d) override { enc_.diagnostic(d); }
  void set_meta(std::string_view k, std::string_view v) override { enc_.meta(k, v); }
  void renumber_rank(int32_t from, int32_t to) override { enc_.renumber(from, to); }
  void checkpoint() override { send_batch(); }
  void close() override;  // sends the last batch, then Done

  int64_t sent_rows() const { return sent_rows_; }
  int64_t dropped() const { return dropped_; }

 private:
  friend class capture::RowSink<DaemonSink>;  // every row kind comes to row()
  template <typename Row>
  void row(const Row& r) {
    enc_.add(r);
    after_add();
  }
  void after_add() {
    ++rows_in_batch_;
    if (enc_.bytes() >= batch_bytes_) send_batch();
  }
  void send_batch();

  AgentClient& client_;
  uint64_t capture_;
  size_t batch_bytes_;
  RecordEncoder enc_;
  std::unordered_map<std::string, StrId> strings_;
  StrId next_string_ = 1;
  int64_t rows_in_batch_ = 0, sent_rows_ = 0, dropped_ = 0;
  bool closed_ = false;
};

}  // namespace braid::daemon

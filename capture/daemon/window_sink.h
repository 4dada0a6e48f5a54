// The agent's sink in attach mode: records go nowhere until the daemon opens a capture window,
// then to that capture (over AgentClient, as DaemonSink does) until the window closes.
//
// The pipeline's collector interns strings and writes the small tables (rank info, streams,
// communicators, diagnostics, meta) once, whenever they change, not once per window. So this
// sink keeps its own string table for the whole process (ids stay valid across windows) and the
// latest small-table state, and replays both at the start of every window: each capture file is
// self-contained. Diagnostics are sent as counts since the window opened.
//
// Only the agent's writer thread calls it (Sink contract), including open_window/close_window,
// which the agent posts as pipeline controls so they fall in order with the records.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "capture/daemon/client.h"
#include "capture/daemon/records_codec.h"
#include "capture/sink.h"

namespace braid::daemon {

class WindowSink final : public capture::RowSink<WindowSink> {
 public:
  explicit WindowSink(AgentClient& client, size_t batch_bytes = 1u << 20);

  // Starts sending to `capture_id` (finishing a window still open, as "superseded").
  void open_window(uint64_t capture_id);
  // Stops taking new records for `capture_id` but keeps the window open until the end of the
  // next pipeline cycle (checkpoint), so the records made inside it that are still on their way
  // (an NCCL call returning, CUPTI buffers flushed by the next cycle) still reach it; then sends
  // Done. A capture id that is not the open window's is ignored (already closed).
  void close_window(uint64_t capture_id, std::string reason);
  // Called just before a window's Done: the collector writes what it still holds for it.
  void set_before_done(std::function<void()> f) { before_done_ = std::move(f); }

  uint64_t capture_id() const { return capture_; }
  bool window_open() const { return state_ != State::Closed; }
  int64_t windows_done() const { return windows_done_; }

  StrId intern(std::string_view s) override;
  void replace_window(Ns old_start, const CaptureWindow& w) override;
  void set_rank_info(const RankInfo& r) override;
  void add_stream(const StreamInfo& s) override;
  void add_communicator(const Communicator& c) override;
  void set_diagnostic(const Diagnostic& d) override;
  void set_meta(std::string_view k, std::string_view v) override;
  // The process learnt its rank late (its largest communicator). Moves the replayed state and,
  // inside a window, sends a renumber item: the daemon moves this process's rows of the capture
  // only (protocol version 2).
  void renumber_rank(int32_t from, int32_t to) override;
  // The process learnt its rank (even one equal to the placeholder, which renumbers nothing):
  // the daemon updates its registration (`braid status`) and a capture in progress moves this
  // process's rows there (AgentClient::update_rank, a rank message).
  void rank_learnt(int32_t rank, int32_t world_size) { client_.update_rank(rank, world_size); }
  void checkpoint() override;
  void close() override;  // the process is ending: a window still open ends "job exiting"

 private:
  enum class State { Closed, Open, Closing };
  friend class capture::RowSink<WindowSink>;  // every row kind comes to row()
  template <typename Row>
  void row(const Row& r) {
    if (state_ == State::Closed) return;  // outside any window: not captured
    enc_.add(r);
    ++rows_in_batch_;
    if (enc_.bytes() >= batch_bytes_) send_batch();
  }
  void replay();  // every string and the small tables, into the current batch
  void send_diagnostic(const Diagnostic& d);
  void send_batch();
  void finish(const std::string& reason);

  AgentClient& client_;
  size_t batch_bytes_;
  std::unordered_map<std::string, StrId> ids_;
  std::vector<std::string> texts_;  // id - 1 -> text
  std::map<int32_t, RankInfo> ranks_;
  std::map<std::tuple<int32_t, int64_t, bool>, StreamInfo> streams_;
  std::map<std::string, Communicator> comms_;
  std::map<std::pair<int32_t, std::string>, Diagnostic> diags_;
  std::map<std::pair<int32_t, std::string>, int64_t> diag_base_;  // counts when the window opened
  std::map<std::string, std::string> meta_;
  std::function<void()> before_done_;

  State state_ = State::Closed;
  uint64_t capture_ = 0;
  std::string close_reason_;
  int closing_cycles_ = 0;
  RecordEncoder enc_;
  int64_t rows_in_batch_ = 0, sent_ = 0, dropped_ = 0, windows_done_ = 0;
};

}  // namespace braid::daemon

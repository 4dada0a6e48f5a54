#include "capture/daemon/window_sink.h"

#include "trace/diagnostics.h"

namespace braid::daemon {

namespace {
// Counters that say records of the window were lost on the agent's side; their growth during a
// window is added to the dropped count sent with Done.
bool is_drop_counter(const std::string& code) {
  using diag::Code;
  return code == diag::info(Code::capture_dropped_records).code ||
         code == diag::info(Code::capture_queue_overflow).code ||
         code == diag::info(Code::capture_buffer_refused).code;
}
}  // namespace

WindowSink::WindowSink(AgentClient& client, size_t batch_bytes)
    : client_(client), batch_bytes_(batch_bytes) {}

StrId WindowSink::intern(std::string_view s) {
  auto it = ids_.find(std::string(s));
  if (it != ids_.end()) return it->second;
  texts_.emplace_back(s);
  auto id = static_cast<StrId>(texts_.size());
  ids_.emplace(std::string(s), id);
  if (state_ != State::Closed) enc_.string(id, s);  // defined before any row uses it
  return id;
}

void WindowSink::set_rank_info(const RankInfo& r) {
  ranks_[r.rank] = r;
  if (state_ != State::Closed) enc_.rank_info(r);
}

void WindowSink::add_stream(const StreamInfo& s) {
  streams_[{s.rank, s.stream, s.gpu}] = s;
  if (state_ != State::Closed) enc_.stream(s);
}

void WindowSink::add_communicator(const Communicator& c) {
  comms_[c.comm] = c;
  if (state_ != State::Closed) enc_.communicator(c);
}

void WindowSink::send_diagnostic(const Diagnostic& d) {
  Diagnostic w = d;
  auto base = diag_base_.find({d.rank, d.code});
  if (base != diag_base_.end()) w.count -= base->second;
  if (w.count > 0) enc_.diagnostic(w);
}

void WindowSink::set_diagnostic(const Diagnostic& d) {
  diags_[{d.rank, d.code}] = d;
  if (state_ != State::Closed) send_diagnostic(d);
}

void WindowSink::set_meta(std::string_view k, std::string_view v) {
  meta_[std::string(k)] = std::string(v);
  if (state_ != State::Closed) enc_.meta(k, v);
}

void WindowSink::renumber_rank(int32_t from, int32_t to) {
  if (from == to) return;
  if (state_ != State::Closed) enc_.renumber(from, to);
  capture::renumber_keys(streams_, from, to);
  capture::renumber_keys(diags_, from, to);
  capture::renumber_keys(diag_base_, from, to);
  capture::renumber_keys(ranks_, from, to);
}

void WindowSink::replace_window(Ns old_start, const CaptureWindow& w) {
  if (state_ == State::Closed) return;  // outside any window: not captured
  enc_.replace_window(old_start, w);
  ++rows_in_batch_;
  if (enc_.bytes() >= batch_bytes_) send_batch();
}

void WindowSink::replay() {
  for (size_t i = 0; i < texts_.size(); ++i) enc_.string(static_cast<StrId>(i + 1), texts_[i]);
  for (auto& [k, m] : meta_) enc_.meta(k, m);
  for (auto& [rank, r] : ranks_) enc_.rank_info(r);
  for (auto& [k, s] : streams_) enc_.stream(s);
  for (auto& [k, c] : comms_) enc_.communicator(c);
  for (auto& [k, d] : diags_) send_diagnostic(d);
}

void WindowSink::open_window(uint64_t capture_id) {
  if (state_ != State::Closed) finish("superseded by capture " + std::to_string(capture_id));
  state_ = State::Open;
  capture_ = capture_id;
  closing_cycles_ = 0;
  close_reason_.clear();
  rows_in_batch_ = sent_ = dropped_ = 0;
  diag_base_.clear();
  for (auto& [k, d] : diags_) diag_base_[k] = d.count;
  enc_ = RecordEncoder();
  replay();
  send_batch();  // the window's identity reaches the daemon now, records or not
}

void WindowSink::close_window(uint64_t capture_id, std::string reason) {
  if (state_ != State::Open || capture_id != capture_) return;
  state_ = State::Closing;
  closing_cycles_ = 0;
  close_reason_ = std::move(reason);
}

void WindowSink::send_batch() {
  if (enc_.empty()) return;
  int64_t rows = rows_in_batch_;
  rows_in_batch_ = 0;
  std::string f = enc_.take_frame(capture_);
  if (client_.send_frame(f)) {
    sent_ += rows;
  } else {
    dropped_ += rows;
    // The lost batch may have defined strings and small tables later rows rely on.
    replay();
  }
}

void WindowSink::finish(const std::string& reason) {
  if (state_ == State::Closed) return;
  if (before_done_) before_done_();  // may add rows: the window still takes them
  send_batch();
  int64_t dropped = dropped_;
  for (auto& [k, d] : diags_) {
    if (!is_drop_counter(k.second)) continue;
    auto base = diag_base_.find(k);
    dropped += d.count - (base != diag_base_.end() ? base->second : 0);
  }
  client_.done(capture_, dropped, reason);
  state_ = State::Closed;
  capture_ = 0;
  enc_ = RecordEncoder();
  rows_in_batch_ = 0;
  ++windows_done_;
}

void WindowSink::checkpoint() {
  if (state_ == State::Closing && closing_cycles_++ >= 1) {
    finish(close_reason_);
    return;
  }
  send_batch();
}

void WindowSink::close() {
  if (state_ != State::Closed) finish(state_ == State::Closing ? close_reason_ : "job exiting");
}

}  // namespace braid::daemon

// Capture records on the wire: the agent side encodes Sink calls into Records messages
// (RecordEncoder, used by DaemonSink); the daemon decodes them into its own Sink (a FileSink per
// capture), mapping the agent's string ids onto the sink's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "capture/daemon/protocol.h"
#include "capture/records.h"
#include "capture/sink.h"

namespace braid::daemon {

class RecordEncoder {
 public:
  void string(StrId id, std::string_view text);
  void add(const Kernel& k);
  void add(const Memcpy& m);
  void add(const ApiCall& a);
  void add(const Range& r);
  void add(const Collective& c);
  void add(const Step& s);
  void add(const capture::NcclCallRow& c);
  void add(const capture::ProxyOpRow& p);
  void add(const CaptureWindow& w);
  void replace_window(Ns old_start, const CaptureWindow& w);
  void rank_info(const RankInfo& r);
  void stream(const StreamInfo& s);
  void communicator(const Communicator& c);
  void diagnostic(const Diagnostic& d);
  void meta(std::string_view key, std::string_view value);
  void renumber(int32_t from, int32_t to);

  size_t bytes() const { return e_.size(); }
  int64_t items() const { return items_; }
  bool empty() const { return items_ == 0; }
  // The whole Records frame for `capture_id`; the encoder is empty afterwards.
  std::string take_frame(uint64_t capture_id);

 private:
  Encoder e_;
  int64_t items_ = 0;
};

// The capture a Records payload belongs to.
uint64_t records_capture_id(std::string_view payload);

// Where one sender's rows go. A process sends only its own rows, so every rank field of its items
// is written as `rank` (the rank the daemon stores this process under in this capture), whatever
// the agent put there; a renumber item calls `renumber(from, to)`, which moves the sender's rows
// already written and updates `rank`. Nothing else in the file moves.
struct SenderRank {
  int32_t rank = 0;
  std::function<void(int32_t from, int32_t to)> renumber;
  int32_t own(int32_t /*sent*/) const { return rank; }
};

// Applies every item of a Records payload to `sink`. `strings` maps the agent's string ids to
// the sink's (kept per agent and capture across messages). Returns the number of event rows
// (kernels, memcpys, api calls, ranges, collectives, steps, NCCL calls, proxy ops). Throws
// ProtocolError on a malformed payload, an unknown string id or an out-of-range enum; items
// before the bad one have been applied.
int64_t apply_records(std::string_view payload, capture::Sink& sink,
                      std::unordered_map<StrId, StrId>& strings, SenderRank& sender);

}  // namespace braid::daemon

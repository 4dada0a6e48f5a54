#include "capture/daemon/protocol.h"

#include <cstring>

namespace braid::daemon {

std::string_view to_string(MsgType t) {
  switch (t) {
    case MsgType::Hello: return "hello";
    case MsgType::Welcome: return "welcome";
    case MsgType::Error: return "error";
    case MsgType::Open: return "open";
    case MsgType::Close: return "close";
    case MsgType::Records: return "records";
    case MsgType::Done: return "done";
    case MsgType::Trigger: return "trigger";
    case MsgType::Triggered: return "triggered";
    case MsgType::CaptureDone: return "capture-done";
    case MsgType::StatusRequest: return "status-request";
    case MsgType::Status: return "status";
    case MsgType::Rank: return "rank";
  }
  return "unknown";
}

void Encoder::put(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }

uint8_t Decoder::u8() {
  if (pos_ + 1 > d_.size()) throw ProtocolError("message truncated");
  return static_cast<uint8_t>(d_[pos_++]);
}
uint32_t Decoder::u32() {
  if (pos_ + 4 > d_.size()) throw ProtocolError("message truncated");
  uint32_t v;
  std::memcpy(&v, d_.data() + pos_, 4);
  pos_ += 4;
  return v;
}
int64_t Decoder::i64() {
  if (pos_ + 8 > d_.size()) throw ProtocolError("message truncated");
  int64_t v;
  std::memcpy(&v, d_.data() + pos_, 8);
  pos_ += 8;
  return v;
}
std::string Decoder::str() {
  uint32_t n = u32();
  if (n > d_.size() - pos_) throw ProtocolError("string longer than the message");
  std::string s(d_.substr(pos_, n));
  pos_ += n;
  return s;
}
void Decoder::expect_done() const {
  if (!done()) throw ProtocolError("trailing bytes after the message");
}

std::string frame(MsgType type, std::string_view payload) {
  std::string f;
  uint32_t len = static_cast<uint32_t>(payload.size() + 1);
  f.append(reinterpret_cast<const char*>(&len), 4);
  f.push_back(static_cast<char>(type));
  f.append(payload);
  return f;
}

std::optional<FrameReader::Frame> FrameReader::next() {
  if (buf_.size() - pos_ < 4) return std::nullopt;
  uint32_t len;
  std::memcpy(&len, buf_.data() + pos_, 4);
  if (len == 0) throw ProtocolError("empty frame");
  if (len > kMaxFrame)
    throw ProtocolError("frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                        std::to_string(kMaxFrame));
  if (buf_.size() - pos_ - 4 < len) return std::nullopt;
  uint8_t type = static_cast<uint8_t>(buf_[pos_ + 4]);
  if (type < 1 || type > static_cast<uint8_t>(MsgType::Rank))
    throw ProtocolError("unknown message type " + std::to_string(type));
  Frame f{static_cast<MsgType>(type), buf_.substr(pos_ + 5, len - 1)};
  pos_ += 4 + len;
  if (pos_ > (1u << 20) && pos_ * 2 > buf_.size()) {  // compact now and then
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return f;
}

std::string encode(const Hello& m) {
  Encoder e;
  e.u32(m.version);
  e.i64(m.pid);
  e.i32(m.rank);
  e.i32(m.local_rank);
  e.i32(m.world_size);
  e.str(m.job_id);
  e.str(m.host);
  e.str(m.devices);
  return frame(MsgType::Hello, e.bytes());
}
Hello decode_hello(std::string_view p) {
  Decoder d(p);
  Hello m;
  m.version = d.u32();
  if (m.version != kProtocolVersion) {
    // Anything after the version may be laid out differently: report the version only.
    m.pid = -1;
    return m;
  }
  m.pid = d.i64();
  m.rank = d.i32();
  m.local_rank = d.i32();
  m.world_size = d.i32();
  m.job_id = d.str();
  m.host = d.str();
  m.devices = d.str();
  d.expect_done();
  return m;
}

std::string encode(const RankUpdate& m) {
  Encoder e;
  e.i32(m.rank);
  e.i32(m.world_size);
  return frame(MsgType::Rank, e.bytes());
}
RankUpdate decode_rank(std::string_view p) {
  Decoder d(p);
  RankUpdate m;
  m.rank = d.i32();
  m.world_size = d.i32();
  d.expect_done();
  if (m.rank < 0) throw ProtocolError("rank message with a negative rank");
  return m;
}

std::string encode(const Welcome& m) {
  Encoder e;
  e.u32(m.version);
  e.u64(m.agent_id);
  return frame(MsgType::Welcome, e.bytes());
}
Welcome decode_welcome(std::string_view p) {
  Decoder d(p);
  Welcome m;
  m.version = d.u32();
  m.agent_id = d.u64();
  d.expect_done();
  return m;
}

namespace {
WindowMode window_mode(uint8_t v) {
  if (v != 1 && v != 2) throw ProtocolError("unknown window mode " + std::to_string(v));
  return static_cast<WindowMode>(v);
}
}  // namespace

std::string encode(const Open& m) {
  Encoder e;
  e.u64(m.capture_id);
  e.u8(static_cast<uint8_t>(m.mode));
  e.i64(m.value);
  return frame(MsgType::Open, e.bytes());
}
Open decode_open(std::string_view p) {
  Decoder d(p);
  Open m;
  m.capture_id = d.u64();
  m.mode = window_mode(d.u8());
  m.value = d.i64();
  d.expect_done();
  return m;
}

std::string encode(uint64_t close_capture_id) {
  Encoder e;
  e.u64(close_capture_id);
  return frame(MsgType::Close, e.bytes());
}
uint64_t decode_close(std::string_view p) {
  Decoder d(p);
  uint64_t id = d.u64();
  d.expect_done();
  return id;
}

std::string encode(const Done& m) {
  Encoder e;
  e.u64(m.capture_id);
  e.i64(m.dropped);
  e.str(m.reason);
  return frame(MsgType::Done, e.bytes());
}
Done decode_done(std::string_view p) {
  Decoder d(p);
  Done m;
  m.capture_id = d.u64();
  m.dropped = d.i64();
  m.reason = d.str();
  d.expect_done();
  return m;
}

std::string encode(const Trigger& m) {
  Encoder e;
  e.str(m.job_id);
  e.u8(static_cast<uint8_t>(m.mode));
  e.i64(m.value);
  e.str(m.out_dir);
  return frame(MsgType::Trigger, e.bytes());
}
Trigger decode_trigger(std::string_view p) {
  Decoder d(p);
  Trigger m;
  m.job_id = d.str();
  m.mode = window_mode(d.u8());
  m.value = d.i64();
  m.out_dir = d.str();
  d.expect_done();
  if (m.value <= 0) throw ProtocolError("a capture window must be positive");
  return m;
}

std::string encode(const Triggered& m) {
  Encoder e;
  e.u64(m.capture_id);
  e.u32(m.agents);
  e.str(m.job_id);
  e.str(m.path);
  return frame(MsgType::Triggered, e.bytes());
}
Triggered decode_triggered(std::string_view p) {
  Decoder d(p);
  Triggered m;
  m.capture_id = d.u64();
  m.agents = d.u32();
  m.job_id = d.str();
  m.path = d.str();
  d.expect_done();
  return m;
}

std::string encode(const CaptureDone& m) {
  Encoder e;
  e.u64(m.capture_id);
  e.str(m.path);
  e.i64(m.records);
  e.i64(m.dropped);
  e.u32(m.agents);
  e.u32(m.agents_lost);
  e.str(m.detail);
  return frame(MsgType::CaptureDone, e.bytes());
}
CaptureDone decode_capture_done(std::string_view p) {
  Decoder d(p);
  CaptureDone m;
  m.capture_id = d.u64();
  m.path = d.str();
  m.records = d.i64();
  m.dropped = d.i64();
  m.agents = d.u32();
  m.agents_lost = d.u32();
  m.detail = d.str();
  d.expect_done();
  return m;
}

std::string encode_error(std::string_view message) {
  Encoder e;
  e.str(message);
  return frame(MsgType::Error, e.bytes());
}
std::string encode_status(std::string_view json) {
  Encoder e;
  e.str(json);
  return frame(MsgType::Status, e.bytes());
}
std::string decode_text(std::string_view p) {
  Decoder d(p);
  std::string s = d.str();
  d.expect_done();
  return s;
}

}  // namespace braid::daemon

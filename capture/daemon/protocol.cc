#include "capture/daemon/protocol.h"

#include <cstring>
#include <tuple>

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

namespace {

WindowMode window_mode(uint8_t v) {
  if (v != 1 && v != 2) throw ProtocolError("unknown window mode " + std::to_string(v));
  return static_cast<WindowMode>(v);
}

// A message field on the wire, by its C++ type: put() writes it, get() reads it back.
void put(Encoder& e, uint32_t v) { e.u32(v); }
void put(Encoder& e, int32_t v) { e.i32(v); }
void put(Encoder& e, int64_t v) { e.i64(v); }
void put(Encoder& e, uint64_t v) { e.u64(v); }
void put(Encoder& e, const std::string& v) { e.str(v); }
void put(Encoder& e, WindowMode v) { e.u8(static_cast<uint8_t>(v)); }
void get(Decoder& d, uint32_t& v) { v = d.u32(); }
void get(Decoder& d, int32_t& v) { v = d.i32(); }
void get(Decoder& d, int64_t& v) { v = d.i64(); }
void get(Decoder& d, uint64_t& v) { v = d.u64(); }
void get(Decoder& d, std::string& v) { v = d.str(); }
void get(Decoder& d, WindowMode& v) { v = window_mode(d.u8()); }

// Each message's type and fields in wire order (docs/daemon-protocol.md): the one list both
// encode() and its decode_*() follow. Hello's version is not in it: it comes first in every
// version of the protocol, and only it is read when it is not ours.
template <typename M>
struct Wire;
template <>
struct Wire<Hello> {
  static constexpr MsgType type = MsgType::Hello;
  static constexpr auto fields =
      std::tuple{&Hello::pid,    &Hello::rank, &Hello::local_rank, &Hello::world_size,
                 &Hello::job_id, &Hello::host, &Hello::devices};
};
template <>
struct Wire<RankUpdate> {
  static constexpr MsgType type = MsgType::Rank;
  static constexpr auto fields = std::tuple{&RankUpdate::rank, &RankUpdate::world_size};
};
template <>
struct Wire<Welcome> {
  static constexpr MsgType type = MsgType::Welcome;
  static constexpr auto fields = std::tuple{&Welcome::version, &Welcome::agent_id};
};
template <>
struct Wire<Open> {
  static constexpr MsgType type = MsgType::Open;
  static constexpr auto fields = std::tuple{&Open::capture_id, &Open::mode, &Open::value};
};
template <>
struct Wire<Done> {
  static constexpr MsgType type = MsgType::Done;
  static constexpr auto fields = std::tuple{&Done::capture_id, &Done::dropped, &Done::reason};
};
template <>
struct Wire<Trigger> {
  static constexpr MsgType type = MsgType::Trigger;
  static constexpr auto fields =
      std::tuple{&Trigger::job_id, &Trigger::mode, &Trigger::value, &Trigger::out_dir};
};
template <>
struct Wire<Triggered> {
  static constexpr MsgType type = MsgType::Triggered;
  static constexpr auto fields =
      std::tuple{&Triggered::capture_id, &Triggered::agents, &Triggered::job_id, &Triggered::path};
};
template <>
struct Wire<CaptureDone> {
  static constexpr MsgType type = MsgType::CaptureDone;
  static constexpr auto fields =
      std::tuple{&CaptureDone::capture_id, &CaptureDone::path,   &CaptureDone::records,
                 &CaptureDone::dropped,    &CaptureDone::agents, &CaptureDone::agents_lost,
                 &CaptureDone::detail};
};

template <typename M>
void write_fields(Encoder& e, const M& m) {
  std::apply([&](auto... field) { (put(e, m.*field), ...); }, Wire<M>::fields);
}
template <typename M>
void read_fields(Decoder& d, M& m) {
  std::apply([&](auto... field) { (get(d, m.*field), ...); }, Wire<M>::fields);
}

template <typename M>
std::string encode_message(const M& m) {
  Encoder e;
  write_fields(e, m);
  return frame(Wire<M>::type, e.bytes());
}
template <typename M>
M decode_message(std::string_view p) {
  Decoder d(p);
  M m;
  read_fields(d, m);
  d.expect_done();
  return m;
}

}  // namespace

std::string encode(const Hello& m) {
  Encoder e;
  e.u32(m.version);
  write_fields(e, m);
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
  read_fields(d, m);
  d.expect_done();
  return m;
}

std::string encode(const RankUpdate& m) { return encode_message(m); }
RankUpdate decode_rank(std::string_view p) {
  RankUpdate m = decode_message<RankUpdate>(p);
  if (m.rank < 0) throw ProtocolError("rank message with a negative rank");
  return m;
}

std::string encode(const Welcome& m) { return encode_message(m); }
Welcome decode_welcome(std::string_view p) { return decode_message<Welcome>(p); }

std::string encode(const Open& m) { return encode_message(m); }
Open decode_open(std::string_view p) { return decode_message<Open>(p); }

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

std::string encode(const Done& m) { return encode_message(m); }
Done decode_done(std::string_view p) { return decode_message<Done>(p); }

std::string encode(const Trigger& m) { return encode_message(m); }
Trigger decode_trigger(std::string_view p) {
  Trigger m = decode_message<Trigger>(p);
  if (m.value <= 0) throw ProtocolError("a capture window must be positive");
  return m;
}

std::string encode(const Triggered& m) { return encode_message(m); }
Triggered decode_triggered(std::string_view p) { return decode_message<Triggered>(p); }

std::string encode(const CaptureDone& m) { return encode_message(m); }
CaptureDone decode_capture_done(std::string_view p) { return decode_message<CaptureDone>(p); }

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

// The agent <-> daemon protocol (docs/daemon-protocol.md is the reference; keep them in step).
//
// One Unix stream socket per node. Every message is a frame:
//     u32 length (little-endian, bytes after this field) | u8 type | payload
// Payload fields are little-endian fixed-size integers and length-prefixed strings (u32 + bytes).
// A frame longer than kMaxFrame, an unknown type or a payload that does not decode exactly is a
// protocol error: the receiver answers Error and closes the connection.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "trace/model.h"

namespace braid::daemon {

// 2: renumber is scoped to the sending process; the rank message; 3: the capture-window item;
// 4: the moved-capture-window item (docs/daemon-protocol.md).
inline constexpr uint32_t kProtocolVersion = 4;
inline constexpr uint32_t kMaxFrame = 16u << 20;  // 16 MiB

enum class MsgType : uint8_t {
  Hello = 1,         // agent -> daemon: register
  Welcome = 2,       // daemon -> agent: registered
  Error = 3,         // either way: a readable reason, then the sender closes
  Open = 4,          // daemon -> agent: open a capture window
  Close = 5,         // daemon -> agent: close it (duration windows)
  Records = 6,       // agent -> daemon: a batch of records of one capture
  Done = 7,          // agent -> daemon: window closed, every record sent
  Trigger = 8,       // client -> daemon: start a capture of a job
  Triggered = 9,     // daemon -> client: started
  CaptureDone = 10,  // daemon -> client: finished, file written
  StatusRequest = 11,
  Status = 12,       // daemon -> client: JSON text
  Rank = 13,         // agent -> daemon: the process learnt its rank (from its communicator)
};
std::string_view to_string(MsgType t);

class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Serializes payload fields.
class Encoder {
 public:
  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { put(&v, 4); }
  void i32(int32_t v) { put(&v, 4); }
  void i64(int64_t v) { put(&v, 8); }
  void u64(uint64_t v) { put(&v, 8); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    buf_.append(s);
  }
  const std::string& bytes() const { return buf_; }
  size_t size() const { return buf_.size(); }
  void clear() { buf_.clear(); }

 private:
  void put(const void* p, size_t n);  // little-endian hosts only (x86-64, aarch64)
  std::string buf_;
};

// Reads payload fields, throwing ProtocolError past the end.
class Decoder {
 public:
  explicit Decoder(std::string_view data) : d_(data) {}
  uint8_t u8();
  uint32_t u32();
  int32_t i32() { return static_cast<int32_t>(u32()); }
  int64_t i64();
  uint64_t u64() { return static_cast<uint64_t>(i64()); }
  std::string str();
  bool done() const { return pos_ == d_.size(); }
  void expect_done() const;

 private:
  std::string_view d_;
  size_t pos_ = 0;
};

// A whole frame (header + payload) for `type`.
std::string frame(MsgType type, std::string_view payload);

// Splits a byte stream into frames. feed() appends received bytes; next() returns a complete
// frame's (type, payload) or nothing; throws ProtocolError on an oversized or empty frame.
class FrameReader {
 public:
  void feed(const char* p, size_t n) { buf_.append(p, n); }
  struct Frame {
    MsgType type;
    std::string payload;
  };
  std::optional<Frame> next();
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
};

// ---- messages ----

struct Hello {
  uint32_t version = kProtocolVersion;
  int64_t pid = -1;
  int32_t rank = -1, local_rank = -1, world_size = -1;
  std::string job_id, host, devices;
};
struct Welcome {
  uint32_t version = kProtocolVersion;
  uint64_t agent_id = 0;
};
enum class WindowMode : uint8_t { Duration = 1, Steps = 2 };
struct RankUpdate {
  int32_t rank = -1, world_size = -1;
};
struct Open {
  uint64_t capture_id = 0;
  WindowMode mode = WindowMode::Duration;
  int64_t value = 0;  // nanoseconds (Duration) or a step count (Steps)
};
struct Done {
  uint64_t capture_id = 0;
  int64_t dropped = 0;   // records the agent could not deliver (its buffers were full, ...)
  std::string reason;    // "window closed", "job exiting", ...
};
struct Trigger {
  std::string job_id;  // empty: the only job registered
  WindowMode mode = WindowMode::Duration;
  int64_t value = 0;
  std::string out_dir;  // empty: the daemon's --out
};
struct Triggered {
  uint64_t capture_id = 0;
  uint32_t agents = 0;
  std::string job_id, path;
};
struct CaptureDone {
  uint64_t capture_id = 0;
  std::string path;
  int64_t records = 0, dropped = 0;
  uint32_t agents = 0, agents_lost = 0;
  std::string detail;
};

std::string encode(const Hello& m);
std::string encode(const Welcome& m);
std::string encode(const RankUpdate& m);
std::string encode(const Open& m);
std::string encode(uint64_t close_capture_id);  // Close
std::string encode(const Done& m);
std::string encode(const Trigger& m);
std::string encode(const Triggered& m);
std::string encode(const CaptureDone& m);
std::string encode_error(std::string_view message);
std::string encode_status(std::string_view json);

Hello decode_hello(std::string_view p);
Welcome decode_welcome(std::string_view p);
RankUpdate decode_rank(std::string_view p);
Open decode_open(std::string_view p);
uint64_t decode_close(std::string_view p);
Done decode_done(std::string_view p);
Trigger decode_trigger(std::string_view p);
Triggered decode_triggered(std::string_view p);
CaptureDone decode_capture_done(std::string_view p);
std::string decode_text(std::string_view p);  // Error, Status

// Records payload: u64 capture_id, then items until the end, each `u8 kind` + fields.
enum class ItemKind : uint8_t {
  String = 1,
  Kernel,
  Memcpy,
  ApiCall,
  Range,
  Collective,
  Step,
  NcclCall,
  ProxyOp,
  RankInfo,
  Stream,
  Communicator,
  Diagnostic,
  Meta,
  Renumber,
  Window,
  WindowMoved,  // version 4
};

}  // namespace braid::daemon

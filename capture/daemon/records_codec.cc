#include "capture/daemon/records_codec.h"

namespace braid::daemon {

namespace {
using K = ItemKind;
}

void RecordEncoder::string(StrId id, std::string_view text) {
  e_.u8(uint8_t(K::String));
  e_.u32(id);
  e_.str(text);
  ++items_;
}

void RecordEncoder::add(const Kernel& k) {
  e_.u8(uint8_t(K::Kernel));
  e_.i32(k.rank);
  e_.i64(k.stream);
  e_.i64(k.start);
  e_.i64(k.end);
  e_.u32(k.name);
  e_.u8(uint8_t(k.category));
  e_.i64(k.correlation);
  e_.i64(k.external_id);
  ++items_;
}

void RecordEncoder::add(const Memcpy& m) {
  e_.u8(uint8_t(K::Memcpy));
  e_.i32(m.rank);
  e_.i64(m.stream);
  e_.i64(m.start);
  e_.i64(m.end);
  e_.u8(uint8_t(m.kind));
  e_.i64(m.bytes);
  e_.u32(m.name);
  e_.i64(m.correlation);
  ++items_;
}

void RecordEncoder::add(const ApiCall& a) {
  e_.u8(uint8_t(K::ApiCall));
  e_.i32(a.rank);
  e_.i64(a.tid);
  e_.i64(a.start);
  e_.i64(a.end);
  e_.u32(a.name);
  e_.u8(uint8_t(a.kind));
  e_.i64(a.correlation);
  e_.i64(a.external_id);
  ++items_;
}

void RecordEncoder::add(const Range& r) {
  e_.u8(uint8_t(K::Range));
  e_.i32(r.rank);
  e_.i64(r.stream);
  e_.u8(r.on_gpu ? 1 : 0);
  e_.i64(r.start);
  e_.i64(r.end);
  e_.u32(r.name);
  e_.u32(r.domain);
  e_.u32(r.payload);
  ++items_;
}

void RecordEncoder::add(const Collective& c) {
  e_.u8(uint8_t(K::Collective));
  e_.i32(c.rank);
  e_.u32(c.comm);
  e_.i64(c.seq);
  e_.u8(uint8_t(c.op));
  e_.u32(c.dtype);
  e_.i64(c.in_count);
  e_.i64(c.out_count);
  e_.i64(c.bytes);
  e_.i32(c.peer_or_root);
  e_.i64(c.stream);
  e_.i64(c.start);
  e_.i64(c.end);
  e_.i64(c.enqueue);
  e_.u32(c.algo);
  e_.u32(c.proto);
  e_.i32(c.channels);
  e_.i32(c.group_size);
  e_.u32(c.name);
  e_.i64(c.kernel_ref);
  ++items_;
}

void RecordEncoder::add(const CaptureWindow& w) {
  e_.u8(uint8_t(K::Window));
  e_.i32(w.rank);
  e_.i64(w.start);
  e_.i64(w.end);
  ++items_;
}

void RecordEncoder::replace_window(Ns old_start, const CaptureWindow& w) {
  e_.u8(uint8_t(K::WindowMoved));
  e_.i32(w.rank);
  e_.i64(old_start);
  e_.i64(w.start);
  e_.i64(w.end);
  ++items_;
}

void RecordEncoder::add(const Step& s) {
  e_.u8(uint8_t(K::Step));
  e_.i32(s.rank);
  e_.i64(s.step);
  e_.i64(s.start);
  e_.i64(s.end);
  ++items_;
}

void RecordEncoder::add(const capture::NcclCallRow& c) {
  e_.u8(uint8_t(K::NcclCall));
  e_.i32(c.rank);
  e_.u32(c.comm);
  e_.i64(c.seq);
  e_.i64(c.call_id);
  e_.i64(c.group_id);
  e_.u8(uint8_t(c.op));
  e_.u32(c.redop);
  e_.u64(c.sendbuff);
  e_.u64(c.recvbuff);
  e_.i64(c.count);
  e_.u32(c.dtype);
  e_.i32(c.peer_or_root);
  e_.u64(c.stream_handle);
  e_.i64(c.tid);
  e_.i64(c.enqueue);
  e_.i64(c.ret);
  e_.i32(c.result);
  e_.i32(c.comm_rank);
  e_.i32(c.comm_size);
  ++items_;
}

void RecordEncoder::add(const capture::ProxyOpRow& p) {
  e_.u8(uint8_t(K::ProxyOp));
  e_.i32(p.rank);
  e_.u32(p.comm);
  e_.i64(p.seq);
  e_.i64(p.call_id);
  e_.i32(p.channel);
  e_.i32(p.peer);
  e_.u8(p.is_send ? 1 : 0);
  e_.i32(p.steps);
  e_.i32(p.chunk_size);
  e_.i64(p.tid);
  e_.i64(p.start);
  e_.i64(p.end);
  ++items_;
}

void RecordEncoder::rank_info(const RankInfo& r) {
  e_.u8(uint8_t(K::RankInfo));
  e_.i32(r.rank);
  e_.i32(r.world_size);
  e_.str(r.host);
  e_.i64(r.pid);
  e_.i32(r.device);
  e_.str(r.device_name);
  e_.str(r.backend);
  e_.str(r.nccl_version);
  e_.str(r.source);
  e_.i64(r.clock_offset);
  e_.i64(r.offset_error);
  ++items_;
}

void RecordEncoder::stream(const StreamInfo& s) {
  e_.u8(uint8_t(K::Stream));
  e_.i32(s.rank);
  e_.i64(s.stream);
  e_.u8(s.gpu ? 1 : 0);
  e_.str(s.label);
  ++items_;
}

void RecordEncoder::communicator(const Communicator& c) {
  e_.u8(uint8_t(K::Communicator));
  e_.str(c.comm);
  e_.i32(c.nranks);
  e_.str(c.ranks);
  e_.str(c.label);
  e_.str(c.backend);
  ++items_;
}

void RecordEncoder::diagnostic(const Diagnostic& d) {
  e_.u8(uint8_t(K::Diagnostic));
  e_.i32(d.rank);
  e_.u8(uint8_t(d.severity));
  e_.str(d.code);
  e_.i64(d.count);
  e_.str(d.detail);
  ++items_;
}

void RecordEncoder::meta(std::string_view key, std::string_view value) {
  e_.u8(uint8_t(K::Meta));
  e_.str(key);
  e_.str(value);
  ++items_;
}

void RecordEncoder::renumber(int32_t from, int32_t to) {
  e_.u8(uint8_t(K::Renumber));
  e_.i32(from);
  e_.i32(to);
  ++items_;
}

std::string RecordEncoder::take_frame(uint64_t capture_id) {
  Encoder head;
  head.u64(capture_id);
  std::string payload = head.bytes() + e_.bytes();
  e_.clear();
  items_ = 0;
  return frame(MsgType::Records, payload);
}

uint64_t records_capture_id(std::string_view payload) {
  Decoder d(payload);
  return d.u64();
}

namespace {

template <typename E>
E checked_enum(uint8_t v, uint8_t max, const char* what) {
  if (v > max) throw ProtocolError(std::string("invalid ") + what + " " + std::to_string(v));
  return static_cast<E>(v);
}

Category category(uint8_t v) {
  if (v <= 4 || (v >= 10 && v <= 17)) return static_cast<Category>(v);
  throw ProtocolError("invalid kernel category " + std::to_string(v));
}

class Strings {
 public:
  explicit Strings(std::unordered_map<StrId, StrId>& m) : m_(m) {}
  StrId map(StrId agent_id) const {
    if (agent_id == 0) return 0;
    auto it = m_.find(agent_id);
    if (it == m_.end())
      throw ProtocolError("string id " + std::to_string(agent_id) + " used before it was sent");
    return it->second;
  }

 private:
  std::unordered_map<StrId, StrId>& m_;
};

}  // namespace

// Why one function of ~230 lines (docs/architecture.md, "Long functions"): it is the decoder's
// one switch over the record kinds, each case reading its record's fields in the order
// RecordEncoder::add (above) writes them, so the two read side by side; a case is a few lines, and
// every case shares the decoder, the string map and the rank renumbering.
int64_t apply_records(std::string_view payload, capture::Sink& sink,
                      std::unordered_map<StrId, StrId>& strings, SenderRank& sender) {
  Decoder d(payload);
  d.u64();  // capture id
  Strings s(strings);
  int64_t rows = 0;
  while (!d.done()) {
    uint8_t kind = d.u8();
    switch (static_cast<K>(kind)) {
      case K::String: {
        StrId id = d.u32();
        std::string text = d.str();
        if (id == 0) throw ProtocolError("string id 0 is reserved");
        strings[id] = sink.intern(text);
        break;
      }
      case K::Kernel: {
        Kernel k;
        k.rank = sender.own(d.i32());
        k.stream = d.i64();
        k.start = d.i64();
        k.end = d.i64();
        k.name = s.map(d.u32());
        k.category = category(d.u8());
        k.correlation = d.i64();
        k.external_id = d.i64();
        sink.add(k);
        ++rows;
        break;
      }
      case K::Memcpy: {
        Memcpy m;
        m.rank = sender.own(d.i32());
        m.stream = d.i64();
        m.start = d.i64();
        m.end = d.i64();
        m.kind = checked_enum<MemKind>(d.u8(), uint8_t(MemKind::Unknown), "memcpy kind");
        m.bytes = d.i64();
        m.name = s.map(d.u32());
        m.correlation = d.i64();
        sink.add(m);
        ++rows;
        break;
      }
      case K::ApiCall: {
        ApiCall a;
        a.rank = sender.own(d.i32());
        a.tid = d.i64();
        a.start = d.i64();
        a.end = d.i64();
        a.name = s.map(d.u32());
        a.kind = checked_enum<ApiKind>(d.u8(), uint8_t(ApiKind::Other), "api kind");
        a.correlation = d.i64();
        a.external_id = d.i64();
        sink.add(a);
        ++rows;
        break;
      }
      case K::Range: {
        Range r;
        r.rank = sender.own(d.i32());
        r.stream = d.i64();
        r.on_gpu = d.u8() != 0;
        r.start = d.i64();
        r.end = d.i64();
        r.name = s.map(d.u32());
        r.domain = s.map(d.u32());
        r.payload = s.map(d.u32());
        sink.add(r);
        ++rows;
        break;
      }
      case K::Collective: {
        Collective c;
        c.rank = sender.own(d.i32());
        c.comm = s.map(d.u32());
        c.seq = d.i64();
        c.op = checked_enum<CollOp>(d.u8(), kNumCollOps - 1, "collective op");
        c.dtype = s.map(d.u32());
        c.in_count = d.i64();
        c.out_count = d.i64();
        c.bytes = d.i64();
        c.peer_or_root = d.i32();
        c.stream = d.i64();
        c.start = d.i64();
        c.end = d.i64();
        c.enqueue = d.i64();
        c.algo = s.map(d.u32());
        c.proto = s.map(d.u32());
        c.channels = d.i32();
        c.group_size = d.i32();
        c.name = s.map(d.u32());
        c.kernel_ref = d.i64();
        sink.add(c);
        ++rows;
        break;
      }
      case K::Step: {
        Step st;
        st.rank = sender.own(d.i32());
        st.step = d.i64();
        st.start = d.i64();
        st.end = d.i64();
        sink.add(st);
        ++rows;
        break;
      }
      case K::NcclCall: {
        capture::NcclCallRow c;
        c.rank = sender.own(d.i32());
        c.comm = s.map(d.u32());
        c.seq = d.i64();
        c.call_id = d.i64();
        c.group_id = d.i64();
        c.op = checked_enum<CollOp>(d.u8(), kNumCollOps - 1, "collective op");
        c.redop = s.map(d.u32());
        c.sendbuff = d.u64();
        c.recvbuff = d.u64();
        c.count = d.i64();
        c.dtype = s.map(d.u32());
        c.peer_or_root = d.i32();
        c.stream_handle = d.u64();
        c.tid = d.i64();
        c.enqueue = d.i64();
        c.ret = d.i64();
        c.result = d.i32();
        c.comm_rank = d.i32();
        c.comm_size = d.i32();
        sink.add(c);
        ++rows;
        break;
      }
      case K::ProxyOp: {
        capture::ProxyOpRow p;
        p.rank = sender.own(d.i32());
        p.comm = s.map(d.u32());
        p.seq = d.i64();
        p.call_id = d.i64();
        p.channel = d.i32();
        p.peer = d.i32();
        p.is_send = d.u8() != 0;
        p.steps = d.i32();
        p.chunk_size = d.i32();
        p.tid = d.i64();
        p.start = d.i64();
        p.end = d.i64();
        sink.add(p);
        ++rows;
        break;
      }
      case K::RankInfo: {
        RankInfo r;
        r.rank = sender.own(d.i32());
        r.world_size = d.i32();
        r.host = d.str();
        r.pid = d.i64();
        r.device = d.i32();
        r.device_name = d.str();
        r.backend = d.str();
        r.nccl_version = d.str();
        r.source = d.str();
        r.clock_offset = d.i64();
        r.offset_error = d.i64();
        sink.set_rank_info(r);
        break;
      }
      case K::Stream: {
        StreamInfo si;
        si.rank = sender.own(d.i32());
        si.stream = d.i64();
        si.gpu = d.u8() != 0;
        si.label = d.str();
        sink.add_stream(si);
        break;
      }
      case K::Communicator: {
        Communicator c;
        c.comm = d.str();
        c.nranks = d.i32();
        c.ranks = d.str();
        c.label = d.str();
        c.backend = d.str();
        sink.add_communicator(c);
        break;
      }
      case K::Diagnostic: {
        Diagnostic g;
        g.rank = sender.own(d.i32());
        g.severity = checked_enum<Severity>(d.u8(), uint8_t(Severity::Error), "severity");
        g.code = d.str();
        g.count = d.i64();
        g.detail = d.str();
        sink.set_diagnostic(g);
        break;
      }
      case K::Meta: {
        std::string k = d.str();
        std::string v = d.str();
        sink.set_meta(k, v);
        break;
      }
      case K::Window: {
        CaptureWindow w;
        w.rank = sender.own(d.i32());
        w.start = d.i64();
        w.end = d.i64();
        sink.add(w);
        break;
      }
      case K::WindowMoved: {
        CaptureWindow w;
        w.rank = sender.own(d.i32());
        const Ns old_start = d.i64();
        w.start = d.i64();
        w.end = d.i64();
        sink.replace_window(old_start, w);
        break;
      }
      case K::Renumber: {
        int32_t from = d.i32();
        int32_t to = d.i32();
        if (to < 0) throw ProtocolError("renumber to a negative rank " + std::to_string(to));
        // Scoped to the sender: only its rows move (the daemon's file holds other processes).
        if (sender.renumber) sender.renumber(from, to);
        break;
      }
      default:
        throw ProtocolError("unknown record kind " + std::to_string(kind));
    }
  }
  return rows;
}

}  // namespace braid::daemon

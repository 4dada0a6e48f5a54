// braid-schedule/1: the deterministic writer and the strict parser (simdjson DOM). The parser
// rejects unknown and duplicate keys, so a typo in a hand-written schedule is an error with the
// JSON path of the key rather than a silently ignored field.
#include <simdjson.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>

#include "fusion/ir.h"
#include "trace/error.h"
#include "trace/import/input.h"

namespace braid::fusion {

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

void put_string(std::string& o, std::string_view s) {
  o += '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      case '\b': o += "\\b"; break;
      case '\f': o += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += ch;
        }
    }
  }
  o += '"';
}

void key(std::string& o, std::string_view k) {
  put_string(o, k);
  o += ": ";
}

void put_slice(std::string& o, const Slice& s) {
  o += "{\"buffer\": ";
  put_string(o, s.buffer);
  o += ", \"offset\": " + std::to_string(s.offset) + ", \"count\": " + std::to_string(s.count) +
       "}";
}

void put_slices(std::string& o, const std::vector<Slice>& v) {
  o += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ", ";
    put_slice(o, v[i]);
  }
  o += ']';
}

void put_chunks(std::string& o, const std::vector<PeerChunk>& v) {
  o += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ", ";
    o += "{\"peer\": " + std::to_string(v[i].peer) + ", \"offset\": " +
         std::to_string(v[i].offset) + ", \"count\": " + std::to_string(v[i].count) + "}";
  }
  o += ']';
}

// One op on one line, keys in a fixed order per kind.
void put_op(std::string& o, const Op& op) {
  o += "{\"id\": " + std::to_string(op.id) + ", \"kind\": \"" +
       std::string(to_string(op.kind())) + "\"";
  if (const Compute* c = op.compute()) {
    o += ", \"label\": ";
    put_string(o, c->label);
    o += ", \"duration_ns\": " + std::to_string(c->duration_ns) + ", \"reads\": ";
    put_slices(o, c->reads);
    o += ", \"writes\": ";
    put_slices(o, c->writes);
    o += c->opaque ? ", \"opaque\": true" : ", \"opaque\": false";
    if (!c->replicated.empty()) {
      o += ", \"replicated\": ";
      put_string(o, c->replicated);
    }
    auto ints = [&o](const char* key, const std::vector<int64_t>& v) {
      if (v.empty()) return;
      o += std::string(", \"") + key + "\": [";
      for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + std::to_string(v[i]);
      o += ']';
    };
    ints("read_rows", c->read_rows);
    ints("write_rows", c->write_rows);
    ints("transpose", c->transpose);
    ints("transposed_reads", c->transposed_reads);
    if (c->sum_rows) o += ", \"sum_rows\": true";
    if (!c->fn.empty()) {
      o += ", \"fn\": ";
      put_string(o, c->fn);
    }
  } else if (const Collective* c = op.collective()) {
    o += ", \"op\": ";
    put_string(o, to_string(c->op));
    o += ", \"comm\": ";
    put_string(o, c->comm);
    o += ", \"dtype\": ";
    put_string(o, c->dtype);
    o += ", \"count\": " + std::to_string(c->count);
    if (c->root != -1) o += ", \"root\": " + std::to_string(c->root);
    if (c->peer != -1) o += ", \"peer\": " + std::to_string(c->peer);
    if (!c->in.empty()) {
      o += ", \"in\": ";
      put_slice(o, c->in);
    }
    if (!c->out.empty()) {
      o += ", \"out\": ";
      put_slice(o, c->out);
    }
    if (!c->sends.empty()) {
      o += ", \"sends\": ";
      put_chunks(o, c->sends);
    }
    if (!c->recvs.empty()) {
      o += ", \"recvs\": ";
      put_chunks(o, c->recvs);
    }
    o += ", \"label\": ";
    put_string(o, c->label);
  } else if (const Delay* d = op.delay()) {
    o += ", \"duration_ns\": " + std::to_string(d->duration_ns);
  } else if (const Record* r = op.record()) {
    o += ", \"event\": ";
    put_string(o, r->event);
  } else if (const Wait* w = op.wait()) {
    o += ", \"event\": ";
    put_string(o, w->event);
  }
  if (!op.replaces.empty()) {
    o += ", \"replaces\": [";
    for (size_t i = 0; i < op.replaces.size(); ++i) {
      if (i) o += ", ";
      o += std::to_string(op.replaces[i]);
    }
    o += ']';
  }
  o += '}';
}

// A multi-line array: `items` is called per element and writes it after the indentation.
template <typename T, typename F>
void put_lines(std::string& o, const std::vector<T>& v, int indent, F item) {
  if (v.empty()) {
    o += "[]";
    return;
  }
  o += "[\n";
  for (size_t i = 0; i < v.size(); ++i) {
    o.append(indent + 2, ' ');
    item(v[i]);
    o += i + 1 < v.size() ? ",\n" : "\n";
  }
  o.append(indent, ' ');
  o += ']';
}

}  // namespace

std::string to_json(const Schedule& s) {
  std::string o;
  o += "{\n  ";
  key(o, "format");
  put_string(o, kScheduleFormat);
  o += ",\n  ";
  key(o, "name");
  put_string(o, s.name);
  o += ",\n  ";
  key(o, "provenance");
  put_lines(o, s.provenance, 2, [&](const std::string& p) { put_string(o, p); });
  o += ",\n  ";
  key(o, "communicators");
  put_lines(o, s.comms, 2, [&](const Comm& c) {
    o += "{\"id\": ";
    put_string(o, c.id);
    o += ", \"ranks\": [";
    for (size_t i = 0; i < c.ranks.size(); ++i) {
      if (i) o += ", ";
      o += std::to_string(c.ranks[i]);
    }
    o += "]}";
  });
  o += ",\n  ";
  key(o, "ranks");
  put_lines(o, s.ranks, 2, [&](const RankSchedule& r) {
    o += "{\n      \"rank\": " + std::to_string(r.rank) + ",\n      ";
    key(o, "buffers");
    put_lines(o, r.buffers, 6, [&](const Buffer& b) {
      o += "{\"name\": ";
      put_string(o, b.name);
      o += ", \"dtype\": ";
      put_string(o, b.dtype);
      o += ", \"size\": " + std::to_string(b.size);
      if (!b.replicated.empty()) {
        o += ", \"replicated\": ";
        put_string(o, b.replicated);
      }
      o += "}";
    });
    if (!r.outputs.empty()) {
      o += ",\n      ";
      key(o, "outputs");
      o += '[';
      for (size_t i = 0; i < r.outputs.size(); ++i) {
        if (i) o += ", ";
        put_string(o, r.outputs[i]);
      }
      o += ']';
    }
    o += ",\n      ";
    key(o, "streams");
    put_lines(o, r.streams, 6, [&](const Stream& st) {
      o += "{\n          ";
      key(o, "name");
      put_string(o, st.name);
      o += ",\n          ";
      key(o, "ops");
      put_lines(o, st.ops, 10, [&](const Op& op) { put_op(o, op); });
      o += "\n        }";
    });
    o += "\n    }";
  });
  o += "\n}\n";
  return o;
}

// ---------------------------------------------------------------------------------------------
// Parser

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(const std::string& path, const std::string& msg,
                         ErrorCode code = ErrorCode::BadFormat) const {
    throw Error(code, source_ + ": " + path + ": " + msg);
  }

  object obj(element e, const std::string& path) const {
    object o;
    if (e.get_object().get(o) != simdjson::SUCCESS) fail(path, "expected an object");
    return o;
  }
  array arr(element e, const std::string& path) const {
    array a;
    if (e.get_array().get(a) != simdjson::SUCCESS) fail(path, "expected an array");
    return a;
  }
  std::string str(element e, const std::string& path) const {
    std::string_view s;
    if (e.get_string().get(s) != simdjson::SUCCESS) fail(path, "expected a string");
    return std::string(s);
  }
  int64_t int64(element e, const std::string& path) const {
    int64_t v;
    if (e.get_int64().get(v) != simdjson::SUCCESS) fail(path, "expected an integer");
    return v;
  }
  int32_t int32(element e, const std::string& path) const {
    int64_t v = int64(e, path);
    if (v < INT32_MIN || v > INT32_MAX) fail(path, "integer out of range");
    return static_cast<int32_t>(v);
  }
  bool boolean(element e, const std::string& path) const {
    bool v;
    if (e.get_bool().get(v) != simdjson::SUCCESS) fail(path, "expected true or false");
    return v;
  }

  // Rejects keys outside `allowed` and duplicate keys.
  void keys(object o, const std::string& path, std::initializer_list<std::string_view> allowed) {
    std::vector<std::string_view> seen;
    for (auto field : o) {
      std::string_view k = field.key;
      bool ok = false;
      for (std::string_view a : allowed) ok = ok || a == k;
      if (!ok) fail(path, "unknown key \"" + std::string(k) + "\"");
      for (std::string_view s : seen)
        if (s == k) fail(path, "duplicate key \"" + std::string(k) + "\"");
      seen.push_back(k);
    }
  }

  std::optional<element> opt(object o, std::string_view k) const {
    element e;
    if (o.at_key(k).get(e) != simdjson::SUCCESS) return std::nullopt;
    return e;
  }
  element req(object o, std::string_view k, const std::string& path) const {
    auto e = opt(o, k);
    if (!e) fail(path, "missing field \"" + std::string(k) + "\"");
    return *e;
  }

  static std::string at(const std::string& path, std::string_view k) {
    return path + "." + std::string(k);
  }
  static std::string at(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

  Slice slice(element e, const std::string& path) {
    object o = obj(e, path);
    keys(o, path, {"buffer", "offset", "count"});
    Slice s;
    s.buffer = str(req(o, "buffer", path), at(path, "buffer"));
    if (s.buffer.empty()) fail(at(path, "buffer"), "empty buffer name");
    s.offset = int64(req(o, "offset", path), at(path, "offset"));
    s.count = int64(req(o, "count", path), at(path, "count"));
    return s;
  }

  std::vector<Slice> slices(element e, const std::string& path) {
    std::vector<Slice> v;
    size_t i = 0;
    for (element x : arr(e, path)) v.push_back(slice(x, at(path, i++)));
    return v;
  }

  std::vector<int64_t> int64s(element e, const std::string& path) {
    std::vector<int64_t> v;
    size_t i = 0;
    for (element x : arr(e, path)) v.push_back(int64(x, at(path, i++)));
    return v;
  }

  std::vector<PeerChunk> chunks(element e, const std::string& path) {
    std::vector<PeerChunk> v;
    size_t i = 0;
    for (element x : arr(e, path)) {
      std::string p = at(path, i++);
      object o = obj(x, p);
      keys(o, p, {"peer", "offset", "count"});
      PeerChunk c;
      c.peer = int32(req(o, "peer", p), at(p, "peer"));
      c.offset = int64(req(o, "offset", p), at(p, "offset"));
      c.count = int64(req(o, "count", p), at(p, "count"));
      v.push_back(c);
    }
    return v;
  }

  Op op(element e, const std::string& path) {
    object o = obj(e, path);
    Op op;
    op.id = int64(req(o, "id", path), at(path, "id"));
    std::string kind = str(req(o, "kind", path), at(path, "kind"));
    if (kind == "compute") {
      keys(o, path, {"id", "kind", "label", "duration_ns", "reads", "writes", "opaque", "replicated",
                     "read_rows", "write_rows", "transpose", "transposed_reads",
                     "sum_rows", "fn", "replaces"});
      Compute c;
      c.label = str(req(o, "label", path), at(path, "label"));
      c.duration_ns = int64(req(o, "duration_ns", path), at(path, "duration_ns"));
      c.reads = slices(req(o, "reads", path), at(path, "reads"));
      c.writes = slices(req(o, "writes", path), at(path, "writes"));
      c.opaque = boolean(req(o, "opaque", path), at(path, "opaque"));
      if (auto x = opt(o, "replicated")) c.replicated = str(*x, at(path, "replicated"));
      if (auto x = opt(o, "read_rows")) c.read_rows = int64s(*x, at(path, "read_rows"));
      if (auto x = opt(o, "write_rows")) c.write_rows = int64s(*x, at(path, "write_rows"));
      if (auto x = opt(o, "transpose")) c.transpose = int64s(*x, at(path, "transpose"));
      if (auto x = opt(o, "transposed_reads"))
        c.transposed_reads = int64s(*x, at(path, "transposed_reads"));
      if (auto x = opt(o, "sum_rows")) c.sum_rows = boolean(*x, at(path, "sum_rows"));
      if (auto x = opt(o, "fn")) {
        c.fn = str(*x, at(path, "fn"));
        if (c.fn != "add") fail(at(path, "fn"), "unknown compute fn \"" + c.fn + "\" (expected add)");
      }
      op.body = std::move(c);
    } else if (kind == "collective") {
      keys(o, path, {"id", "kind", "op", "comm", "dtype", "count", "root", "peer", "in", "out",
                     "sends", "recvs", "label", "replaces"});
      Collective c;
      std::string name = str(req(o, "op", path), at(path, "op"));
      auto cop = coll_op_from_string(name);
      bool supported = cop && (*cop == CollOp::AllReduce || *cop == CollOp::AllGather ||
                               *cop == CollOp::ReduceScatter || *cop == CollOp::Broadcast ||
                               *cop == CollOp::Reduce || *cop == CollOp::AllToAll ||
                               *cop == CollOp::Send || *cop == CollOp::Recv ||
                               *cop == CollOp::ManyToMany);
      if (!supported)
        fail(at(path, "op"), "unknown collective op \"" + name +
                                 "\" (expected allreduce, allgather, reducescatter, broadcast, "
                                 "reduce, alltoall, send, recv or manytomany)");
      c.op = *cop;
      c.comm = str(req(o, "comm", path), at(path, "comm"));
      c.dtype = str(req(o, "dtype", path), at(path, "dtype"));
      c.count = int64(req(o, "count", path), at(path, "count"));
      if (auto x = opt(o, "root")) c.root = int32(*x, at(path, "root"));
      if (auto x = opt(o, "peer")) c.peer = int32(*x, at(path, "peer"));
      if (auto x = opt(o, "in")) c.in = slice(*x, at(path, "in"));
      if (auto x = opt(o, "out")) c.out = slice(*x, at(path, "out"));
      if (auto x = opt(o, "sends")) c.sends = chunks(*x, at(path, "sends"));
      if (auto x = opt(o, "recvs")) c.recvs = chunks(*x, at(path, "recvs"));
      c.label = str(req(o, "label", path), at(path, "label"));
      op.body = std::move(c);
    } else if (kind == "delay") {
      keys(o, path, {"id", "kind", "duration_ns", "replaces"});
      op.body = Delay{int64(req(o, "duration_ns", path), at(path, "duration_ns"))};
    } else if (kind == "record") {
      keys(o, path, {"id", "kind", "event", "replaces"});
      op.body = Record{str(req(o, "event", path), at(path, "event"))};
    } else if (kind == "wait") {
      keys(o, path, {"id", "kind", "event", "replaces"});
      op.body = Wait{str(req(o, "event", path), at(path, "event"))};
    } else {
      fail(at(path, "kind"), "unknown op kind \"" + kind +
                                 "\" (expected compute, collective, delay, record or wait)");
    }
    if (auto x = opt(o, "replaces")) {
      size_t k = 0;
      for (element id : arr(*x, at(path, "replaces")))
        op.replaces.push_back(int64(id, at(at(path, "replaces"), k++)));
    }
    return op;
  }

  Schedule schedule(element root) {
    const std::string path = "$";
    object o = obj(root, path);
    auto fmt = opt(o, "format");
    if (!fmt)
      fail(path, "missing field \"format\" (expected \"" + std::string(kScheduleFormat) + "\")");
    std::string f = str(*fmt, "$.format");
    if (f != kScheduleFormat) {
      bool other_version = f.rfind("braid-schedule/", 0) == 0;
      fail("$.format",
           "unsupported format \"" + f + "\" (expected \"" + std::string(kScheduleFormat) + "\")",
           other_version ? ErrorCode::Unsupported : ErrorCode::BadFormat);
    }
    keys(o, path, {"format", "name", "provenance", "communicators", "ranks"});
    Schedule s;
    s.name = str(req(o, "name", path), "$.name");
    size_t i = 0;
    for (element e : arr(req(o, "provenance", path), "$.provenance"))
      s.provenance.push_back(str(e, at("$.provenance", i++)));
    i = 0;
    for (element e : arr(req(o, "communicators", path), "$.communicators")) {
      std::string p = at("$.communicators", i++);
      object co = obj(e, p);
      keys(co, p, {"id", "ranks"});
      Comm c;
      c.id = str(req(co, "id", p), at(p, "id"));
      size_t j = 0;
      for (element r : arr(req(co, "ranks", p), at(p, "ranks")))
        c.ranks.push_back(int32(r, at(at(p, "ranks"), j++)));
      s.comms.push_back(std::move(c));
    }
    i = 0;
    for (element e : arr(req(o, "ranks", path), "$.ranks")) {
      std::string p = at("$.ranks", i);
      object ro = obj(e, p);
      keys(ro, p, {"rank", "buffers", "outputs", "streams"});
      RankSchedule r;
      r.rank = int32(req(ro, "rank", p), at(p, "rank"));
      if (r.rank != static_cast<int32_t>(i))
        fail(at(p, "rank"), "rank " + std::to_string(r.rank) + " listed at position " +
                                std::to_string(i) + " (ranks must be listed as 0, 1, 2, ...)");
      size_t j = 0;
      for (element b : arr(req(ro, "buffers", p), at(p, "buffers"))) {
        std::string bp = at(at(p, "buffers"), j++);
        object bo = obj(b, bp);
        keys(bo, bp, {"name", "dtype", "size", "replicated"});
        Buffer buf;
        buf.name = str(req(bo, "name", bp), at(bp, "name"));
        buf.dtype = str(req(bo, "dtype", bp), at(bp, "dtype"));
        buf.size = int64(req(bo, "size", bp), at(bp, "size"));
        if (auto x = opt(bo, "replicated")) buf.replicated = str(*x, at(bp, "replicated"));
        r.buffers.push_back(std::move(buf));
      }
      if (auto x = opt(ro, "outputs")) {
        j = 0;
        for (element b : arr(*x, at(p, "outputs")))
          r.outputs.push_back(str(b, at(at(p, "outputs"), j++)));
      }
      j = 0;
      for (element st : arr(req(ro, "streams", p), at(p, "streams"))) {
        std::string sp = at(at(p, "streams"), j++);
        object so = obj(st, sp);
        keys(so, sp, {"name", "ops"});
        Stream stream;
        stream.name = str(req(so, "name", sp), at(sp, "name"));
        size_t k = 0;
        for (element x : arr(req(so, "ops", sp), at(sp, "ops")))
          stream.ops.push_back(op(x, at(at(sp, "ops"), k++)));
        r.streams.push_back(std::move(stream));
      }
      s.ranks.push_back(std::move(r));
      ++i;
    }
    return s;
  }

 private:
  std::string source_;
};

}  // namespace

Schedule parse_schedule(std::string_view json, std::string_view source) {
  Parser p(source);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  element root;
  auto err = parser.parse(padded).get(root);
  if (err != simdjson::SUCCESS)
    throw Error(ErrorCode::BadFormat, std::string(source) + ": not valid JSON (" +
                                          simdjson::error_message(err) + ")");
  return p.schedule(root);
}

Schedule load_schedule(const std::string& path) {
  return parse_schedule(read_whole_file(path), path);
}

void save_schedule(const Schedule& s, const std::string& path) {
  std::string text = to_json(s);
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(ErrorCode::Io, tmp + ": cannot open for writing");
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(ErrorCode::Io, tmp + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(ErrorCode::Io, path + ": cannot rename " + tmp + " into place");
  }
}

}  // namespace braid::fusion

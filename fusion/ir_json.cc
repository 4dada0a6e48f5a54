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
#include "trace/input.h"
#include "trace/json.h"

namespace braid::fusion {

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

void put_slice(json::Writer& w, const Slice& s) {
  w.begin_object().field("buffer", s.buffer).field("offset", s.offset).field("count", s.count);
  w.end_object();
}

void put_slices(json::Writer& w, std::string_view key, const std::vector<Slice>& v) {
  w.key(key).begin_array();
  for (const Slice& s : v) put_slice(w, s);
  w.end_array();
}

void put_chunks(json::Writer& w, std::string_view key, const std::vector<PeerChunk>& v) {
  w.key(key).begin_array();
  for (const PeerChunk& c : v)
    w.begin_object()
        .field("peer", c.peer)
        .field("offset", c.offset)
        .field("count", c.count)
        .end_object();
  w.end_array();
}

// One op on one line, keys in a fixed order per kind.
void put_op(json::Writer& w, const Op& op) {
  w.begin_object().field("id", op.id).field("kind", to_string(op.kind()));
  if (const Compute* c = op.compute()) {
    w.field("label", c->label).field("duration_ns", c->duration_ns);
    put_slices(w, "reads", c->reads);
    put_slices(w, "writes", c->writes);
    w.field("opaque", c->opaque);
    if (!c->replicated.empty()) w.field("replicated", c->replicated);
    auto ints = [&w](std::string_view key, const std::vector<int64_t>& v) {
      if (!v.empty()) w.array_of(key, v);
    };
    ints("read_rows", c->read_rows);
    ints("write_rows", c->write_rows);
    ints("transpose", c->transpose);
    ints("transposed_reads", c->transposed_reads);
    if (c->sum_rows) w.field("sum_rows", true);
    if (!c->fn.empty()) w.field("fn", c->fn);
  } else if (const Collective* c = op.collective()) {
    w.field("op", to_string(c->op)).field("comm", c->comm).field("dtype", c->dtype);
    w.field("count", c->count);
    if (c->root != -1) w.field("root", c->root);
    if (c->peer != -1) w.field("peer", c->peer);
    if (!c->in.empty()) put_slice(w.key("in"), c->in);
    if (!c->out.empty()) put_slice(w.key("out"), c->out);
    if (!c->sends.empty()) put_chunks(w, "sends", c->sends);
    if (!c->recvs.empty()) put_chunks(w, "recvs", c->recvs);
    w.field("label", c->label);
  } else if (const Delay* d = op.delay()) {
    w.field("duration_ns", d->duration_ns);
  } else if (const Record* r = op.record()) {
    w.field("event", r->event);
  } else if (const Wait* wt = op.wait()) {
    w.field("event", wt->event);
  }
  if (!op.replaces.empty()) w.array_of("replaces", op.replaces);
  w.end_object();
}

}  // namespace

// Top-level members, ranks, buffers, streams and ops one per line; each op, buffer and
// communicator on one line.
std::string to_json(const Schedule& s) {
  json::Writer w(json::Writer::Style::Spaced);
  constexpr bool kLines = true;
  w.begin_object(kLines).field("format", kScheduleFormat).field("name", s.name);
  w.key("provenance").begin_array(kLines);
  for (const std::string& p : s.provenance) w.value(p);
  w.end_array();
  if (s.lifted.run >= 0)
    w.key("lifted_from")
        .begin_object()
        .field("run", s.lifted.run)
        .field("step", s.lifted.step)
        .end_object();
  // Only a schedule with rank classes has it; its ranks are then the representatives.
  if (s.symmetry.on())
    w.key("symmetry")
        .begin_object()
        .field("world", static_cast<int64_t>(s.ranks.size()))
        .field("block", s.symmetry.block)
        .field("shift", s.symmetry.shift)
        .field("id_stride", s.symmetry.id_stride)
        .end_object();
  w.key("communicators").begin_array(kLines);
  for (const Comm& c : s.comms)
    w.begin_object().field("id", c.id).array_of("ranks", c.ranks).end_object();
  w.end_array().key("ranks").begin_array(kLines);
  for (const RankSchedule& r : s.ranks) {
    if (!s.symmetry.stored(r.rank)) continue;
    w.begin_object(kLines).field("rank", r.rank).key("buffers").begin_array(kLines);
    for (const Buffer& b : r.buffers) {
      w.begin_object().field("name", b.name).field("dtype", b.dtype).field("size", b.size);
      if (!b.replicated.empty()) w.field("replicated", b.replicated);
      w.end_object();
    }
    w.end_array();
    if (!r.outputs.empty()) w.array_of("outputs", r.outputs);
    w.key("streams").begin_array(kLines);
    for (const Stream& st : r.streams) {
      w.begin_object(kLines).field("name", st.name).key("ops").begin_array(kLines);
      for (const Op& op : st.ops) put_op(w, op);
      w.end_array().end_object();
    }
    w.end_array().end_object();
  }
  w.end_array().end_object();
  return w.take() + "\n";
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
    keys(o, path,
         {"format", "name", "provenance", "lifted_from", "symmetry", "communicators", "ranks"});
    Schedule s;
    s.name = str(req(o, "name", path), "$.name");
    size_t i = 0;
    for (element e : arr(req(o, "provenance", path), "$.provenance"))
      s.provenance.push_back(str(e, at("$.provenance", i++)));
    if (std::optional<element> l = opt(o, "lifted_from")) {
      object lo = obj(*l, "$.lifted_from");
      keys(lo, "$.lifted_from", {"run", "step"});
      s.lifted.run = int64(req(lo, "run", "$.lifted_from"), "$.lifted_from.run");
      s.lifted.step = int64(req(lo, "step", "$.lifted_from"), "$.lifted_from.step");
    }
    int64_t world = -1;
    if (std::optional<element> y = opt(o, "symmetry")) {
      const std::string yp = "$.symmetry";
      object yo = obj(*y, yp);
      keys(yo, yp, {"world", "block", "shift", "id_stride"});
      world = int64(req(yo, "world", yp), yp + ".world");
      s.symmetry.block = int32(req(yo, "block", yp), yp + ".block");
      s.symmetry.shift = int32(req(yo, "shift", yp), yp + ".shift");
      s.symmetry.id_stride = int64(req(yo, "id_stride", yp), yp + ".id_stride");
      if (s.symmetry.block <= 0 || s.symmetry.shift <= 0 || world <= 0 ||
          s.symmetry.block % s.symmetry.shift || world % s.symmetry.block)
        fail(yp, "world " + std::to_string(world) + ", block " + std::to_string(s.symmetry.block) +
                     " and shift " + std::to_string(s.symmetry.shift) +
                     " must be > 0 and divide each other");
    }
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
      // With rank classes the representatives are listed, each after the images before it.
      while (s.symmetry.on() && r.rank > static_cast<int32_t>(s.ranks.size()) &&
             !s.symmetry.stored(static_cast<int32_t>(s.ranks.size())))
        s.add_rank(static_cast<int32_t>(s.ranks.size()));
      if (r.rank != static_cast<int32_t>(s.ranks.size()) || !s.symmetry.stored(r.rank))
        fail(at(p, "rank"),
             "rank " + std::to_string(r.rank) + " listed at position " + std::to_string(i) +
                 (s.symmetry.on() ? " (the representatives must be listed in rank order)"
                                  : " (ranks must be listed as 0, 1, 2, ...)"));
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
    if (s.symmetry.on()) {
      if (static_cast<int64_t>(s.ranks.size()) > world)
        fail("$.ranks", "rank " + std::to_string(s.ranks.size() - 1) +
                            " is outside the symmetry's world of " + std::to_string(world));
      while (static_cast<int64_t>(s.ranks.size()) < world)
        s.add_rank(static_cast<int32_t>(s.ranks.size()));
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

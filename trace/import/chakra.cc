// Chakra execution traces (MLCommons): the protobuf ET (.et), the "workload_graph" JSON, and
// tar(.gz) archives of either. docs/import-chakra.md describes the mapping and its limits.
#include <archive.h>
#include <archive_entry.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <simdjson.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "chakra_et.pb.h"
#include "trace/categories.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/import/importer.h"
#include "trace/input.h"
#include "trace/time_range.h"

namespace braid {
namespace {

namespace et = braid::chakra_et;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CopyingInputStream;
using google::protobuf::io::CopyingInputStreamAdaptor;

// NodeType values of the upstream schema (et_def.proto).
constexpr int kCompNode = 4, kSendNode = 5, kRecvNode = 6, kCollNode = 7;
// One node is a few hundred bytes; a larger length prefix means a corrupt or foreign file.
constexpr uint32_t kMaxMessageBytes = 256u << 20;
constexpr uint64_t kMaxJsonBytes = uint64_t(4) << 30;
constexpr int64_t kProgressEvery = 4096;  // nodes between progress callbacks

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw Error(ErrorCode::BadFormat, where + ": " + what);
}

// CollectiveCommType of the upstream schema.
CollOp op_from_comm_type(int64_t t) {
  switch (t) {
    case 0:
      return CollOp::AllReduce;
    case 1:
      return CollOp::Reduce;
    case 2:
      return CollOp::AllGather;
    case 3:
      return CollOp::Gather;
    case 4:
      return CollOp::Scatter;
    case 5:
      return CollOp::Broadcast;
    case 6:
      return CollOp::AllToAll;
    case 7:  // REDUCE_SCATTER
    case 8:  // REDUCE_SCATTER_BLOCK
      return CollOp::ReduceScatter;
    case 9:
      return CollOp::Barrier;
    default:
      return CollOp::Unknown;
  }
}

// µs -> ns in exact integer arithmetic; a value that does not fit is bad input, not a wrap.
Ns micros_to_ns(uint64_t us, const std::string& where, uint64_t id) {
  if (us > static_cast<uint64_t>(kMaxTimeNs / 1000))
    bad(where, "node " + std::to_string(id) + ": time " + std::to_string(us) +
                   " us is out of range (after 2100)");
  return static_cast<Ns>(us) * 1000;
}

// One node, from either encoding. Views point into the parser's buffers.
struct NodeView {
  uint64_t id = 0;
  std::string_view name;
  int64_t type = 0;
  std::optional<bool> is_cpu;
  std::optional<Ns> start, duration;
  std::optional<int64_t> comm_type, comm_size, stream, tid, comm_src, comm_dst;
  std::string comm;  // process group name, "" if none
  const uint64_t* deps = nullptr;
  size_t ndeps = 0;
};

// Builds the records of one rank (one .et/.json file or archive member).
class RankImport {
 public:
  RankImport(ImportContext& ctx, int32_t rank, std::string source) : ctx_(ctx) {
    ctx.claim_rank(rank, source);  // refuses a rank another file of this run already holds
    info_.rank = rank;
    info_.source = std::move(source);
  }
  void set_pid(int64_t pid) { info_.pid = pid; }
  void set_world_size(int64_t n) {
    if (n > 0 && n <= INT32_MAX) info_.world_size = static_cast<int32_t>(n);
  }
  int64_t nodes() const { return nodes_; }

  void add(const NodeView& n, const std::string& where) {
    ++nodes_;
    ++ctx_.stats.events;
    bool comm = n.type == kCollNode || n.type == kSendNode || n.type == kRecvNode;
    if (!comm && n.type != kCompNode) {
      ++other_skipped_;
      return;
    }
    // Host-side ops (c10d::*, aten::*) are skipped: each GPU collective already has its own
    // node, so keeping the CPU launchers would count one collective two or three times.
    if (n.is_cpu.value_or(false)) {
      ++cpu_skipped_;
      return;
    }
    int64_t stream = n.stream ? *n.stream : n.tid ? *n.tid : 0;
    if (!comm) {
      if (!n.duration) {
        ++no_duration_;
        return;
      }
      Kernel k;
      k.rank = info_.rank;
      k.stream = stream;
      place(n, stream, *n.duration, where, k.start, k.end);
      k.name = ctx_.writer.intern(n.name);
      k.category = classify_kernel(n.name);
      k.correlation = static_cast<int64_t>(n.id);
      ctx_.writer.add(ctx_.run, k);
      streams_.insert(stream);
      return;
    }

    Collective c;
    c.rank = info_.rank;
    auto kname = parse_nccl_kernel_name(n.name);
    // The node type decides for point-to-point: some writers put a node type into comm_type.
    if (n.type == kSendNode) {
      c.op = CollOp::Send;
      if (n.comm_dst) c.peer_or_root = static_cast<int32_t>(*n.comm_dst);
    } else if (n.type == kRecvNode) {
      c.op = CollOp::Recv;
      if (n.comm_src) c.peer_or_root = static_cast<int32_t>(*n.comm_src);
    } else if (n.comm_type) {
      c.op = op_from_comm_type(*n.comm_type);
    }
    if (c.op == CollOp::Unknown) c.op = kname ? kname->op : coll_op_from_framework_name(n.name);
    if (c.op == CollOp::Unknown) ++unknown_op_;
    if (kname) {
      if (!kname->dtype.empty()) c.dtype = ctx_.writer.intern(kname->dtype);
      if (!kname->algo.empty()) c.algo = ctx_.writer.intern(kname->algo);
      if (!kname->proto.empty()) c.proto = ctx_.writer.intern(kname->proto);
    }
    if (n.name.rfind("nccl", 0) == 0) info_.backend = "nccl";
    c.bytes = n.comm_size && *n.comm_size >= 0 ? *n.comm_size : -1;
    c.stream = stream;
    c.name = ctx_.writer.intern(n.name);
    c.comm = ctx_.writer.intern(n.comm.empty() ? std::string_view("default") : n.comm);
    comms_.insert(n.comm.empty() ? "default" : n.comm);
    place(n, stream, n.duration.value_or(0), where, c.start, c.end);
    if (n.duration) {
      // The communication kernel itself, so stream timelines show it beside compute.
      Kernel k;
      k.rank = info_.rank;
      k.stream = stream;
      k.start = c.start;
      k.end = c.end;
      k.name = c.name;
      k.category = c.op != CollOp::Unknown ? comm_category(c.op) : classify_kernel(n.name);
      k.correlation = static_cast<int64_t>(n.id);
      ctx_.writer.add(ctx_.run, k);
      c.kernel_ref = k.correlation;
    }
    colls_.push_back(c);
    streams_.insert(stream);
  }

  // Writes the collectives (numbered per communicator) and the small tables.
  void finish() {
    // seq = order within the communicator: by start time, ties in node order (stable sort).
    std::stable_sort(colls_.begin(), colls_.end(),
                     [](const Collective& a, const Collective& b) { return a.start < b.start; });
    std::unordered_map<StrId, int64_t> next;
    for (auto& c : colls_) {
      c.seq = next[c.comm]++;
      ctx_.writer.add(ctx_.run, c);
    }
    ctx_.writer.add_rank(ctx_.run, info_);
    for (int64_t s : streams_)
      ctx_.writer.add_stream(ctx_.run, {info_.rank, s, true, "stream " + std::to_string(s)});
    for (const auto& name : comms_) {
      Communicator c;
      c.comm = name;
      c.label = name;
      c.backend = info_.backend;
      ctx_.writer.add_communicator(ctx_.run, c);
    }
    ctx_.diagnose(diag::Code::chakra_cpu_nodes_skipped, cpu_skipped_,
                  "host-side (is_cpu_op) nodes are not imported", info_.rank);
    ctx_.diagnose(diag::Code::chakra_kernels_without_duration, no_duration_,
                  "GPU compute nodes without a duration are not imported", info_.rank);
    ctx_.diagnose(diag::Code::chakra_other_nodes_skipped, other_skipped_,
                  "metadata, memory and other non-compute, non-communication nodes", info_.rank);
    ctx_.diagnose(diag::Code::chakra_unknown_comm_op, unknown_op_,
                  "communication nodes whose operation neither comm_type nor the name tells",
                  info_.rank);
  }

 private:
  // A node's recorded start, or else a synthetic one: after the previous node on its stream
  // and after the imported nodes it depends on (data_deps).
  void place(const NodeView& n, int64_t stream, Ns dur, const std::string& where, Ns& start,
             Ns& end) {
    Ns& cursor = cursor_[stream];
    if (n.start) {
      start = *n.start;
    } else {
      start = cursor;
      for (size_t i = 0; i < n.ndeps; ++i)
        if (auto it = end_of_.find(n.deps[i]); it != end_of_.end())
          start = std::max(start, it->second);
    }
    auto e = checked_add(start, dur);
    if (!e || !valid_span(start, *e))
      bad(where, "node " + std::to_string(n.id) + ": end time is after 2100 (not a time)");
    end = *e;
    cursor = std::max(cursor, end);
    end_of_[n.id] = end;
  }

  ImportContext& ctx_;
  RankInfo info_;
  int64_t nodes_ = 0;
  std::map<int64_t, Ns> cursor_;             // per stream: end of the last placed node
  std::unordered_map<uint64_t, Ns> end_of_;  // end of each placed node, for data deps
  std::vector<Collective> colls_;
  std::set<int64_t> streams_;
  std::set<std::string> comms_;
  int64_t cpu_skipped_ = 0, no_duration_ = 0, other_skipped_ = 0, unknown_op_ = 0;
};

// ---- protobuf ET ----------------------------------------------------------------------------

// Feeds protobuf from a braid byte source. An exception from the source is kept and rethrown
// once protobuf has returned, so none unwinds through protobuf's frames.
class SourceStream : public CopyingInputStream {
 public:
  explicit SourceStream(std::function<size_t(char*, size_t)> read) : read_(std::move(read)) {}
  int Read(void* buf, int size) override {
    try {
      return static_cast<int>(read_(static_cast<char*>(buf), static_cast<size_t>(size)));
    } catch (...) {
      error_ = std::current_exception();
      return -1;
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::function<size_t(char*, size_t)> read_;
  std::exception_ptr error_;
};

std::optional<int64_t> attr_int(const et::AttributeProto& a) {
  using A = et::AttributeProto;
  auto from_double = [](double d) -> std::optional<int64_t> {
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e18) return std::nullopt;
    return static_cast<int64_t>(d);
  };
  switch (a.value_case()) {
    case A::kInt32Val:
      return a.int32_val();
    case A::kInt64Val:
      return a.int64_val();
    case A::kUint32Val:
      return a.uint32_val();
    case A::kUint64Val:
      if (a.uint64_val() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(a.uint64_val());
    case A::kSint32Val:
      return a.sint32_val();
    case A::kSint64Val:
      return a.sint64_val();
    case A::kFixed32Val:
      return a.fixed32_val();
    case A::kFixed64Val:
      if (a.fixed64_val() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(a.fixed64_val());
    case A::kSfixed32Val:
      return a.sfixed32_val();
    case A::kSfixed64Val:
      return a.sfixed64_val();
    case A::kBoolVal:
      return a.bool_val() ? 1 : 0;
    case A::kDoubleVal:
      return from_double(a.double_val());
    case A::kFloatVal:
      return from_double(a.float_val());
    default:
      return std::nullopt;
  }
}

// A group name may be written as a string or as a number.
std::string attr_text(const et::AttributeProto& a) {
  if (a.value_case() == et::AttributeProto::kStringVal) return a.string_val();
  if (auto v = attr_int(a)) return std::to_string(*v);
  return "";
}

void view_node(const et::Node& n, const std::string& where, NodeView& v) {
  v = NodeView{};
  v.id = n.id();
  v.name = n.name();
  v.type = n.type();
  if (n.has_start_time_micros()) v.start = micros_to_ns(n.start_time_micros(), where, n.id());
  if (n.has_duration_micros()) v.duration = micros_to_ns(n.duration_micros(), where, n.id());
  v.deps = n.data_deps().data();
  v.ndeps = static_cast<size_t>(n.data_deps_size());
  std::string comm_group;
  for (const auto& a : n.attr()) {
    const std::string& k = a.name();
    if (k == "is_cpu_op") {
      if (auto x = attr_int(a)) v.is_cpu = *x != 0;
    } else if (k == "comm_type") {
      v.comm_type = attr_int(a);
    } else if (k == "comm_size") {
      v.comm_size = attr_int(a);
    } else if (k == "stream") {
      v.stream = attr_int(a);
    } else if (k == "tid") {
      v.tid = attr_int(a);
    } else if (k == "comm_src") {
      v.comm_src = attr_int(a);
    } else if (k == "comm_dst") {
      v.comm_dst = attr_int(a);
    } else if (k == "pg_name") {
      v.comm = attr_text(a);
    } else if (k == "comm_group") {
      comm_group = attr_text(a);
    }
  }
  if (v.comm.empty()) v.comm = std::move(comm_group);
}

// Reads the length-delimited stream: one GlobalMetadata, then Nodes. Returns bytes parsed.
uint64_t parse_et(SourceStream& src, const std::string& where, RankImport& rank,
                  const std::function<void()>& tick) {
  CopyingInputStreamAdaptor zin(&src);
  et::GlobalMetadata meta;
  et::Node node;
  NodeView view;
  uint64_t offset = 0;
  for (int64_t index = 0;; ++index) {
    // A fresh CodedInputStream per message keeps its 2 GiB total-bytes limit per message, so
    // files of any size parse; its destructor hands unread bytes back to `zin`.
    CodedInputStream in(&zin);
    const void* p;
    int avail;
    if (!in.GetDirectBufferPointer(&p, &avail)) {
      src.rethrow();
      if (index == 0) throw Error(ErrorCode::Empty, where + ": empty Chakra ET file");
      break;
    }
    const char* what = index == 0 ? "GlobalMetadata" : "node";
    std::string at = std::string(what) + " message " + std::to_string(index) + " at byte " +
                     std::to_string(offset);
    uint32_t len = 0;
    if (!in.ReadVarint32(&len)) {
      src.rethrow();
      bad(where, "truncated or corrupt Chakra ET: bad length prefix of " + at);
    }
    if (len > kMaxMessageBytes)
      bad(where,
          "not a Chakra ET, or corrupt: " + at + " claims " + std::to_string(len) + " bytes");
    int prefix = in.CurrentPosition();
    auto limit = in.PushLimit(static_cast<int>(len));
    bool ok = index == 0 ? meta.ParseFromCodedStream(&in) : node.ParseFromCodedStream(&in);
    if (!ok || in.BytesUntilLimit() > 0) {
      src.rethrow();
      if (!in.Skip(in.BytesUntilLimit()))
        bad(where,
            std::string(index == 0 ? "not a Chakra ET, or truncated: " : "truncated Chakra ET: ") +
                at + " needs " + std::to_string(len) + " bytes but the file ends first");
      bad(where, "not a Chakra ET, or corrupt: " + at + " does not parse as a Chakra " + what);
    }
    in.PopLimit(limit);
    offset += static_cast<uint64_t>(prefix) + len;
    if (index == 0) {
      for (const auto& a : meta.attr())
        if (a.name() == "pid")
          if (auto v = attr_int(a)) rank.set_pid(*v);
      continue;
    }
    view_node(node, where, view);
    rank.add(view, where);
    if (rank.nodes() % kProgressEvery == 0) tick();
  }
  return offset;
}

// ---- JSON -----------------------------------------------------------------------------------

// A time in µs written as an integer (exact) or a decimal number (rounded to the ns).
Ns json_micros(simdjson::dom::element e, const std::string& where, uint64_t id, const char* key) {
  uint64_t u;
  if (e.get_uint64().get(u) == simdjson::SUCCESS) return micros_to_ns(u, where, id);
  double d;
  if (e.get_double().get(d) != simdjson::SUCCESS || !std::isfinite(d) || d < 0 ||
      d > static_cast<double>(kMaxTimeNs / 1000))
    bad(where, "node " + std::to_string(id) + ": \"" + key + "\" is not a time in us");
  return static_cast<Ns>(std::llround(d * 1000.0));
}

std::optional<int64_t> json_int(simdjson::dom::object o, const char* key) {
  int64_t v;
  if (o[key].get_int64().get(v) == simdjson::SUCCESS) return v;
  return std::nullopt;
}

uint64_t parse_json(const std::string& text, const std::string& where, RankImport& rank,
                    const std::function<void()>& tick) {
  simdjson::dom::parser parser;
  simdjson::padded_string doc(text);
  simdjson::dom::element root;
  if (auto err = parser.parse(doc).get(root))
    bad(where, std::string("not valid JSON: ") + simdjson::error_message(err));
  simdjson::dom::object obj;
  if (root.get_object().get(obj)) bad(where, "not a Chakra JSON trace (expected an object)");
  simdjson::dom::array graph;
  if (obj["workload_graph"].get_array().get(graph)) {
    if (obj["nodes"].error() == simdjson::SUCCESS && obj["schema"].error() == simdjson::SUCCESS)
      throw Error(ErrorCode::Unsupported,
                  where +
                      ": a PyTorch host execution trace, not a Chakra trace; convert it "
                      "with chakra_trace_link and chakra_converter first");
    bad(where, "not a Chakra JSON trace (no \"workload_graph\" array)");
  }
  if (auto n = json_int(obj, "ngpus")) rank.set_world_size(*n);
  std::vector<uint64_t> deps;
  size_t index = 0;
  for (simdjson::dom::element e : graph) {
    std::string at = "workload_graph[" + std::to_string(index++) + "]";
    simdjson::dom::object o;
    if (e.get_object().get(o)) bad(where, at + " is not an object");
    NodeView v;
    if (o["Id"].get_uint64().get(v.id)) bad(where, at + " has no integer \"Id\"");
    if (o["NodeType"].get_int64().get(v.type)) bad(where, at + " has no integer \"NodeType\"");
    std::string_view name;
    if (o["Name"].get_string().get(name) == simdjson::SUCCESS) v.name = name;
    bool cpu;
    if (o["is_cpu_op"].get_bool().get(cpu) == simdjson::SUCCESS) v.is_cpu = cpu;
    simdjson::dom::element x;
    if (o["runtime"].get(x) == simdjson::SUCCESS)
      v.duration = json_micros(x, where, v.id, "runtime");
    if (o["start_time_micros"].get(x) == simdjson::SUCCESS)
      v.start = json_micros(x, where, v.id, "start_time_micros");
    v.comm_type = json_int(o, "comm_type");
    v.comm_size = json_int(o, "comm_size");
    v.stream = json_int(o, "stream");
    std::string_view pg;
    if (o["pg_name"].get_string().get(pg) == simdjson::SUCCESS) v.comm = std::string(pg);
    deps.clear();
    simdjson::dom::array arr;
    if (o["data_deps"].get_array().get(arr) == simdjson::SUCCESS)
      for (simdjson::dom::element d : arr) {
        uint64_t id;
        if (d.get_uint64().get(id) == simdjson::SUCCESS) deps.push_back(id);
      }
    v.deps = deps.data();
    v.ndeps = deps.size();
    rank.add(v, where);
    if (rank.nodes() % kProgressEvery == 0) tick();
  }
  return text.size();
}

// ---- files and archives ---------------------------------------------------------------------

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The rank in the names Chakra's tools write: "chakra.<rank>.et" / "chakra.<rank>.json"
// (optionally .gz). Only that exact base name counts: "small_chakra.0.json" names no rank.
std::optional<int32_t> rank_from_name(std::string_view path) {
  std::string base = lower(path.substr(path.find_last_of('/') + 1));
  std::string_view b = base;
  if (ends_with(b, ".gz")) b.remove_suffix(3);
  if (ends_with(b, ".et"))
    b.remove_suffix(3);
  else if (ends_with(b, ".json"))
    b.remove_suffix(5);
  else
    return std::nullopt;
  if (b.rfind("chakra.", 0) != 0) return std::nullopt;
  b.remove_prefix(7);
  if (b.empty() || b.size() > 9) return std::nullopt;
  int32_t r = 0;
  for (char c : b) {
    if (c < '0' || c > '9') return std::nullopt;
    r = r * 10 + (c - '0');
  }
  return r;
}

bool is_archive_name(const std::string& path) {
  std::string l = lower(path);
  for (const char* s :
       {".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst"})
    if (ends_with(l, s)) return true;
  return false;
}

enum class Kind { Et, Json, Archive };

// What a plain file holds, from its name, else its first bytes (through gzip).
Kind sniff(const std::string& file) {
  if (is_archive_name(file)) return Kind::Archive;
  const std::string text = read_head(file, 512);
  const char* head = text.data();
  const size_t n = text.size();
  if (n == 0) throw Error(ErrorCode::Empty, file + ": empty file");
  if (n >= 262 && std::memcmp(head + 257, "ustar", 5) == 0) return Kind::Archive;
  std::string l = lower(file);
  if (ends_with(l, ".et") || ends_with(l, ".et.gz")) return Kind::Et;
  if (ends_with(l, ".json") || ends_with(l, ".json.gz")) return Kind::Json;
  // No telling name: JSON by its first bytes, else a protobuf ET.
  return looks_like_json(std::string_view(head, n)) ? Kind::Json : Kind::Et;
}

class Archive {
 public:
  // The reader is owned from its creation on, so a constructor that throws (a file that does
  // not open as an archive) still frees it.
  explicit Archive(const std::string& file) : file_(file), owner_(archive_read_new()) {
    a_ = owner_.get();
    if (!a_) throw Error(ErrorCode::Internal, file + ": cannot allocate an archive reader");
    archive_read_support_filter_all(a_);
    archive_read_support_format_tar(a_);  // ustar, pax and GNU tar
    if (archive_read_open_filename(a_, file.c_str(), 1 << 16) != ARCHIVE_OK) fail("cannot open");
  }
  Archive(const Archive&) = delete;
  Archive& operator=(const Archive&) = delete;

  // Moves to the next member; false at the end of the archive.
  bool next(std::string& name, bool& regular) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(a_, &e);
    if (r == ARCHIVE_EOF) return false;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
      fail(last_.empty() ? "corrupt tar archive"
                         : ("corrupt tar archive after member " + last_).c_str());
    const char* p = archive_entry_pathname(e);
    name = last_ = p ? p : "";
    regular = archive_entry_filetype(e) == AE_IFREG;
    return true;
  }
  // Reads the current member's data; 0 at its end.
  size_t read(char* buf, size_t n, const std::string& where) {
    la_ssize_t got = archive_read_data(a_, buf, n);
    if (got < 0) {
      const char* msg = archive_error_string(a_);
      bad(where, std::string("cannot read archive member: ") + (msg ? msg : "unknown error"));
    }
    return static_cast<size_t>(got);
  }
  uint64_t consumed() const {
    int64_t b = archive_filter_bytes(a_, -1);
    return b > 0 ? static_cast<uint64_t>(b) : 0;
  }

 private:
  [[noreturn]] void fail(const char* what) {
    const char* msg = archive_error_string(a_);
    bad(file_, std::string(what) + (msg ? std::string(": ") + msg : std::string()));
  }
  std::string file_, last_;
  struct Free {
    void operator()(archive* a) const { archive_read_free(a); }
  };
  std::unique_ptr<archive, Free> owner_;
  archive* a_ = nullptr;
};

bool member_is_trace(const std::string& name) {
  std::string l = lower(name);
  return ends_with(l, ".et") || ends_with(l, ".json");
}

struct Member {
  std::string name;
  int32_t rank = 0;
};

void import_archive(ImportContext& ctx, const std::string& file, size_t index) {
  std::error_code ec;
  uint64_t total = std::filesystem::file_size(file, ec);
  if (ec) total = 0;
  // Pass 1: the trace members, their names in order and their ranks.
  std::vector<Member> members;
  {
    Archive ar(file);
    std::string name;
    bool regular;
    while (ar.next(name, regular))
      if (regular && member_is_trace(name)) members.push_back({name, 0});
  }
  if (members.empty())
    throw Error(ErrorCode::Empty, file + ": archive holds no Chakra .et or .json member");
  std::stable_sort(members.begin(), members.end(),
                   [](const Member& a, const Member& b) { return a.name < b.name; });
  std::map<int32_t, std::string> taken;
  for (auto& m : members)
    if (auto r = rank_from_name(m.name)) {
      auto [it, fresh] = taken.emplace(*r, m.name);
      if (!fresh)
        bad(file,
            "members " + it->second + " and " + m.name + " both hold rank " + std::to_string(*r));
      m.rank = *r;
    }
  // Members without a rank in their name take the free ranks from the file's default up.
  int32_t next_rank = ctx.default_rank(index);
  for (auto& m : members) {
    if (rank_from_name(m.name)) continue;
    while (taken.count(next_rank)) ++next_rank;
    m.rank = next_rank;
    taken.emplace(next_rank, m.name);
  }

  // Pass 2: import in name order. One pass when the archive is sorted; an unsorted archive
  // is reopened for the members it had passed.
  size_t done = 0;
  while (done < members.size()) {
    Archive ar(file);
    size_t before = done;
    std::string name;
    bool regular;
    while (done < members.size() && ar.next(name, regular)) {
      if (!regular || name != members[done].name) continue;
      const Member& m = members[done++];
      std::string where = file + ":" + m.name;
      RankImport rank(ctx, m.rank, where);
      auto tick = [&] {
        if (ctx.options.progress) ctx.options.progress(ar.consumed(), total);
      };
      if (ends_with(lower(m.name), ".et")) {
        SourceStream src([&](char* b, size_t n) { return ar.read(b, n, where); });
        ctx.stats.bytes += parse_et(src, where, rank, tick);
      } else {
        std::string text;
        char buf[1 << 16];
        for (size_t got; (got = ar.read(buf, sizeof buf, where)) > 0;) {
          text.append(buf, got);
          if (text.size() > kMaxJsonBytes)
            throw Error(ErrorCode::Unsupported, where + ": JSON member larger than 4 GiB");
        }
        ctx.stats.bytes += parse_json(text, where, rank, tick);
      }
      rank.finish();
      tick();
    }
    if (done == before)
      bad(file, "member " + members[done].name + " disappeared while reading the archive");
  }
}

}  // namespace

void import_chakra(ImportContext& ctx, const std::string& file, size_t index) {
  Kind kind = sniff(file);
  if (kind == Kind::Archive) return import_archive(ctx, file, index);
  int32_t r = rank_from_name(file).value_or(ctx.default_rank(index));
  RankImport rank(ctx, r, file);
  if (kind == Kind::Et) {
    InputFile in(file);
    auto tick = [&] {
      if (ctx.options.progress) ctx.options.progress(in.consumed(), in.file_size());
    };
    SourceStream src([&](char* b, size_t n) { return in.read(b, n); });
    ctx.stats.bytes += parse_et(src, file, rank, tick);
    rank.finish();
    tick();
  } else {
    std::string text = read_whole_file(file, kMaxJsonBytes);
    ctx.stats.bytes += parse_json(text, file, rank, [] {});
    rank.finish();
    std::error_code ec;
    uint64_t size = std::filesystem::file_size(file, ec);
    if (ctx.options.progress && !ec) ctx.options.progress(size, size);
  }
}

}  // namespace braid

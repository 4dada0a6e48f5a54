// Chakra importer tests: the two real Chakra archives of MANIFEST.md (protobuf ET and
// "workload_graph" JSON), synthetic ETs for what those lack, and bad input.
//
// Expected values come from MANIFEST.md and from an independent pass over the same bytes that
// does not share code with the importer: a tar reader and a raw protobuf-wire decoder below,
// and simdjson DOM for the JSON.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "trace/error.h"
#include "trace/import/importer.h"
#include "trace/input.h"
#include "trace/reader.h"
#include "trace/writer.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

const std::string kEtArchive =
    std::string(BRAID_TRACES_DIR) + "/chakra/tests/data/feeder_tests_trace.tar.gz";
const std::string kJsonArchive =
    std::string(BRAID_TRACES_DIR) + "/chakra/tests/data/json_trace.tar.gz";

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/braid-chakra-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
}

void write_gzip(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  gzwrite(f, data.data(), static_cast<unsigned>(data.size()));
  gzclose(f);
}

// ---- independent readers --------------------------------------------------------------------

// Regular members of an uncompressed tar: name -> contents (ustar prefix + name, octal size).
std::map<std::string, std::string> untar(const std::string& tar) {
  std::map<std::string, std::string> out;
  for (size_t at = 0; at + 512 <= tar.size();) {
    const char* h = tar.data() + at;
    if (h[0] == 0) break;
    std::string name(h, strnlen(h, 100));
    std::string prefix(h + 345, strnlen(h + 345, 155));
    if (std::memcmp(h + 257, "ustar", 5) == 0 && !prefix.empty()) name = prefix + "/" + name;
    size_t size = std::strtoull(std::string(h + 124, 12).c_str(), nullptr, 8);
    if (h[156] == '0' || h[156] == 0) out[name] = tar.substr(at + 512, size);
    at += 512 + (size + 511) / 512 * 512;
  }
  return out;
}

std::string member(const std::string& archive, const std::string& name) {
  auto m = untar(read_whole_file(archive));
  EXPECT_TRUE(m.count(name)) << name << " not in " << archive;
  return m[name];
}

// Raw protobuf wire: fields of one message.
struct Field {
  int num = 0, wire = 0;
  uint64_t v = 0;
  std::string_view bytes;
};
uint64_t get_varint(std::string_view s, size_t& i) {
  uint64_t r = 0;
  for (int shift = 0; i < s.size(); shift += 7) {
    unsigned char c = static_cast<unsigned char>(s[i++]);
    r |= uint64_t(c & 0x7f) << shift;
    if (c < 0x80) return r;
  }
  ADD_FAILURE() << "truncated varint";
  return r;
}
std::vector<Field> fields(std::string_view m) {
  std::vector<Field> out;
  for (size_t i = 0; i < m.size();) {
    Field f;
    uint64_t key = get_varint(m, i);
    f.num = static_cast<int>(key >> 3);
    f.wire = static_cast<int>(key & 7);
    if (f.wire == 0) {
      f.v = get_varint(m, i);
    } else if (f.wire == 2) {
      size_t n = get_varint(m, i);
      f.bytes = m.substr(i, n);
      i += n;
    } else if (f.wire == 1) {
      i += 8;
    } else if (f.wire == 5) {
      i += 4;
    } else {
      ADD_FAILURE() << "wire type " << f.wire;
      break;
    }
    out.push_back(f);
  }
  return out;
}

// What the ET says, counted by node type and attributes (et_def.proto field numbers).
struct EtNode {
  uint64_t id = 0, type = 0, duration = 0;
  bool has_duration = false, cpu = false;
  std::string name;
  std::map<std::string, uint64_t> ints;  // attributes with a varint value
};
struct EtFile {
  std::vector<size_t> offsets;  // where each message starts (length prefix)
  uint64_t pid = 0;
  std::vector<EtNode> nodes;
};
EtFile decode_et(const std::string& data) {
  EtFile f;
  for (size_t i = 0; i < data.size();) {
    f.offsets.push_back(i);
    size_t len = get_varint(data, i);
    std::string_view msg(data.data() + i, len);
    i += len;
    bool meta = f.offsets.size() == 1;
    EtNode n;
    for (const Field& x : fields(msg)) {
      if (meta || x.num == 10) {  // GlobalMetadata.attr is 2, Node.attr is 10
        if (meta && x.num != 2) continue;
        std::string name;
        std::optional<uint64_t> v;
        for (const Field& a : fields(x.bytes)) {
          if (a.num == 1) name = a.bytes;
          if (a.wire == 0) v = a.v;
        }
        if (meta && name == "pid" && v) f.pid = *v;
        if (!meta && v) n.ints[name] = *v;
      } else if (x.num == 1) {
        n.id = x.v;
      } else if (x.num == 2) {
        n.name = x.bytes;
      } else if (x.num == 3) {
        n.type = x.v;
      } else if (x.num == 7) {
        n.duration = x.v;
        n.has_duration = true;
      }
    }
    n.cpu = n.ints.count("is_cpu_op") && n.ints["is_cpu_op"] != 0;
    if (!meta) f.nodes.push_back(n);
  }
  return f;
}

// ---- import and read back ---------------------------------------------------------------------

struct Imported {
  ImportStats stats;
  std::vector<RankInfo> ranks;
  std::vector<StreamInfo> streams;
  std::vector<Communicator> comms;
  std::vector<Diagnostic> diags;
  std::vector<Collective> colls;  // in (rank, comm, seq) order
  std::vector<Kernel> kernels;
  std::unique_ptr<TraceReader> reader;

  const std::string& str(StrId id) const { return reader->str(id); }
  std::vector<Collective> on_rank(int32_t r) const {
    std::vector<Collective> out;
    for (const auto& c : colls)
      if (c.rank == r) out.push_back(c);
    return out;
  }
  int64_t diag(const std::string& code, int32_t rank = 0) const {
    for (const auto& d : diags)
      if (d.code == code && d.rank == rank) return d.count;
    return 0;
  }
};

Imported import_one(const TempDir& dir, const std::string& file,
                    TraceFormat fmt = TraceFormat::Chakra, std::vector<int32_t> ranks = {}) {
  std::string out = dir.file("out.braid");
  fs::remove(out);
  Imported r;
  int64_t run;
  {
    TraceWriter w(out, TraceWriter::Mode::Create);
    ImportOptions opts;
    opts.ranks = std::move(ranks);
    run = import_traces(w, {file}, fmt, opts, r.stats);
    w.commit();
  }
  r.reader = std::make_unique<TraceReader>(out);
  r.ranks = r.reader->ranks(run);
  r.streams = r.reader->streams(run);
  r.comms = r.reader->communicators(run);
  r.diags = r.reader->diagnostics(run);
  r.reader->collectives(run, [&](const Collective& c) {
    r.colls.push_back(c);
    return true;
  });
  r.reader->kernels(run, [&](const Kernel& k) {
    r.kernels.push_back(k);
    return true;
  });
  std::sort(r.colls.begin(), r.colls.end(), [&](const Collective& a, const Collective& b) {
    return std::tie(a.rank, a.comm, a.seq) < std::tie(b.rank, b.comm, b.seq);
  });
  return r;
}

// Expects `fn` to throw braid::Error with `code` and a message naming `file`.
template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::string& file, const std::string& words) {
  try {
    fn();
    ADD_FAILURE() << "no error for " << file;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

// ---- the real protobuf ET -------------------------------------------------------------------

// Checks an import of feeder_tests_trace's chakra.0.et against the independent decode.
void check_feeder(const Imported& r, const EtFile& et, int32_t rank, const std::string& source) {
  // Independent counts.
  int64_t coll_nodes = 0, cpu = 0, gpu_comp_with_dur = 0, gpu_comp_without = 0;
  std::vector<const EtNode*> gpu_comm;
  std::set<int64_t> gpu_tids;
  for (const auto& n : et.nodes) {
    if (n.type == 7) ++coll_nodes;
    if (n.cpu) {
      ++cpu;
      continue;
    }
    gpu_tids.insert(static_cast<int64_t>(n.ints.at("tid")));
    if (n.type == 7) gpu_comm.push_back(&n);
    if (n.type == 4) (n.has_duration ? gpu_comp_with_dur : gpu_comp_without)++;
  }
  ASSERT_EQ(coll_nodes, 21);  // MANIFEST.md
  ASSERT_EQ(gpu_comm.size(), 7u);

  EXPECT_EQ(r.stats.events, static_cast<int64_t>(et.nodes.size()));
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].rank, rank);
  EXPECT_EQ(r.ranks[0].pid, static_cast<int64_t>(et.pid));
  EXPECT_EQ(r.ranks[0].source, source);
  EXPECT_EQ(r.ranks[0].backend, "nccl");

  // The 7 GPU collectives with comm_type + comm_size; CPU-side c10d nodes are not collectives.
  ASSERT_EQ(r.colls.size(), 7u);
  std::multiset<int64_t> allreduce, broadcast;
  for (const auto& c : r.colls) {
    EXPECT_EQ(c.rank, rank);
    EXPECT_EQ(r.str(c.comm), "default");
    EXPECT_EQ(r.str(c.name).rfind("ncclKernel_", 0), 0u) << r.str(c.name);
    if (c.op == CollOp::AllReduce) allreduce.insert(c.bytes);
    if (c.op == CollOp::Broadcast) broadcast.insert(c.bytes);
  }
  EXPECT_EQ(allreduce, (std::multiset<int64_t>{8196000, 9724160, 26255360, 26550272, 31502336}));
  EXPECT_EQ(broadcast, (std::multiset<int64_t>{212480, 424}));

  // seq follows node order; times are the node's duration in exact ns on a running timeline.
  for (size_t i = 0; i < r.colls.size(); ++i) {
    const Collective& c = r.colls[i];
    const EtNode& n = *gpu_comm[i];
    EXPECT_EQ(c.seq, static_cast<int64_t>(i));
    EXPECT_EQ(c.bytes, static_cast<int64_t>(n.ints.at("comm_size")));
    EXPECT_EQ(c.op, n.ints.at("comm_type") == 0 ? CollOp::AllReduce : CollOp::Broadcast);
    EXPECT_EQ(c.end - c.start, static_cast<int64_t>(n.duration) * 1000);
    EXPECT_EQ(c.stream, static_cast<int64_t>(n.ints.at("tid")));
    EXPECT_EQ(c.kernel_ref, static_cast<int64_t>(n.id));
    EXPECT_EQ(r.str(c.dtype), n.ints.at("comm_type") == 0 ? "float32" : "int8");
    EXPECT_EQ(r.str(c.algo), "RING");
    EXPECT_EQ(r.str(c.proto), "LL");
    if (i > 0) {
      EXPECT_GE(c.start, r.colls[i - 1].end) << "same stream: no overlap";
    }
  }
  EXPECT_EQ(r.colls[0].start, 0);
  EXPECT_EQ(r.colls[0].end, 28000);  // 212480-byte broadcast, 28 us

  // Kernels: the GPU compute nodes with a duration, plus the 7 NCCL kernels.
  EXPECT_EQ(static_cast<int64_t>(r.kernels.size()), gpu_comp_with_dur + 7);
  int64_t comm_kernels = 0;
  std::set<int64_t> kernel_streams;
  for (const auto& k : r.kernels) {
    comm_kernels += is_comm(k.category);
    kernel_streams.insert(k.stream);
    EXPECT_LE(k.start, k.end);
  }
  EXPECT_EQ(comm_kernels, 7);
  EXPECT_EQ(kernel_streams, gpu_tids);
  std::set<int64_t> streams;
  for (const auto& s : r.streams) streams.insert(s.stream);
  EXPECT_EQ(streams, gpu_tids);
  ASSERT_EQ(r.comms.size(), 1u);
  EXPECT_EQ(r.comms[0].comm, "default");

  EXPECT_EQ(r.diag("chakra.cpu_nodes_skipped", rank), cpu);
  EXPECT_EQ(r.diag("chakra.kernels_without_duration", rank), gpu_comp_without);
  EXPECT_EQ(r.diag("chakra.unknown_comm_op", rank), 0);
  for (const auto& d : r.diags)
    if (d.code == "chakra.cpu_nodes_skipped") {
      EXPECT_EQ(d.severity, Severity::Info);
    }
}

TEST(ChakraImport, EtArchiveDirectly) {
  TempDir dir;
  std::string et = member(kEtArchive, "tests/data/chakra.0.et");
  EtFile decoded = decode_et(et);
  Imported r = import_one(dir, kEtArchive);
  check_feeder(r, decoded, 0, kEtArchive + ":tests/data/chakra.0.et");
  EXPECT_EQ(r.stats.bytes, et.size());
}

TEST(ChakraImport, PlainAndGzipEtGiveTheSameResult) {
  TempDir dir;
  std::string et = member(kEtArchive, "tests/data/chakra.0.et");
  EtFile decoded = decode_et(et);
  write_file(dir.file("chakra.0.et"), et);
  check_feeder(import_one(dir, dir.file("chakra.0.et")), decoded, 0, dir.file("chakra.0.et"));
  // The rank comes from a chakra.<rank>.et name, through gzip too.
  write_gzip(dir.file("chakra.3.et.gz"), et);
  check_feeder(import_one(dir, dir.file("chakra.3.et.gz")), decoded, 3, dir.file("chakra.3.et.gz"));
  // Any other name: the rank given for the file.
  write_file(dir.file("trace.et"), et);
  check_feeder(import_one(dir, dir.file("trace.et"), TraceFormat::Chakra, {5}), decoded, 5,
               dir.file("trace.et"));
  // Two files of one run that both hold rank 0 are refused.
  expect_error(
      [&] {
        TraceWriter w(dir.file("two.braid"), TraceWriter::Mode::Create);
        ImportOptions opts;
        ImportStats stats;
        import_traces(w, {dir.file("chakra.0.et"), kEtArchive}, TraceFormat::Chakra, opts, stats);
      },
      ErrorCode::Usage, kEtArchive, "rank 0");
}

TEST(ChakraImport, DetectsChakraInputs) {
  TempDir dir;
  std::string et = member(kEtArchive, "tests/data/chakra.0.et");
  write_file(dir.file("noext"), et);
  write_file(dir.file("small.json"), member(kJsonArchive, "jsonData/small_chakra.0.json"));
  EXPECT_EQ(detect_format(kEtArchive), TraceFormat::Chakra);
  EXPECT_EQ(detect_format(kJsonArchive), TraceFormat::Chakra);
  EXPECT_EQ(detect_format(dir.file("noext")), TraceFormat::Chakra);  // by content
  EXPECT_EQ(detect_format(dir.file("small.json")), TraceFormat::Chakra);
  EXPECT_EQ(detect_format(std::string(BRAID_TRACES_DIR) +
                          "/hta/tests/data/nccl_parser_config/nccl_data.json.gz"),
            TraceFormat::Kineto);
  check_feeder(import_one(dir, kEtArchive, TraceFormat::Auto), decode_et(et), 0,
               kEtArchive + ":tests/data/chakra.0.et");
}

// ---- the real JSON ---------------------------------------------------------------------------

struct JsonComm {
  std::string name;
  int64_t runtime;
};
// GPU communication nodes of a workload_graph JSON, in node order; counts all comm nodes.
std::vector<JsonComm> json_gpu_comm(const std::string& text, int64_t* comm_nodes,
                                    int64_t* gpu_comp_with_runtime) {
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(text);
  std::vector<JsonComm> out;
  *comm_nodes = *gpu_comp_with_runtime = 0;
  for (simdjson::dom::element n : doc["workload_graph"].get_array()) {
    int64_t type = n["NodeType"].get_int64();
    bool cpu = n["is_cpu_op"].get_bool();
    int64_t runtime = -1;
    if (n["runtime"].get_int64().get(runtime)) runtime = -1;
    if (type == 7) ++*comm_nodes;
    if (type == 7 && !cpu) out.push_back({std::string(n["Name"].get_string().value()), runtime});
    if (type == 4 && !cpu && runtime >= 0) ++*gpu_comp_with_runtime;
  }
  return out;
}

TEST(ChakraImport, JsonArchive) {
  TempDir dir;
  std::string big = member(kJsonArchive, "jsonData/chakra.0.json");
  std::string small = member(kJsonArchive, "jsonData/small_chakra.0.json");
  int64_t comm_nodes, comp, small_comm, small_comp;
  auto expect = json_gpu_comm(big, &comm_nodes, &comp);
  auto expect_small = json_gpu_comm(small, &small_comm, &small_comp);
  ASSERT_EQ(comm_nodes, 21);  // MANIFEST.md
  ASSERT_EQ(expect.size(), 7u);
  ASSERT_EQ(expect_small.size(), 1u);

  Imported r = import_one(dir, kJsonArchive);
  // chakra.0.json is rank 0 by its name; small_chakra.0.json names no rank and takes the next
  // free one.
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].rank, 0);
  EXPECT_NE(r.ranks[0].source.find("jsonData/chakra.0.json"), std::string::npos);
  EXPECT_EQ(r.ranks[0].world_size, -1);
  EXPECT_EQ(r.ranks[1].rank, 1);
  EXPECT_NE(r.ranks[1].source.find("small_chakra.0.json"), std::string::npos);
  EXPECT_EQ(r.ranks[1].world_size, 8);  // "ngpus"
  EXPECT_EQ(r.stats.bytes, big.size() + small.size());

  auto colls = r.on_rank(0);
  ASSERT_EQ(colls.size(), expect.size());
  for (size_t i = 0; i < colls.size(); ++i) {
    EXPECT_EQ(r.str(colls[i].name), expect[i].name);
    EXPECT_EQ(colls[i].end - colls[i].start, expect[i].runtime * 1000);  // µs -> ns
    EXPECT_EQ(colls[i].seq, static_cast<int64_t>(i));
    EXPECT_EQ(colls[i].bytes, -1);  // the JSON has no sizes
    EXPECT_EQ(colls[i].op, expect[i].name.find("AllReduce") != std::string::npos
                               ? CollOp::AllReduce
                               : CollOp::Broadcast);
  }
  EXPECT_EQ(colls[2].end - colls[2].start, 5572000);  // first all-reduce: "runtime": 5572
  auto small_colls = r.on_rank(1);
  ASSERT_EQ(small_colls.size(), 1u);
  EXPECT_EQ(small_colls[0].op, CollOp::Broadcast);
  EXPECT_EQ(small_colls[0].end - small_colls[0].start, 28000);

  int64_t kernels0 = 0;
  for (const auto& k : r.kernels) kernels0 += k.rank == 0;
  EXPECT_EQ(kernels0, comp + 7);
  EXPECT_EQ(r.diag("chakra.cpu_nodes_skipped", 0), 14 + 2434);  // counted in the test data
  EXPECT_EQ(r.diag("chakra.kernels_without_duration", 0), 157);
}

// ---- synthetic ETs: attributes the real trace lacks ------------------------------------------

struct Pb {
  std::string s;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      s += static_cast<char>(v | 0x80);
      v >>= 7;
    }
    s += static_cast<char>(v);
  }
  Pb& u(int field, uint64_t v) {
    varint(uint64_t(field) << 3);
    varint(v);
    return *this;
  }
  Pb& b(int field, std::string_view bytes) {
    varint(uint64_t(field) << 3 | 2);
    varint(bytes.size());
    s += bytes;
    return *this;
  }
};
std::string attr_int(const std::string& name, int field, uint64_t v) {
  return Pb().b(1, name).u(field, v).s;
}
std::string attr_str(const std::string& name, const std::string& v) {
  return Pb().b(1, name).b(29, v).s;
}
std::string stream_of(const std::vector<std::string>& msgs) {
  std::string s;
  for (const auto& m : msgs) {
    Pb p;
    p.varint(m.size());
    s += p.s + m;
  }
  return s;
}
std::string metadata() { return Pb().b(1, "0.0.4").s; }

// A Node message (et_def.proto field numbers).
std::string node(uint64_t id, const std::string& name, uint64_t type, std::optional<uint64_t> start,
                 std::optional<uint64_t> dur, const std::vector<std::string>& attrs,
                 const std::vector<uint64_t>& deps = {}) {
  Pb p;
  p.u(1, id).b(2, name).u(3, type);
  for (uint64_t d : deps) p.u(5, d);  // unpacked repeated field: parsers must accept both
  if (start) p.u(6, *start);
  if (dur) p.u(7, *dur);
  for (const auto& a : attrs) p.b(10, a);
  return p.s;
}

TEST(ChakraImport, SyntheticAttributes) {
  TempDir dir;
  const uint64_t t0 = 1700000000123456;  // epoch µs: exact ns needs integer arithmetic
  std::vector<std::string> msgs = {
      metadata(),
      node(1, "gemm_kernel", 4, t0, 5, {attr_int("stream", 9, 3)}),
      node(2, "ag", 7, t0 + 10, 7,
           {attr_int("comm_type", 9, 2), attr_int("comm_size", 13, 1 << 20),
            attr_str("pg_name", "tp0"), attr_int("stream", 9, 5), attr_int("is_cpu_op", 27, 0)}),
      node(3, "rs", 7, t0 + 20, 3,
           {attr_int("comm_type", 7, 7), attr_int("comm_size", 7, 4096), attr_str("pg_name", "tp0"),
            attr_int("stream", 9, 5)}),
      node(4, "a2a", 7, t0 + 12, 1,
           {attr_int("comm_type", 9, 6), attr_int("comm_size", 11, 77),
            attr_int("comm_group", 9, 2), attr_int("stream", 9, 6)}),
      node(5, "send", 5, t0 + 30, 2,
           {attr_int("comm_dst", 7, 3), attr_int("comm_size", 9, 10),
            attr_int("comm_type", 9, 5 /* a node type written as comm_type */)}),
      node(6, "recv", 6, t0 + 40, 2, {attr_int("comm_src", 7, 2), attr_int("comm_size", 9, 10)}),
      node(7, "barrier", 7, t0 + 50, std::nullopt, {attr_int("comm_type", 9, 9)}),
      node(8, "reduce", 7, t0 + 60, 1, {attr_int("comm_type", 9, 1)}),
      node(9, "host_op", 4, t0, 100, {attr_int("is_cpu_op", 27, 1)}),
      node(10, "meta", 1, std::nullopt, std::nullopt, {}),
      node(11, "mystery", 7, t0 + 70, 1, {}),
  };
  write_file(dir.file("chakra.2.et"), stream_of(msgs));
  Imported r = import_one(dir, dir.file("chakra.2.et"), TraceFormat::Auto);
  EXPECT_EQ(r.stats.events, 11);
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].rank, 2);

  std::map<std::string, Collective> by_name;
  for (const auto& c : r.colls) by_name[r.str(c.name)] = c;
  ASSERT_EQ(by_name.size(), 8u);
  const Ns ns0 = 1700000000123456000;
  auto& ag = by_name["ag"];
  EXPECT_EQ(ag.op, CollOp::AllGather);
  EXPECT_EQ(ag.bytes, 1 << 20);
  EXPECT_EQ(r.str(ag.comm), "tp0");
  EXPECT_EQ(ag.seq, 0);
  EXPECT_EQ(ag.stream, 5);
  EXPECT_EQ(ag.start, ns0 + 10000);
  EXPECT_EQ(ag.end, ns0 + 17000);
  auto& rs = by_name["rs"];
  EXPECT_EQ(rs.op, CollOp::ReduceScatter);
  EXPECT_EQ(rs.bytes, 4096);
  EXPECT_EQ(r.str(rs.comm), "tp0");
  EXPECT_EQ(rs.seq, 1);
  auto& a2a = by_name["a2a"];
  EXPECT_EQ(a2a.op, CollOp::AllToAll);
  EXPECT_EQ(a2a.bytes, 77);
  EXPECT_EQ(r.str(a2a.comm), "2");
  EXPECT_EQ(a2a.seq, 0);
  EXPECT_EQ(by_name["send"].op, CollOp::Send);
  EXPECT_EQ(by_name["send"].peer_or_root, 3);
  EXPECT_EQ(by_name["recv"].op, CollOp::Recv);
  EXPECT_EQ(by_name["recv"].peer_or_root, 2);
  EXPECT_EQ(by_name["barrier"].op, CollOp::Barrier);
  EXPECT_EQ(by_name["barrier"].start, by_name["barrier"].end);
  EXPECT_EQ(by_name["barrier"].kernel_ref, 0);  // no duration: no kernel
  EXPECT_EQ(by_name["reduce"].op, CollOp::Reduce);
  EXPECT_EQ(by_name["mystery"].op, CollOp::Unknown);
  // "default" group: send, recv, barrier, reduce, mystery in start order.
  EXPECT_EQ(by_name["send"].seq, 0);
  EXPECT_EQ(by_name["recv"].seq, 1);
  EXPECT_EQ(by_name["barrier"].seq, 2);
  EXPECT_EQ(by_name["reduce"].seq, 3);

  std::map<std::string, Kernel> kernels;
  for (const auto& k : r.kernels) kernels[r.str(k.name)] = k;
  EXPECT_EQ(kernels.size(), 8u);  // gemm + the 7 comm nodes with a duration
  EXPECT_EQ(kernels["gemm_kernel"].stream, 3);
  EXPECT_EQ(kernels["gemm_kernel"].start, ns0);
  EXPECT_EQ(kernels["gemm_kernel"].end, ns0 + 5000);
  EXPECT_EQ(kernels["gemm_kernel"].category, Category::Gemm);
  EXPECT_EQ(kernels["ag"].category, Category::CommAllGather);
  EXPECT_EQ(kernels.count("host_op"), 0u);

  std::set<std::string> comms;
  for (const auto& c : r.comms) comms.insert(c.comm);
  EXPECT_EQ(comms, (std::set<std::string>{"2", "default", "tp0"}));
  EXPECT_EQ(r.diag("chakra.cpu_nodes_skipped", 2), 1);
  EXPECT_EQ(r.diag("chakra.other_nodes_skipped", 2), 1);
  EXPECT_EQ(r.diag("chakra.unknown_comm_op", 2), 1);
}

TEST(ChakraImport, RunningTimelineFollowsStreamsAndDataDeps) {
  TempDir dir;
  std::vector<std::string> msgs = {
      metadata(),
      node(1, "k1", 4, std::nullopt, 10, {}),
      node(2, "k2", 4, std::nullopt, 20, {}),
      // On its own stream, but after k2, which it reads.
      node(3, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 7, std::nullopt, 5,
           {attr_int("comm_type", 9, 0), attr_int("stream", 9, 1)}, {2}),
      node(4, "k3", 4, std::nullopt, 1, {}),
  };
  write_file(dir.file("t.et"), stream_of(msgs));
  Imported r = import_one(dir, dir.file("t.et"));
  std::map<std::string, Kernel> k;
  for (const auto& x : r.kernels) k[r.str(x.name)] = x;
  EXPECT_EQ(k["k1"].start, 0);
  EXPECT_EQ(k["k1"].end, 10000);
  EXPECT_EQ(k["k2"].start, 10000);
  EXPECT_EQ(k["k3"].start, 30000);
  ASSERT_EQ(r.colls.size(), 1u);
  EXPECT_EQ(r.colls[0].start, 30000);
  EXPECT_EQ(r.colls[0].end, 35000);
  EXPECT_EQ(r.colls[0].stream, 1);
  EXPECT_EQ(r.ranks[0].rank, 0);  // no rank in the name: the file's index
}

TEST(ChakraImport, EtStartingWithABraceIsNotJson) {
  TempDir dir;
  // A 123-byte GlobalMetadata: its length prefix is '{' and its version tag '\n'.
  std::string meta = Pb().b(1, std::string(121, 'v')).s;
  ASSERT_EQ(meta.size(), 123u);
  std::string data = stream_of({meta, node(1, "k", 4, std::nullopt, 3, {})});
  ASSERT_EQ(data.substr(0, 2), "{\n");
  write_file(dir.file("trace"), data);
  EXPECT_EQ(detect_format(dir.file("trace")), TraceFormat::Chakra);
  Imported r = import_one(dir, dir.file("trace"), TraceFormat::Auto);
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.kernels[0].end, 3000);
}

// ---- bad input ------------------------------------------------------------------------------

TEST(ChakraImport, TruncatedEtIsBadFormat) {
  TempDir dir;
  std::string et = member(kEtArchive, "tests/data/chakra.0.et");
  EtFile decoded = decode_et(et);
  ASSERT_GT(decoded.offsets.size(), 100u);
  // Cut inside the body of message 100, and inside a two-byte length prefix.
  std::string cut = dir.file("cut.et");
  write_file(cut, et.substr(0, decoded.offsets[100] + 10));
  expect_error([&] { import_one(dir, cut); }, ErrorCode::BadFormat, cut, "truncated");
  EXPECT_FALSE(fs::exists(dir.file("out.braid")));  // nothing half-written

  size_t two_byte = 0;
  for (size_t i = 1; i < decoded.offsets.size() && !two_byte; ++i)
    if (static_cast<unsigned char>(et[decoded.offsets[i]]) >= 0x80) two_byte = decoded.offsets[i];
  ASSERT_GT(two_byte, 0u);
  write_file(cut, et.substr(0, two_byte + 1));
  expect_error([&] { import_one(dir, cut); }, ErrorCode::BadFormat, cut, "length prefix");

  // A truncated member inside a tar is reported with the archive and the member.
  std::string tar = read_whole_file(kEtArchive);
  std::string cut_tar = dir.file("cut.tar");
  write_file(cut_tar, tar.substr(0, 512 * 3 + 1000));
  expect_error([&] { import_one(dir, cut_tar); }, ErrorCode::BadFormat, cut_tar, "chakra.0.et");
}

TEST(ChakraImport, RandomBytesAreBadFormat) {
  TempDir dir;
  std::mt19937 rng(12345);
  std::string bytes(8192, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  std::string file = dir.file("random.et");
  write_file(file, bytes);
  expect_error([&] { import_one(dir, file); }, ErrorCode::BadFormat, file, "Chakra ET");
  expect_error([&] { import_one(dir, file, TraceFormat::Auto); }, ErrorCode::BadFormat, file,
               "Chakra ET");
  // Valid framing around garbage: a message whose fields do not parse.
  std::string garbage = stream_of({metadata(), std::string("\x0f\xff\xff", 3)});
  write_file(file, garbage);
  expect_error([&] { import_one(dir, file); }, ErrorCode::BadFormat, file, "does not parse");
  // JSON that is not Chakra.
  std::string json = dir.file("x.json");
  write_file(json, R"({"traceEvents": []})");
  expect_error([&] { import_one(dir, json); }, ErrorCode::BadFormat, json, "workload_graph");
  write_file(json, R"({"workload_graph": [{"Id": 1, "Name": "x"}]})");
  expect_error([&] { import_one(dir, json); }, ErrorCode::BadFormat, json, "NodeType");
}

// A node whose start or end is after 2100 (or overflows) is refused with the node named, and
// nothing is written (issue 23: such times were stored when the sum stayed within int64).
TEST(ChakraImport, TimesThatAreNotTimesAreRefused) {
  TempDir dir;
  std::string file = dir.file("chakra.0.et");
  const uint64_t after_2100 = 4102444800000001;  // µs
  write_file(file, stream_of({metadata(), node(1, "gemm_kernel", 4, after_2100, 5, {})}));
  expect_error([&] { import_one(dir, file); }, ErrorCode::BadFormat, file, "node 1");
  const uint64_t near_2100 = 4102444799999999;  // starts before 2100, ends after it
  write_file(file, stream_of({metadata(), node(2, "gemm_kernel", 4, near_2100, 5, {})}));
  expect_error([&] { import_one(dir, file); }, ErrorCode::BadFormat, file, "after 2100");
  write_file(file, stream_of({metadata(), node(3, "gemm_kernel", 4, 10, UINT64_MAX / 2, {})}));
  expect_error([&] { import_one(dir, file); }, ErrorCode::BadFormat, file, "node 3");
  std::string json = dir.file("t.json");
  write_file(json, R"({"workload_graph": [{"Id": 1, "Name": "k", "NodeType": 4,
                       "start_time_micros": 1e30, "runtime": 1}]})");
  expect_error([&] { import_one(dir, json); }, ErrorCode::BadFormat, json, "not a time");
}

// An archive that does not open (not a tar, or a tar cut inside its first header) is refused;
// its reader is freed (LeakSanitizer in scripts/sanitize.sh found it leaked before issue 23).
TEST(ChakraImport, UnreadableArchivesAreRefusedEachTime) {
  TempDir dir;
  std::string tar = dir.file("bad.tar.gz");
  const char kNotGzip[] = "\x1f\x8b\x08\x00garbage that is no gzip stream";
  write_file(tar, std::string(kNotGzip, sizeof kNotGzip - 1));
  for (int i = 0; i < 3; ++i)
    expect_error([&] { import_one(dir, tar, TraceFormat::Chakra); }, ErrorCode::BadFormat, tar,
                 "");
}

TEST(ChakraImport, EmptyInputs) {
  TempDir dir;
  std::string tar = dir.file("empty.tar");
  write_file(tar, std::string(10240, '\0'));  // what `tar cf x.tar -T /dev/null` writes
  expect_error([&] { import_one(dir, tar); }, ErrorCode::Empty, tar, "no Chakra");
  std::string tgz = dir.file("empty.tar.gz");
  write_gzip(tgz, std::string(10240, '\0'));
  expect_error([&] { import_one(dir, tgz, TraceFormat::Auto); }, ErrorCode::Empty, tgz,
               "no Chakra");
  std::string et = dir.file("empty.et");
  write_file(et, "");
  expect_error([&] { import_one(dir, et); }, ErrorCode::Empty, et, "empty");
}

}  // namespace
}  // namespace braid

// Chrome-trace export: a small .braid with known events on 2 ranks x 2 streams is exported and
// the JSON is parsed back with simdjson.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "trace/error.h"
#include "trace/export/chrome.h"
#include "trace/reader.h"
#include "trace/writer.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

// Valid parts kept, invalid UTF-8 (stray byte, overlong, surrogate, truncated tail) replaced.
// clang-format off
const std::string kNastyName =
    "k<\"q\">\\b/\n\t\x01\x1f\x7f" "\xff" "\xc3\xa9" "\xf0\x9f\x98\x80" "\xc0\xaf" "\xed\xa0\x80"
    "\xe2\x82";
// clang-format on
const std::string kFffd = "\xef\xbf\xbd";
const std::string kNastyExpected = "k<\"q\">\\b/\n\t\x01\x1f\x7f" + kFffd + "\xc3\xa9" +
                                   "\xf0\x9f\x98\x80" + kFffd + kFffd + kFffd + kFffd + kFffd +
                                   kFffd + kFffd;

constexpr const char* kGemm =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1";
constexpr const char* kNccl = "ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
constexpr Ns kT0 = 1'700'000'000'123'456;  // ns, rank 0 clock
constexpr Ns kOffset1 = -1'000'250;        // rank 1 clock is 1.00025 ms ahead

class ChromeExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_chrome_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    braid_ = (dir_ / "t.braid").string();
    build();
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_ / "ro", fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }

  void build() {
    TraceWriter w(braid_, TraceWriter::Mode::Create);
    int64_t run = w.begin_run(RunKind::Imported, "synthetic");
    for (int r = 0; r < 2; ++r) {
      RankInfo ri;
      ri.rank = r;
      ri.world_size = 2;
      ri.device = r;
      ri.device_name = "NVIDIA H100 80GB HBM3";
      ri.host = r == 0 ? "node-a" : "";
      ri.clock_offset = r == 1 ? kOffset1 : 0;
      w.add_rank(run, ri);
      w.add_stream(run, {r, 7, true, ""});
      w.add_stream(run, {r, 13, true, r == 0 ? "nccl \"comm\"" : ""});
    }
    w.add_stream(run, {0, 4242, false, ""});
    StrId gemm = w.intern(kGemm), nccl = w.intern(kNccl), nasty = w.intern(kNastyName);
    for (int r = 0; r < 2; ++r) {
      Ns base = kT0 - (r == 1 ? kOffset1 : 0);  // same moment on the common axis
      for (int i = 0; i < 3; ++i) {
        Kernel k;
        k.rank = r;
        k.stream = 7;
        k.start = base + i * 10'000;
        k.end = k.start + 2'001;
        k.name = gemm;
        k.category = Category::Gemm;
        k.correlation = 100 + i;
        w.add(run, k);
      }
      Kernel n;
      n.rank = r;
      n.stream = 13;
      n.start = base + 5'000;
      n.end = base + 25'007;
      n.name = nccl;
      n.category = Category::CommAllReduce;
      n.correlation = 200;
      w.add(run, n);
      Collective c;
      c.rank = r;
      c.comm = w.intern("pg0");
      c.seq = 4;
      c.op = CollOp::AllReduce;
      c.dtype = w.intern("bfloat16");
      c.in_count = c.out_count = 1'048'576;
      c.bytes = 2'097'152;
      c.group_size = 2;
      c.peer_or_root = -1;
      c.stream = 13;
      c.start = n.start;
      c.end = n.end;
      c.enqueue = base + 4'000;
      c.algo = w.intern("RING");
      c.proto = w.intern("LL");
      c.channels = 2;
      c.name = nccl;
      c.kernel_ref = 200;
      w.add(run, c);
    }
    Kernel bad;
    bad.rank = 0;
    bad.stream = 7;
    bad.start = kT0 + 50'000;
    bad.end = kT0 + 50'005;
    bad.name = nasty;
    bad.correlation = 300;
    w.add(run, bad);

    Memcpy m;
    m.rank = 0;
    m.stream = 7;
    m.start = kT0 + 60'000;
    m.end = kT0 + 61'000;
    m.kind = MemKind::HtoD;
    m.bytes = 4096;
    m.correlation = 400;
    w.add(run, m);
    m.rank = 1;
    m.kind = MemKind::Memset;
    m.bytes = 512;
    m.name = w.intern("Memset (Device)");
    w.add(run, m);

    ApiCall a;
    a.rank = 0;
    a.tid = 4242;
    a.start = kT0 - 1'000;
    a.end = kT0 - 500;
    a.name = w.intern("cudaLaunchKernel");
    a.kind = ApiKind::Runtime;
    a.correlation = 100;
    w.add(run, a);
    a.start = kT0 - 3'000;
    a.end = kT0;
    a.name = w.intern("aten::mm");
    a.kind = ApiKind::CpuOp;
    a.correlation = 0;
    a.external_id = 9;
    w.add(run, a);

    Range g;
    g.rank = 0;
    g.stream = 4242;
    g.start = kT0 - 5'000;
    g.end = kT0 + 100'000;
    g.name = w.intern("ProfilerStep#3");
    w.add(run, g);
    w.add_step(run, {0, 3, kT0 - 5'000, kT0 + 100'000});

    // Collective seen only on the host (no kernel): its own track on rank 1.
    Collective b;
    b.rank = 1;
    b.comm = w.intern("pg0");
    b.seq = 5;
    b.op = CollOp::Barrier;
    b.start = kT0 + 200'000;
    b.end = kT0 + 201'000;
    w.add(run, b);

    int64_t run2 = w.begin_run(RunKind::Simulated, "second");
    RankInfo ri;
    ri.rank = 3;
    w.add_rank(run2, ri);
    Kernel k;
    k.rank = 3;
    k.stream = 1;
    k.start = 5;
    k.end = 1'005;
    k.name = gemm;
    w.add(run2, k);
    w.commit();
  }

  std::string read(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  std::vector<std::string> listing() {
    std::vector<std::string> v;
    // The reader's WAL side files (t.braid-wal, -shm) are not ours.
    for (auto& e : fs::directory_iterator(dir_)) {
      std::string n = e.path().filename().string();
      if (n.rfind("t.braid-", 0) != 0) v.push_back(n);
    }
    std::sort(v.begin(), v.end());
    return v;
  }

  fs::path dir_;
  std::string braid_;
};

TEST_F(ChromeExportTest, StructureTimesAndArgs) {
  TraceReader reader(braid_);
  std::string out = (dir_ / "out.json").string();
  ChromeExportStats st = export_chrome(reader, out, {});
  EXPECT_EQ(listing(), (std::vector<std::string>{"out.json", "t.braid"}));

  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out);
  EXPECT_EQ(std::string_view(doc["displayTimeUnit"]), "ns");
  simdjson::dom::array evs = doc["traceEvents"];
  EXPECT_EQ(static_cast<int64_t>(evs.size()), st.events);

  std::map<std::string, int> by_cat;
  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sort;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  std::set<std::pair<int64_t, int64_t>> x_tracks;
  int metadata = 0;
  for (simdjson::dom::element e : evs) {
    std::string_view ph = e["ph"];
    int64_t pid = e["pid"], tid = e["tid"];
    if (ph == "M") {
      ++metadata;
      std::string_view what = e["name"];
      if (what == "process_name") {
        EXPECT_TRUE(process_names.emplace(pid, std::string_view(e["args"]["name"])).second);
      } else if (what == "process_sort_index") {
        process_sort[pid] = int64_t(e["args"]["sort_index"]);
      } else if (what == "thread_name") {
        // One name per (pid, tid): tids are unique within a process.
        EXPECT_TRUE(
            thread_names.emplace(std::pair(pid, tid), std::string_view(e["args"]["name"])).second);
      }
      continue;
    }
    ASSERT_EQ(ph, "X");
    by_cat[std::string(std::string_view(e["cat"]))]++;
    x_tracks.insert({pid, tid});
    EXPECT_GE(double(e["dur"]), 0.0);
  }
  EXPECT_EQ(by_cat["kernel"], 9);
  EXPECT_EQ(by_cat["collective"], 3);
  EXPECT_EQ(by_cat["gpu_memcpy"], 1);
  EXPECT_EQ(by_cat["gpu_memset"], 1);
  EXPECT_EQ(by_cat["cuda_runtime"], 1);
  EXPECT_EQ(by_cat["cpu_op"], 1);
  EXPECT_EQ(by_cat["user_annotation"], 1);
  EXPECT_EQ(by_cat["step"], 1);
  EXPECT_EQ(by_cat.size(), 8u);

  EXPECT_EQ(process_names, (std::map<int64_t, std::string>{{0, "rank 0 (NVIDIA H100 80GB HBM3)"},
                                                           {1, "rank 1 (NVIDIA H100 80GB HBM3)"}}));
  EXPECT_EQ(process_sort, (std::map<int64_t, int64_t>{{0, 0}, {1, 1}}));
  // Rank 0: streams 7 and 13 (labelled), CPU thread 4242 in its own tid range, the steps track;
  // rank 1: streams 7 and 13 and the host-collective track.
  auto tname = [&](int64_t pid, int64_t tid) { return thread_names[{pid, tid}]; };
  ASSERT_EQ(thread_names.size(), 7u);
  EXPECT_EQ(tname(0, 7), "stream 7");
  EXPECT_EQ(tname(0, 13), "nccl \"comm\"");
  EXPECT_EQ(tname(1, 13), "stream 13");
  int cpu_threads = 0;
  for (auto& [key, name] : thread_names) {
    if (name == "thread 4242") {
      ++cpu_threads;
      EXPECT_EQ(key.first, 0);
      EXPECT_NE(key.second, 7);
      EXPECT_NE(key.second, 13);
    }
  }
  EXPECT_EQ(cpu_threads, 1);
  // Every track with events is named.
  for (auto& t : x_tracks) EXPECT_TRUE(thread_names.count(t)) << t.first << "/" << t.second;
  // 2 processes x (name, sort) + 1 label (host of rank 0) + 7 threads x (name, sort).
  EXPECT_EQ(metadata, 2 * 2 + 1 + 7 * 2);
  EXPECT_EQ(st.events, 18 + metadata);

  // Exact decimal microseconds; rank 1's offset puts its kernels at the same common time.
  std::string text = read(out);
  EXPECT_NE(text.find("\"pid\":0,\"tid\":7,\"ts\":1700000000123.456,\"dur\":2.001"),
            std::string::npos);
  EXPECT_NE(text.find("\"pid\":1,\"tid\":7,\"ts\":1700000000123.456,\"dur\":2.001"),
            std::string::npos);
  EXPECT_NE(text.find("\"pid\":1,\"tid\":7,\"ts\":1700000000143.456,\"dur\":2.001"),
            std::string::npos);
  EXPECT_NE(text.find("\"pid\":1,\"tid\":13,\"ts\":1700000000128.456,\"dur\":20.007"),
            std::string::npos);
  // Memset on rank 1 at kT0 + 60 us of its own clock: 1.00025 ms earlier on the common axis.
  EXPECT_NE(text.find("\"ts\":1700000000183.456,\"dur\":1.000"), std::string::npos);
  EXPECT_NE(text.find("\"ts\":1699999999183.206,\"dur\":1.000"), std::string::npos);

  // Collective args, both ranks.
  int colls = 0;
  for (simdjson::dom::element e : evs) {
    if (std::string_view(e["ph"]) != "X" || std::string_view(e["cat"]) != "collective") continue;
    ++colls;
    simdjson::dom::element a = e["args"];
    if (std::string_view(e["name"]) == "barrier") {
      EXPECT_EQ(int64_t(e["pid"]), 1);
      EXPECT_EQ(int64_t(a["seq"]), 5);
      EXPECT_EQ(tname(1, int64_t(e["tid"])), "collectives (host)");
      EXPECT_TRUE(a["enqueue_ts"].error());  // unknown: left out
      continue;
    }
    EXPECT_EQ(std::string_view(e["name"]), "allreduce");
    EXPECT_EQ(int64_t(e["tid"]), 13);
    EXPECT_EQ(std::string_view(a["comm"]), "pg0");
    EXPECT_EQ(int64_t(a["seq"]), 4);
    EXPECT_EQ(std::string_view(a["op"]), "allreduce");
    EXPECT_EQ(std::string_view(a["dtype"]), "bfloat16");
    EXPECT_EQ(int64_t(a["in_count"]), 1'048'576);
    EXPECT_EQ(int64_t(a["out_count"]), 1'048'576);
    EXPECT_EQ(int64_t(a["bytes"]), 2'097'152);
    EXPECT_EQ(int64_t(a["group_size"]), 2);
    EXPECT_EQ(int64_t(a["peer_or_root"]), -1);
    EXPECT_EQ(std::string_view(a["algo"]), "RING");
    EXPECT_EQ(std::string_view(a["proto"]), "LL");
    EXPECT_EQ(int64_t(a["channels"]), 2);
    EXPECT_EQ(std::string_view(a["kernel"]), kNccl);
    EXPECT_EQ(int64_t(a["kernel_ref"]), 200);
    EXPECT_DOUBLE_EQ(double(a["enqueue_ts"]), 1700000000127.456);
  }
  EXPECT_EQ(colls, 3);
  EXPECT_NE(text.find("\"enqueue_ts\":1700000000127.456"), std::string::npos);

  // Kernel and memcpy args.
  int gemms = 0;
  for (simdjson::dom::element e : evs) {
    if (std::string_view(e["ph"]) != "X") continue;
    std::string_view cat = e["cat"];
    if (cat == "kernel" && std::string_view(e["name"]) == kGemm) {
      ++gemms;
      EXPECT_EQ(std::string_view(e["args"]["category"]), "gemm");
      int64_t corr = e["args"]["correlation"];
      EXPECT_TRUE(corr >= 100 && corr <= 102);
    }
    if (cat == "gpu_memcpy") {
      EXPECT_EQ(std::string_view(e["name"]), "Memcpy HtoD");
      EXPECT_EQ(int64_t(e["args"]["bytes"]), 4096);
      EXPECT_EQ(std::string_view(e["args"]["kind"]), "HtoD");
    }
    if (cat == "gpu_memset") {
      EXPECT_EQ(std::string_view(e["name"]), "Memset (Device)");
      EXPECT_EQ(int64_t(e["args"]["bytes"]), 512);
    }
    if (cat == "cpu_op") {
      EXPECT_EQ(int64_t(e["args"]["external_id"]), 9);
    }
  }
  EXPECT_EQ(gemms, 6);
}

TEST_F(ChromeExportTest, EscapesNastyKernelName) {
  TraceReader reader(braid_);
  std::string out = (dir_ / "out.json").string();
  export_chrome(reader, out, {});
  simdjson::dom::parser parser;  // also validates that the whole file is UTF-8
  simdjson::dom::element doc = parser.load(out);
  int found = 0;
  for (simdjson::dom::element e : doc["traceEvents"].get_array()) {
    if (std::string_view(e["ph"]) != "X" || std::string_view(e["cat"]) != "kernel") continue;
    if (int64_t(e["args"]["correlation"]) != 300) continue;
    ++found;
    EXPECT_EQ(std::string(std::string_view(e["name"])), kNastyExpected);
  }
  EXPECT_EQ(found, 1);
  std::string text = read(out);
  EXPECT_NE(text.find(R"("name":"k<\"q\">\\b/\n\t\u0001\u001f)"), std::string::npos);
  EXPECT_FALSE(std::any_of(text.begin(), text.end(),
                           [](char c) { return c >= 0 && c < 0x20 && c != '\n'; }));
}

TEST_F(ChromeExportTest, SelectsRuns) {
  TraceReader reader(braid_);
  std::string out = (dir_ / "run2.json").string();
  ChromeExportOptions o;
  o.run = 2;
  ChromeExportStats st = export_chrome(reader, out, o);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out);
  int x = 0;
  for (simdjson::dom::element e : doc["traceEvents"].get_array()) {
    if (std::string_view(e["ph"]) != "X") continue;
    ++x;
    EXPECT_EQ(int64_t(e["pid"]), 3);
  }
  EXPECT_EQ(x, 1);
  EXPECT_EQ(st.events, 1 + 2 + 2);  // kernel; process name + sort; thread name + sort
  EXPECT_NE(read(out).find("\"ts\":0.005,\"dur\":1.000"), std::string::npos);
  // The default is the first run, and an existing output is replaced.
  ChromeExportStats first = export_chrome(reader, out, {});
  EXPECT_GT(first.events, st.events);
}

TEST_F(ChromeExportTest, UnknownRunIsUsageErrorAndKeepsOutput) {
  TraceReader reader(braid_);
  fs::path out = dir_ / "out.json";
  std::ofstream(out) << "previous";
  ChromeExportOptions o;
  o.run = 7;
  try {
    export_chrome(reader, out.string(), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Usage);
    EXPECT_NE(std::string(e.what()).find("no run 7"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(out), "previous");
  EXPECT_EQ(listing(), (std::vector<std::string>{"out.json", "t.braid"}));
}

TEST_F(ChromeExportTest, UnwritableOutputLeavesNothingBehind) {
  TraceReader reader(braid_);
  // Parent is a regular file; parent does not exist.
  std::ofstream(dir_ / "file") << "x";
  for (fs::path p : {dir_ / "file" / "out.json", dir_ / "missing" / "out.json"}) {
    try {
      export_chrome(reader, p.string(), {});
      FAIL() << "no error for " << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
  }
  // The target is a directory: everything is written, then the rename fails and the temp
  // file must go.
  fs::create_directory(dir_ / "isdir");
  EXPECT_THROW(export_chrome(reader, (dir_ / "isdir").string(), {}), Error);
  EXPECT_EQ(listing(), (std::vector<std::string>{"file", "isdir", "t.braid"}));
  EXPECT_TRUE(fs::is_empty(dir_ / "isdir"));
}

TEST_F(ChromeExportTest, ReadOnlyDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TraceReader reader(braid_);
  fs::create_directory(dir_ / "ro");
  fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_THROW(export_chrome(reader, (dir_ / "ro" / "out.json").string(), {}), Error);
  fs::permissions(dir_ / "ro", fs::perms::owner_all);
  EXPECT_TRUE(fs::is_empty(dir_ / "ro"));
}

TEST_F(ChromeExportTest, FileWithoutRuns) {
  std::string empty = (dir_ / "empty.braid").string();
  {
    TraceWriter w(empty, TraceWriter::Mode::Create);
    w.commit();
  }
  TraceReader reader(empty);
  try {
    export_chrome(reader, (dir_ / "out.json").string(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Empty);
  }
  EXPECT_FALSE(fs::exists(dir_ / "out.json"));
}

}  // namespace
}  // namespace braid

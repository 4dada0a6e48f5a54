// Nsight Systems SQLite importer: the fixture (tests/data/nsys/fixture.sql) is loaded into a
// temporary SQLite file, imported through TraceWriter and read back with TraceReader.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "trace/error.h"
#include "trace/import/importer.h"
#include "trace/reader.h"
#include "trace/time_range.h"
#include "trace/writer.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kPid = 4242;
const char* kComm = "0x1a3589940f8343";  // 7377214405313347, from the NCCL payloads

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class NsysImport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_nsys_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Builds an SQLite file from SQL text; `extra` runs after it (to drop or add things).
  std::string make_db(const std::string& name, const std::string& sql,
                      const std::string& extra = "") {
    std::string path = (dir_ / name).string();
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    // One transaction: the fixture's inserts would otherwise each wait for a sync.
    sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
    for (const std::string* s : {&sql, &extra}) {
      if (s->empty()) continue;
      if (sqlite3_exec(db, s->c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        ADD_FAILURE() << "SQL failed: " << (err ? err : "?");
        sqlite3_free(err);
      }
    }
    sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    return path;
  }
  std::string fixture(const std::string& extra = "") {
    return make_db("fixture.sqlite", read_text(BRAID_TEST_DATA_DIR "/nsys/fixture.sql"), extra);
  }

  // Imports `file` into a fresh .braid and returns its path.
  std::string import(const std::string& file, ImportOptions opts = {}) {
    std::string out = (dir_ / "out.braid").string();
    fs::remove(out);
    TraceWriter w(out, TraceWriter::Mode::Create);
    run_ = import_traces(w, {file}, TraceFormat::Nsys, opts, stats_);
    w.commit();
    return out;
  }

  fs::path dir_;
  int64_t run_ = 0;
  ImportStats stats_;
};

template <typename T>
std::map<int64_t, T> by_correlation(const std::vector<T>& v) {
  std::map<int64_t, T> m;
  for (const auto& x : v) m[x.correlation] = x;
  return m;
}

struct Loaded {
  std::vector<Kernel> kernels;
  std::vector<Memcpy> memcpys;
  std::vector<ApiCall> apis;
  std::vector<Range> ranges;
  std::map<int64_t, Collective> colls;  // by kernel_ref
  std::map<std::string, Diagnostic> diags;
};

Loaded load(const TraceReader& r, int64_t run) {
  Loaded l;
  r.kernels(run, [&](const Kernel& k) { return l.kernels.push_back(k), true; });
  r.memcpys(run, [&](const Memcpy& m) { return l.memcpys.push_back(m), true; });
  r.api_calls(run, [&](const ApiCall& a) { return l.apis.push_back(a), true; });
  r.ranges(run, [&](const Range& x) { return l.ranges.push_back(x), true; });
  r.collectives(run, [&](const Collective& c) { return l.colls[c.kernel_ref] = c, true; });
  for (const auto& d : r.diagnostics(run)) l.diags[d.code] = d;
  return l;
}

TEST_F(NsysImport, ImportsFixtureExactly) {
  std::string db = fixture();
  TraceReader r(import(db));
  Loaded l = load(r, run_);

  EXPECT_EQ(stats_.files, 1);
  EXPECT_EQ(stats_.events, 10 + 2 + 1 + 14 + 16);  // kernel, memcpy, memset, runtime, NVTX rows
  EXPECT_EQ(stats_.bytes, fs::file_size(db));

  // Kernels: one rank (2, from NCCL's ncclCommInitRank payload), categories by name.
  ASSERT_EQ(l.kernels.size(), 10u);
  auto k = by_correlation(l.kernels);
  const std::map<int64_t, Category> cat = {
      {101, Category::Gemm},          {102, Category::Elementwise},  {103, Category::Gemm},
      {104, Category::CommAllReduce}, {105, Category::Elementwise},  {106, Category::CommAllGather},
      {107, Category::CommAllToAll},  {108, Category::CommSendRecv}, {109, Category::CommSendRecv},
      {110, Category::CommSendRecv}};
  for (const auto& [corr, c] : cat) {
    ASSERT_TRUE(k.count(corr)) << corr;
    EXPECT_EQ(k[corr].category, c) << corr;
    EXPECT_EQ(k[corr].rank, 2) << corr;
  }
  EXPECT_EQ(k[101].start, 1000120000);
  EXPECT_EQ(k[101].end, 1000300000);
  EXPECT_EQ(k[101].stream, 7);
  EXPECT_EQ(r.str(k[101].name), "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn");
  EXPECT_EQ(k[104].stream, 13);
  EXPECT_EQ(r.str(k[104].name),
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)");

  // Memcpys and the memset.
  ASSERT_EQ(l.memcpys.size(), 3u);
  auto m = by_correlation(l.memcpys);
  EXPECT_EQ(m[111].kind, MemKind::HtoD);
  EXPECT_EQ(m[111].bytes, 8388608);
  EXPECT_EQ(m[111].start, 1000620000);
  EXPECT_EQ(m[111].end, 1000680000);
  EXPECT_EQ(m[112].kind, MemKind::DtoH);
  EXPECT_EQ(m[112].bytes, 4096);
  EXPECT_EQ(m[113].kind, MemKind::Memset);
  EXPECT_EQ(m[113].bytes, 1024);
  EXPECT_EQ(m[113].stream, 7);

  // Runtime calls on their OS threads.
  ASSERT_EQ(l.apis.size(), 14u);
  auto a = by_correlation(l.apis);
  for (const auto& [corr, api] : a) {
    EXPECT_EQ(api.kind, ApiKind::Runtime);
    EXPECT_EQ(api.tid, corr == 110 ? 4250 : 4242) << corr;
  }
  EXPECT_EQ(r.str(a[111].name), "cudaMemcpyAsync_v3020");
  EXPECT_EQ(a[114].start, 1000430000);
  EXPECT_EQ(a[114].end, 1000860000);

  // NVTX: 13 closed ranges; the domain row, the mark and the open range are not ranges.
  ASSERT_EQ(l.ranges.size(), 13u);
  std::map<std::string, int> names;
  const Range* forward = nullptr;
  const Range* allreduce = nullptr;
  for (const auto& x : l.ranges) {
    ++names[r.str(x.name)];
    if (r.str(x.name) == "forward") forward = &x;
    if (r.str(x.name) == "ncclAllReduce") allreduce = &x;
  }
  EXPECT_EQ(names["ncclGroupEnd"], 3);
  EXPECT_EQ(names["ncclSend"], 2);
  EXPECT_EQ(names["step 0"], 1);
  EXPECT_EQ(names.count("checkpoint"), 0u);
  EXPECT_EQ(names.count("dangling"), 0u);
  ASSERT_TRUE(forward && allreduce);
  EXPECT_EQ(forward->start, 1000100000);
  EXPECT_EQ(forward->end, 1000200000);
  EXPECT_EQ(forward->stream, 4242);
  EXPECT_EQ(forward->domain, 0u);
  EXPECT_EQ(r.str(allreduce->domain), "NCCL");
  EXPECT_NE(r.str(allreduce->payload).find("\"Message size [bytes]\":4194304"), std::string::npos);

  // Collectives: one per NCCL kernel, linked to its launch and its NCCL NVTX range.
  ASSERT_EQ(l.colls.size(), 6u);
  const Collective& ar = l.colls[104];
  EXPECT_EQ(ar.op, CollOp::AllReduce);
  EXPECT_EQ(r.str(ar.comm), kComm);
  EXPECT_EQ(ar.seq, 0);
  EXPECT_EQ(r.str(ar.dtype), "float32");
  EXPECT_EQ(ar.bytes, 4194304);
  EXPECT_EQ(ar.in_count, 1048576);
  EXPECT_EQ(ar.out_count, 1048576);
  EXPECT_EQ(ar.stream, 13);
  EXPECT_EQ(ar.start, 1000500000);
  EXPECT_EQ(ar.end, 1000600000);
  EXPECT_EQ(ar.enqueue, 1000215000);
  EXPECT_EQ(r.str(ar.algo), "RING");
  EXPECT_EQ(r.str(ar.proto), "LL");
  EXPECT_EQ(ar.rank, 2);
  EXPECT_EQ(ar.name, k[104].name);

  // All-gather: the payload's size is the send size; the buffer size is 4 ranks of it.
  const Collective& ag = l.colls[106];
  EXPECT_EQ(ag.op, CollOp::AllGather);
  EXPECT_EQ(ag.bytes, 4 * 1048576);
  EXPECT_EQ(ag.in_count, -1);  // the 2.19+ kernel name does not carry the type
  EXPECT_EQ(ag.dtype, 0u);
  EXPECT_EQ(ag.seq, 1);
  EXPECT_EQ(ag.enqueue, 1000255000);

  // SendRecv kernels take their operation from the NCCL range around their launch.
  const Collective& a2a = l.colls[107];
  EXPECT_EQ(a2a.op, CollOp::AllToAll);
  EXPECT_EQ(a2a.bytes, 2097152);
  EXPECT_EQ(a2a.seq, 2);
  EXPECT_EQ(a2a.enqueue, 1000305000);
  const Collective& send = l.colls[108];
  EXPECT_EQ(send.op, CollOp::Send);
  EXPECT_EQ(send.peer_or_root, 3);
  EXPECT_EQ(send.bytes, 65536);  // older NCCL names the entry "Bytes"
  EXPECT_EQ(send.seq, 3);
  const Collective& grouped = l.colls[109];  // ncclGroupStart; ncclSend; ncclRecv; ncclGroupEnd
  EXPECT_EQ(grouped.op, CollOp::SendRecv);
  EXPECT_EQ(grouped.peer_or_root, 1);
  EXPECT_EQ(grouped.bytes, 32768);
  EXPECT_EQ(grouped.group_size, 2);
  EXPECT_EQ(grouped.seq, 4);
  // Launched from another thread while ncclAllReduce was open on the main one: no match.
  const Collective& lone = l.colls[110];
  EXPECT_EQ(lone.op, CollOp::SendRecv);
  EXPECT_EQ(lone.comm, 0u);
  EXPECT_EQ(lone.seq, -1);
  EXPECT_EQ(lone.bytes, -1);
  EXPECT_EQ(lone.enqueue, 1000216000);

  // Rank, streams, communicator.
  auto ranks = r.ranks(run_);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 2);
  EXPECT_EQ(ranks[0].world_size, 4);
  EXPECT_EQ(ranks[0].pid, kPid);
  EXPECT_EQ(ranks[0].device, 0);
  EXPECT_EQ(ranks[0].device_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(ranks[0].backend, "nccl");
  auto streams = r.streams(run_);
  ASSERT_EQ(streams.size(), 2u);
  std::map<int64_t, std::string> labels;
  for (const auto& s : streams) {
    EXPECT_EQ(s.rank, 2);
    labels[s.stream] = s.label;
  }
  EXPECT_EQ(labels[7], "stream 7");
  EXPECT_EQ(labels[13], "stream 13 (priority -1)");
  auto comms = r.communicators(run_);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].comm, kComm);
  EXPECT_EQ(comms[0].nranks, 4);

  // Diagnostics: what was skipped, and nothing missing.
  EXPECT_EQ(l.diags.count("nsys.missing_table"), 0u);
  ASSERT_TRUE(l.diags.count("nsys.nccl_op_unresolved"));
  EXPECT_EQ(l.diags["nsys.nccl_op_unresolved"].count, 1);
  EXPECT_EQ(l.diags["nsys.nvtx_mark_skipped"].count, 1);
  EXPECT_EQ(l.diags["nsys.nvtx_unterminated"].count, 1);
  EXPECT_EQ(l.diags.count("nsys.nccl_kernel_unlinked"), 0u);
}

TEST_F(NsysImport, MissingOptionalTablesAreReportedAndTheRestImported) {
  std::string db = fixture("DROP TABLE NVTX_EVENTS; DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET;");
  ImportOptions opts;
  opts.ranks = {5};  // no rank in the file any more (it came from NCCL's NVTX payload)
  TraceReader r(import(db, opts));
  Loaded l = load(r, run_);
  ASSERT_TRUE(l.diags.count("nsys.missing_table"));
  const Diagnostic& d = l.diags["nsys.missing_table"];
  EXPECT_EQ(d.count, 2);
  EXPECT_NE(d.detail.find("NVTX_EVENTS"), std::string::npos);
  EXPECT_NE(d.detail.find("CUPTI_ACTIVITY_KIND_MEMSET"), std::string::npos);
  EXPECT_NE(d.detail.find(db), std::string::npos);

  EXPECT_EQ(l.kernels.size(), 10u);
  EXPECT_EQ(l.memcpys.size(), 2u);
  EXPECT_EQ(l.apis.size(), 14u);
  EXPECT_EQ(l.ranges.size(), 0u);
  EXPECT_EQ(stats_.events, 10 + 2 + 14);
  for (const auto& k : l.kernels) EXPECT_EQ(k.rank, 5);
  // Without NVTX the kernel names still give the operations; SendRecv stays SendRecv.
  ASSERT_EQ(l.colls.size(), 6u);
  EXPECT_EQ(l.colls[104].op, CollOp::AllReduce);
  EXPECT_EQ(l.colls[104].bytes, -1);
  EXPECT_EQ(l.colls[104].enqueue, 1000215000);
  EXPECT_EQ(l.colls[107].op, CollOp::SendRecv);
  EXPECT_EQ(l.diags["nsys.nccl_op_unresolved"].count, 4);
  auto ranks = r.ranks(run_);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 5);
  EXPECT_EQ(ranks[0].world_size, -1);
}

// Rows whose start/end cannot be times (±2^63, after 2100, ending before they start) are
// skipped and counted, never stored; before issue 23 they were stored as they came.
TEST_F(NsysImport, RowsWhoseTimesAreNotTimesAreSkippedAndCounted) {
  std::string db = fixture(
      "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start=-9223372036854775808 WHERE correlationId=101;"
      "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end=9223372036854775807 WHERE correlationId=102;"
      "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end=start-1 WHERE correlationId=103;"
      "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start=4102444800000000001, "
      "end=4102444800000000002 WHERE correlationId=101;");
  TraceReader r(import(db));
  Loaded l = load(r, run_);
  EXPECT_EQ(l.kernels.size(), 10u - 3u);
  for (const auto& k : l.kernels) EXPECT_TRUE(valid_span(k.start, k.end)) << k.correlation;
  for (const auto& a : l.apis) EXPECT_TRUE(valid_span(a.start, a.end)) << a.correlation;
  EXPECT_EQ(l.apis.size(), 14u - 1u);
  ASSERT_TRUE(l.diags.count("nsys.bad_time"));
  EXPECT_EQ(l.diags["nsys.bad_time"].count, 4);
  EXPECT_NE(l.diags["nsys.bad_time"].detail.find("-9223372036854775808"), std::string::npos)
      << l.diags["nsys.bad_time"].detail;
}

TEST_F(NsysImport, OlderSchemaWithoutDemangledNamesUsesShortNames) {
  std::string db = fixture(
      "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN demangledName;"
      "ALTER TABLE NVTX_EVENTS DROP COLUMN jsonText;");
  TraceReader r(import(db));
  Loaded l = load(r, run_);
  auto k = by_correlation(l.kernels);
  ASSERT_EQ(k.size(), 10u);
  EXPECT_EQ(r.str(k[102].name), "vectorized_elementwise_kernel");
  EXPECT_EQ(k[102].category, Category::Elementwise);
  EXPECT_EQ(r.str(k[104].name), "ncclKernel_AllReduce_RING_LL_Sum_float");
  ASSERT_TRUE(l.diags.count("nsys.missing_column"));
  EXPECT_NE(l.diags["nsys.missing_column"].detail.find("demangledName (used shortName)"),
            std::string::npos);
  // Without payloads the ops still come from the NCCL range names, the sizes do not.
  EXPECT_EQ(l.colls[104].op, CollOp::AllReduce);
  EXPECT_EQ(r.str(l.colls[104].dtype), "float32");
  EXPECT_EQ(l.colls[104].bytes, -1);
  EXPECT_EQ(l.colls[107].op, CollOp::AllToAll);
  EXPECT_EQ(l.colls[108].op, CollOp::Send);
  EXPECT_EQ(l.colls[108].peer_or_root, -1);
  EXPECT_EQ(r.ranks(run_)[0].rank, 0);  // the rank was in a payload
}

TEST_F(NsysImport, GroupedSendsAndReceivesToEveryPeerAreAnAllToAll) {
  // A PyTorch-style all_to_all: ncclGroupStart; ncclSend/ncclRecv to all 3 peers; ncclGroupEnd.
  std::string extra = R"SQL(
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId,
      correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ,
      blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread,
      localMemoryTotal, gridId)
    VALUES (1002000000, 1002100000, 0, 1, 13, 120, 281546145660928, 20, 21, 96, 3, 1, 1, 512, 1,
            1, 4224, 0, 0, 0, 11);
    INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId,
      nameId, returnValue) VALUES (1001900500, 1001900900, 1, 281546145665170, 120, 1, 0);
    INSERT INTO NVTX_EVENTS (eventId, start, end, eventType, globalTid, textId, domainId, jsonText)
    VALUES
      (20, 1001800000, 1001800100, 59, 281546145665170, 36, 1, NULL),
      (21, 1001800200, 1001800300, 59, 281546145665170, 35, 1,
       '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":1000,"Peer rank":0}'),
      (22, 1001800400, 1001800500, 59, 281546145665170, 37, 1,
       '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":1000,"Peer rank":0}'),
      (23, 1001800600, 1001800700, 59, 281546145665170, 35, 1,
       '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":1000,"Peer rank":1}'),
      (24, 1001800800, 1001800900, 59, 281546145665170, 37, 1,
       '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":1000,"Peer rank":1}'),
      (25, 1001801000, 1001801100, 59, 281546145665170, 35, 1,
       '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":1000,"Peer rank":3}'),
      (26, 1001801200, 1001801300, 59, 281546145665170, 37, 1,
       '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":1000,"Peer rank":3}'),
      (27, 1001900000, 1001901000, 59, 281546145665170, 34, 1, NULL);
  )SQL";
  TraceReader r(import(fixture(extra)));
  Loaded l = load(r, run_);
  ASSERT_TRUE(l.colls.count(120));
  const Collective& c = l.colls[120];
  EXPECT_EQ(c.op, CollOp::AllToAll);
  EXPECT_EQ(c.bytes, 3000);
  EXPECT_EQ(c.group_size, 6);
  EXPECT_EQ(c.peer_or_root, -1);
  EXPECT_EQ(c.seq, 5);
  EXPECT_EQ(c.enqueue, 1001900500);
  EXPECT_EQ(by_correlation(l.kernels)[120].category, Category::CommAllToAll);
}

TEST_F(NsysImport, TwoFilesStatingTheSameRankAreRefused) {
  std::string a = fixture();
  std::string b = (dir_ / "copy.sqlite").string();
  fs::copy_file(a, b);
  std::string out = (dir_ / "out.braid").string();
  TraceWriter w(out, TraceWriter::Mode::Create);
  try {
    import_traces(w, {a, b}, TraceFormat::Nsys, {}, stats_);
    FAIL() << "expected a Usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Usage);
    EXPECT_EQ(std::string(e.what()).rfind(b + ": rank 2 was already imported from " + a, 0), 0u)
        << e.what();
  }
  w.abort();
}

TEST_F(NsysImport, SqliteWithoutNsysTablesIsBadFormat) {
  std::string db =
      make_db("other.sqlite", "CREATE TABLE foo(a INTEGER); INSERT INTO foo VALUES (1);");
  std::string out = (dir_ / "out.braid").string();
  TraceWriter w(out, TraceWriter::Mode::Create);
  try {
    import_traces(w, {db}, TraceFormat::Nsys, {}, stats_);
    FAIL() << "expected BadFormat";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::BadFormat);
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(db + ": not an Nsight Systems export (", 0), 0u) << msg;
  }
  w.abort();
}

TEST_F(NsysImport, NonSqliteFileIsBadFormat) {
  std::string path = (dir_ / "trace.sqlite").string();
  std::ofstream(path) << "{\"traceEvents\": []}\n";
  std::string out = (dir_ / "out.braid").string();
  TraceWriter w(out, TraceWriter::Mode::Create);
  try {
    import_traces(w, {path}, TraceFormat::Nsys, {}, stats_);
    FAIL() << "expected BadFormat";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::BadFormat);
    EXPECT_EQ(std::string(e.what()),
              path + ": not an Nsight Systems export (not an SQLite database)");
  }
  w.abort();
}

TEST_F(NsysImport, TruncatedExportIsBadFormatNotACrash) {
  std::string db = fixture();
  fs::resize_file(db, 3 * 4096 + 100);  // keeps the header, loses most pages
  std::string out = (dir_ / "out.braid").string();
  TraceWriter w(out, TraceWriter::Mode::Create);
  try {
    import_traces(w, {db}, TraceFormat::Nsys, {}, stats_);
    FAIL() << "expected BadFormat";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::BadFormat);
    EXPECT_EQ(std::string(e.what()).rfind(db + ": ", 0), 0u) << e.what();
  }
  w.abort();
}

TEST_F(NsysImport, DetectFormatSaysNsysForTheFixture) {
  EXPECT_EQ(detect_format(fixture()), TraceFormat::Nsys);
}

}  // namespace
}  // namespace braid

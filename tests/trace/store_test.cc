// The .braid store: writer/reader round trip, time-window queries, append, atomic output,
// schema version checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "trace/error.h"
#include "trace/reader.h"
#include "trace/schema.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"
#include "trace/writer.h"

namespace braid {
namespace {

using test::TempDir;

Kernel kernel(int32_t rank, int64_t stream, Ns start, Ns end, StrId name) {
  Kernel k;
  k.rank = rank;
  k.stream = stream;
  k.start = start;
  k.end = end;
  k.name = name;
  k.category = Category::Gemm;
  return k;
}

TEST(Store, RoundTripOfEveryTable) {
  TempDir tmp;
  std::string path = tmp.file("a.braid");
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    int64_t run = w.begin_run(RunKind::Captured, "unit", "cupti", "label");
    EXPECT_EQ(run, 1);
    StrId gemm = w.intern("gemm");
    EXPECT_EQ(w.intern("gemm"), gemm);  // interned once
    EXPECT_EQ(w.intern(""), 0u);
    RankInfo ri;
    ri.rank = 1;
    ri.world_size = 2;
    ri.device_name = "H100";
    ri.clock_offset = 42;
    w.add_rank(run, ri);
    w.add_stream(run, {1, 7, true, "compute"});
    w.add_communicator(run, {"pg0", 2, "[0,1]", "default_pg", "nccl"});
    Diagnostic d;
    d.code = "x.dropped";
    d.count = 3;
    w.add_diagnostic(run, d);
    w.add_diagnostic(run, d);  // same code adds up
    w.add_step(run, {1, 4, 100, 200});
    for (int i = 0; i < 20000; ++i) w.add(run, kernel(1, 7, i * 10, i * 10 + 5, gemm));
    Memcpy m;
    m.rank = 1;
    m.kind = MemKind::HtoD;
    m.bytes = 4096;
    m.start = 30;
    m.end = 40;
    w.add(run, m);
    ApiCall a;
    a.rank = 1;
    a.tid = 99;
    a.kind = ApiKind::Runtime;
    a.name = w.intern("cudaLaunchKernel");
    a.correlation = 77;
    w.add(run, a);
    Range rg;
    rg.rank = 1;
    rg.stream = 7;
    rg.on_gpu = true;
    rg.name = w.intern("fwd");
    rg.payload = w.intern("{\"layer\":3}");
    w.add(run, rg);
    Collective c;
    c.rank = 1;
    c.comm = w.intern("pg0");
    c.op = CollOp::ReduceScatter;
    c.bytes = 1 << 20;
    c.seq = 9;
    c.stream = 7;
    c.start = 5;
    c.end = 15;
    w.add(run, c);
    w.commit();
  }
  TraceReader r(path);
  auto runs = r.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].kind, RunKind::Captured);
  EXPECT_EQ(runs[0].backend, "cupti");
  auto ranks = r.ranks(1);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].device_name, "H100");
  EXPECT_EQ(ranks[0].clock_offset, 42);
  EXPECT_EQ(r.streams(1)[0].label, "compute");
  EXPECT_EQ(r.communicators(1)[0].ranks, "[0,1]");
  ASSERT_EQ(r.diagnostics(1).size(), 1u);
  EXPECT_EQ(r.diagnostics(1)[0].count, 6);
  EXPECT_EQ(r.steps(1)[0].step, 4);
  int64_t n = 0;
  r.kernels(1, [&](const Kernel& k) {
    EXPECT_EQ(r.str(k.name), "gemm");
    ++n;
    return true;
  });
  EXPECT_EQ(n, 20000);
  std::vector<Collective> cs;
  r.collectives(1, [&](const Collective& c) {
    cs.push_back(c);
    return true;
  });
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].op, CollOp::ReduceScatter);
  EXPECT_EQ(r.str(cs[0].comm), "pg0");
  EXPECT_EQ(cs[0].seq, 9);
  EXPECT_EQ(r.meta("schema_version"), "1.2");
  std::vector<Memcpy> ms;
  r.memcpys(1, [&](const Memcpy& x) {
    ms.push_back(x);
    return true;
  });
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].kind, MemKind::HtoD);
  EXPECT_EQ(ms[0].bytes, 4096);
  EXPECT_EQ(ms[0].end, 40);
  std::vector<ApiCall> as;
  r.api_calls(1, [&](const ApiCall& x) {
    as.push_back(x);
    return true;
  });
  ASSERT_EQ(as.size(), 1u);
  EXPECT_EQ(as[0].kind, ApiKind::Runtime);
  EXPECT_EQ(as[0].tid, 99);
  EXPECT_EQ(as[0].correlation, 77);
  EXPECT_EQ(r.str(as[0].name), "cudaLaunchKernel");
  std::vector<Range> rs;
  r.ranges(1, [&](const Range& x) {
    rs.push_back(x);
    return true;
  });
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_TRUE(rs[0].on_gpu);
  EXPECT_EQ(r.str(rs[0].name), "fwd");
  EXPECT_EQ(r.str(rs[0].payload), "{\"layer\":3}");
  // The window and matching indexes exist, and the file is left in WAL mode for readers.
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND"
                                " name IN ('kernels_window','memcpys_window','api_calls_window',"
                                "'nvtx_window','collectives_window','collectives_match')"),
            6);
  sql::Stmt jm(r.db(), "PRAGMA journal_mode");
  ASSERT_TRUE(jm.step());
  EXPECT_EQ(jm.text(0), "wal");
}

TEST(Store, TimeWindowQueryReturnsOverlappingEventsInOrder) {
  TempDir tmp;
  std::string path = tmp.file("w.braid");
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    int64_t run = w.begin_run(RunKind::Imported, "unit");
    StrId n = w.intern("k");
    w.add(run, kernel(0, 1, 0, 1000, n));      // long: overlaps everything up to 1000
    w.add(run, kernel(0, 1, 100, 150, n));
    w.add(run, kernel(0, 1, 400, 500, n));
    w.add(run, kernel(0, 1, 600, 700, n));
    w.add(run, kernel(0, 2, 420, 430, n));     // other stream
    w.add(run, kernel(1, 1, 420, 430, n));     // other rank
    w.commit();
  }
  TraceReader r(path);
  std::vector<std::pair<Ns, Ns>> got;
  r.kernels(1, 0, 1, 450, 650, [&](const Kernel& k) {
    got.emplace_back(k.start, k.end);
    return true;
  });
  EXPECT_EQ(got, (std::vector<std::pair<Ns, Ns>>{{0, 1000}, {400, 500}, {600, 700}}));
  got.clear();
  r.kernels(1, 0, 1, 150, 400, [&](const Kernel& k) {  // touching ends do not overlap
    got.emplace_back(k.start, k.end);
    return true;
  });
  EXPECT_EQ(got, (std::vector<std::pair<Ns, Ns>>{{0, 1000}}));
  // Early stop.
  int calls = 0;
  r.kernels(1, 0, 1, 0, 1000, [&](const Kernel&) { return ++calls < 2; });
  EXPECT_EQ(calls, 2);
  // From a time on: the events that start there or later, in start order, of one rank and
  // stream; the first two.
  got.clear();
  r.kernels_from(1, 0, 1, 100, [&](const Kernel& k) {
    got.emplace_back(k.start, k.end);
    return got.size() < 2;
  });
  EXPECT_EQ(got, (std::vector<std::pair<Ns, Ns>>{{100, 150}, {400, 500}}));
  got.clear();
  r.kernels_from(1, 0, 2, INT64_MIN, [&](const Kernel& k) {
    got.emplace_back(k.start, k.end);
    return true;
  });
  EXPECT_EQ(got, (std::vector<std::pair<Ns, Ns>>{{420, 430}}));
}

TEST(Store, AppendAddsARunAndKeepsStrings) {
  TempDir tmp;
  std::string path = tmp.file("a.braid");
  for (int i = 0; i < 2; ++i) {
    TraceWriter w(path, TraceWriter::Mode::Append);
    int64_t run = w.begin_run(RunKind::Imported, "unit");
    EXPECT_EQ(run, i + 1);
    w.add(run, kernel(0, 1, 0, 10, w.intern(i == 0 ? "first" : "second")));
    w.add(run, kernel(0, 1, 10, 20, w.intern("shared")));
    w.commit();
  }
  TraceReader r(path);
  EXPECT_EQ(r.runs().size(), 2u);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM strings WHERE text='shared'"), 1);
  std::vector<std::string> names;
  r.kernels(2, [&](const Kernel& k) {
    names.push_back(r.str(k.name));
    return true;
  });
  EXPECT_EQ(names, (std::vector<std::string>{"second", "shared"}));
}

TEST(Store, AbortOrFailureLeavesTheTargetUntouched) {
  TempDir tmp;
  std::string path = tmp.file("keep.braid");
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    w.add(w.begin_run(RunKind::Imported, "v1"), kernel(0, 1, 0, 10, w.intern("k")));
    w.commit();
  }
  auto size_before = std::filesystem::file_size(path);
  {
    TraceWriter w(path, TraceWriter::Mode::Overwrite);
    w.add(w.begin_run(RunKind::Imported, "v2"), kernel(0, 1, 0, 10, w.intern("k")));
    // destroyed without commit: an interrupted import
  }
  {
    TraceWriter w(path, TraceWriter::Mode::Append);
    w.begin_run(RunKind::Imported, "v3");
    w.abort();
  }
  EXPECT_EQ(std::filesystem::file_size(path), size_before);
  TraceReader r(path);
  ASSERT_EQ(r.runs().size(), 1u);
  EXPECT_EQ(r.runs()[0].source, "v1");
  // No temporary files left behind.
  for (auto& e : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // Create refuses to replace.
  EXPECT_THROW(TraceWriter(path, TraceWriter::Mode::Create), Error);
}

TEST(Store, NewerSchemaAndForeignFilesAreRefused) {
  TempDir tmp;
  std::string path = tmp.file("new.braid");
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    w.begin_run(RunKind::Imported, "x");
    w.commit();
  }
  {
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    sql::exec(db, "UPDATE meta SET value='2.0' WHERE key='schema_version'");
    sqlite3_close(db);
  }
  try {
    TraceReader r(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos);
  }
  // Appending to it is refused too, and the file is not modified.
  EXPECT_THROW(TraceWriter(path, TraceWriter::Mode::Append), Error);

  test::write_file(tmp.file("text.braid"), "this is not sqlite at all, just some text bytes......");
  try {
    TraceReader r(tmp.file("text.braid"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::BadFormat);
    EXPECT_NE(std::string(e.what()).find("not a .braid file"), std::string::npos) << e.what();
  }
  {
    sqlite3* db = nullptr;
    sqlite3_open(tmp.file("other.sqlite").c_str(), &db);
    sql::exec(db, "CREATE TABLE t(x)");
    sqlite3_close(db);
  }
  EXPECT_THROW(TraceReader(tmp.file("other.sqlite")), Error);
  EXPECT_THROW(TraceReader(tmp.file("missing.braid")), Error);
}

// A name id past the 32-bit ids (a corrupt file) is said in one line, not sized for.
TEST(Store, ANameIdPastTheNameIdsIsCorrupt) {
  TempDir tmp;
  const std::string path = tmp.file("ids.braid");
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    w.begin_run(RunKind::Imported, "x");
    w.intern("a kernel");
    w.commit();
  }
  EXPECT_EQ(TraceReader(path).str(1), "a kernel");
  {
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    sql::exec(db, "INSERT INTO strings(id, text) VALUES (1099511627776, 'far')");
    sqlite3_close(db);
  }
  try {
    TraceReader(path).strings();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::BadFormat);
    EXPECT_EQ(std::string(e.what()),
              path + ": a name has id 1099511627776, past the 32-bit name ids");
  }
}

// A rank's rows read whole come in the index's order (stream, start; equal keys in the order
// they were written) however the file holds them. Ranks written one at a time, their streams
// interleaved in time (as an import writes them), are read in the table's order, forwards and
// backwards from the rank's first row in the index; ranks written in batches of one another's
// (a live capture) or in two far blocks are read through the index. Either way, the same rows
// in the same order.
TEST(Store, ARanksRowsComeInTheIndexsOrderHoweverTheFileHoldsThem) {
  TempDir tmp;
  const std::string path = tmp.file("order.braid");
  std::map<int32_t, std::vector<Kernel>> written;  // by rank, in the order written
  int64_t id = 0;
  auto add = [&](TraceWriter& w, int32_t rank, int64_t stream, Ns start) {
    Kernel k = kernel(rank, stream, start, start + 5, 1);
    k.correlation = ++id;  // names the row
    w.add(1, k);
    written[rank].push_back(k);
  };
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    w.begin_run(RunKind::Imported, "x");
    w.intern("k");
    // Rank 0: two streams interleaved in time, with equal starts on one stream (ties).
    for (int i = 0; i < 600; ++i) add(w, 0, i % 3 ? 7 : 3, 1000 + 10 * (i / 2));
    // Ranks 1 and 2: row by row, one another's (the gap never ends a scan: still together).
    for (int i = 0; i < 400; ++i) add(w, 1 + i % 2, 4, 50'000 - 10 * i);
    // Ranks 3 and 4: batches of 300 (more than a scan's gap): through the index.
    for (int i = 0; i < 1200; ++i) add(w, 3 + (i / 300) % 2, 1, 10 * i);
    // Rank 5: 400 rows, 300 of rank 6, then 400 more of rank 5: two blocks, through the index.
    for (int i = 0; i < 1100; ++i) add(w, i >= 400 && i < 700 ? 6 : 5, i % 2, 7 * i);
    // Rank 7: stream 9 first, then stream 2, whose earlier starts put the rank's first row in
    // the index in the middle of its rows: the scan goes backwards for stream 9's.
    for (int i = 0; i < 300; ++i) add(w, 7, 9, 5000 + i);
    for (int i = 0; i < 300; ++i) add(w, 7, 2, 100 + (i * 37) % 300);  // out of start order
    w.commit();
  }
  TraceReader r(path);
  const std::map<int32_t, bool> in_table_order = {{0, true},  {1, true},  {2, true}, {3, false},
                                                  {4, false}, {5, false}, {6, true}, {7, true}};
  for (const auto& [rank, rows] : written) {
    std::vector<Kernel> want = rows;
    std::stable_sort(want.begin(), want.end(), [](const Kernel& a, const Kernel& b) {
      return a.stream != b.stream ? a.stream < b.stream : a.start < b.start;
    });
    const int64_t before = r.rows_read_in_table_order();
    const std::vector<Kernel> got = r.kernels(1, rank);
    ASSERT_EQ(got.size(), want.size()) << "rank " << rank;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i].correlation, want[i].correlation) << "rank " << rank << ", row " << i;
    EXPECT_EQ(r.rows_read_in_table_order() - before,
              in_table_order.at(rank) ? static_cast<int64_t>(got.size()) : 0)
        << "rank " << rank;
  }
  EXPECT_TRUE(r.kernels(1, 8).empty());
}

// A rank's collectives come by start, then stream, then in the order written, read either way;
// its runtime calls alone (of all its API calls), by thread then start.
TEST(Store, ARanksCollectivesComeByStartAndItsRuntimeCallsAlone) {
  TempDir tmp;
  const std::string path = tmp.file("colls.braid");
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    w.begin_run(RunKind::Imported, "x");
    for (int i = 0; i < 40; ++i) {
      Collective c;
      c.rank = 0;
      c.stream = i % 2 ? 5 : 3;
      c.start = 100 * (i / 4);  // four of each start: two per stream
      c.end = c.start + 50;
      c.seq = i;
      c.op = CollOp::AllReduce;
      w.add(1, c);
      ApiCall a;
      a.rank = 0;
      a.tid = i % 2 ? 11 : 10;
      a.start = 1000 - i;
      a.end = a.start + 1;
      a.kind = i % 3 ? ApiKind::Runtime : ApiKind::CpuOp;
      a.correlation = i;
      w.add(1, a);
    }
    w.commit();
  }
  TraceReader r(path);
  std::vector<int64_t> seqs;
  for (const Collective& c : r.collectives(1, 0)) seqs.push_back(c.seq);
  std::vector<int64_t> want;
  for (int s = 0; s < 10; ++s)
    for (int i : {0, 2, 1, 3}) want.push_back(4 * s + i);  // stream 3's two, then stream 5's
  EXPECT_EQ(seqs, want);
  std::vector<int64_t> calls;
  for (const ApiCall& a : r.runtime_calls(1, 0)) calls.push_back(a.correlation);
  std::vector<int64_t> want_calls;
  for (int tid : {10, 11})
    for (int i = 39; i >= 0; --i)
      if (i % 3 && (i % 2 ? 11 : 10) == tid) want_calls.push_back(i);
  EXPECT_EQ(calls, want_calls);
  EXPECT_EQ(r.api_calls(1, 0).size(), 40u);
}

}  // namespace
}  // namespace braid

#include "trace/format.h"
#include "trace/json.h"

namespace braid {
namespace {

TEST(Summary, JsonEscapeKeepsTheOutputValidJson) {
  EXPECT_EQ(json_escape("a\"b\\c\nd\x01"), "a\\\"b\\\\c\\nd\\u0001");
  EXPECT_EQ(json_escape("caf\xc3\xa9"), "caf\xc3\xa9");           // well-formed UTF-8 kept
  EXPECT_EQ(json_escape("x\xff y\xc3"), "x\\ufffd y\\ufffd");     // invalid and truncated bytes
  EXPECT_EQ(json_escape("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");  // a surrogate is not UTF-8
}

}  // namespace
}  // namespace braid

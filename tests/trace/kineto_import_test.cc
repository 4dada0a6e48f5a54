// Kineto importer against the real traces in shared/data/traces and synthetic edge cases.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "trace/error.h"
#include "trace/sqlite_util.h"
#include "trace/summary.h"
#include "trace/test_util.h"
#include "trace/time_range.h"

namespace braid {
namespace {

using test::TempDir;
using test::traces;

const char* kKinetoTraces[] = {
    "hta/tests/data/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta/tests/data/df_index_resolver/df_index_resolver.json.gz",
    "hta/tests/data/nccl_parser_config/nccl_data.json.gz",
    "hta/tests/data/negative_queue_length_values_check/rank0.json.gz",
    "hta/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/tests/data/trace_diff/control/control.json.gz",
    "hta/tests/data/trace_diff/test/test.json.gz",
    "hta/tests/data/trace_filter/sampled_rank-0.json.gz",
    "hta/tests/data/trace_filter/sampled_rank-1.json.gz",
    "tracelens/tests/traces/b200/eager_trace.json.gz",
};

// Per op: (count of collectives with a GPU kernel).
std::map<std::string, int64_t> gpu_collectives_by_op(const TraceReader& r, int64_t run) {
  std::map<std::string, int64_t> out;
  r.collectives(run, [&](const Collective& c) {
    if (c.stream >= 0) out[std::string(to_string(c.op))]++;
    return true;
  });
  return out;
}

class KinetoRealTrace : public ::testing::TestWithParam<const char*> {};

TEST_P(KinetoRealTrace, CountsMatchAnIndependentCount) {
  TempDir tmp;
  std::string path = traces(GetParam());
  auto expect = test::count_kineto(path);
  int64_t run = test::import_files({path}, tmp.file("t.braid"));
  TraceReader r(tmp.file("t.braid"));
  auto s = summarize(r);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].run.run_id, run);
  EXPECT_EQ(s[0].kernels, expect.kernels);
  EXPECT_EQ(s[0].memcpys, expect.memcpys);
  EXPECT_EQ(s[0].memsets, expect.memsets);
  EXPECT_EQ(s[0].api_calls, expect.api);
  EXPECT_EQ(s[0].ranges, expect.ranges);
  EXPECT_EQ(s[0].steps, static_cast<int64_t>(expect.steps.size()));
  // Every NCCL kernel becomes exactly one collective with a GPU stream.
  int64_t gpu_colls = 0;
  for (auto& [op, n] : gpu_collectives_by_op(r, run)) gpu_colls += n;
  EXPECT_EQ(gpu_colls, expect.nccl_kernels);
  int64_t comm_kernels = 0;
  for (auto& [cat, n] : s[0].kernels_by_category)
    if (cat.rfind("comm.", 0) == 0) comm_kernels += n;
  EXPECT_EQ(comm_kernels, expect.nccl_kernels);
}

INSTANTIATE_TEST_SUITE_P(AllKinetoTraces, KinetoRealTrace, ::testing::ValuesIn(kKinetoTraces));

TEST(KinetoImport, NcclDataCollectivesCarryTheirSizes) {
  // MANIFEST: 15 AllReduce (float nelems 2049000, 2431040, 6563840, 6637568, 7875584) and
  // 6 Broadcast (Float 53120, Long 53) on PG "0" of 2 ranks, NCCL 2.17.1.
  TempDir tmp;
  int64_t run = test::import_files({traces("hta/tests/data/nccl_parser_config/nccl_data.json.gz")},
                                   tmp.file("n.braid"));
  TraceReader r(tmp.file("n.braid"));
  std::multiset<int64_t> ar_bytes, bc_bytes;
  r.collectives(run, [&](const Collective& c) {
    if (c.stream < 0) return true;
    EXPECT_EQ(r.str(c.comm), "0");
    EXPECT_EQ(c.group_size, 2);
    EXPECT_GT(c.enqueue, 0);
    EXPECT_LE(c.enqueue, c.start);
    if (c.op == CollOp::AllReduce) {
      EXPECT_EQ(r.str(c.dtype), "float32");
      EXPECT_EQ(r.str(c.algo), "RING");
      EXPECT_EQ(r.str(c.proto), "LL");
      ar_bytes.insert(c.bytes);
    } else if (c.op == CollOp::Broadcast) {
      bc_bytes.insert(c.bytes);
    } else {
      ADD_FAILURE() << "unexpected op " << to_string(c.op);
    }
    return true;
  });
  EXPECT_EQ(ar_bytes.size(), 15u);
  EXPECT_EQ(bc_bytes.size(), 6u);
  std::set<int64_t> ar_sizes(ar_bytes.begin(), ar_bytes.end());
  EXPECT_EQ(ar_sizes, (std::set<int64_t>{2049000 * 4, 2431040 * 4, 6563840 * 4, 6637568 * 4,
                                         7875584 * 4}));
  std::set<int64_t> bc_sizes(bc_bytes.begin(), bc_bytes.end());
  EXPECT_EQ(bc_sizes, (std::set<int64_t>{53120 * 4, 53 * 8}));
  auto ranks = r.ranks(run);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].world_size, 2);
  EXPECT_EQ(ranks[0].nccl_version, "2.17.1");
  EXPECT_EQ(ranks[0].device_name, "NVIDIA A100-PG509-200");
}

TEST(KinetoImport, SendRecvKernelsTakeTheirOperationFromTheCpuOp) {
  // negative_queue_length_values_check: 80 SendRecv kernels under nccl:all_to_all (45),
  // _reduce_scatter_base, _all_gather_base, all_reduce (10 each); 5 launch outside any
  // communication op (their CPU side is outside the sampled window) and stay "sendrecv".
  TempDir tmp;
  int64_t run = test::import_files(
      {traces("hta/tests/data/negative_queue_length_values_check/rank0.json.gz")},
      tmp.file("q.braid"));
  TraceReader r(tmp.file("q.braid"));
  auto ops = gpu_collectives_by_op(r, run);
  EXPECT_EQ(ops["alltoall"], 45);
  EXPECT_EQ(ops["reducescatter"], 10);
  EXPECT_EQ(ops["allgather"], 10);
  EXPECT_EQ(ops["allreduce"], 10);
  EXPECT_EQ(ops["sendrecv"], 5);
  // The kernels' categories follow: unresolved ones stay comm.sendrecv.
  auto by_cat = summarize(r)[0].kernels_by_category;
  EXPECT_EQ(by_cat["comm.alltoall"], 45);
  EXPECT_EQ(by_cat["comm.reducescatter"], 10);
  EXPECT_EQ(by_cat["comm.allgather"], 10);
  EXPECT_EQ(by_cat["comm.allreduce"], 10);
  EXPECT_EQ(by_cat["comm.sendrecv"], 5);
}

TEST(KinetoImport, OldKernelSignatureForm) {
  // trace_diff/control: `(ncclWorkElem)` signatures; 42 SendRecv under nccl:all_to_all, 18 AllReduce.
  TempDir tmp;
  int64_t run = test::import_files({traces("hta/tests/data/trace_diff/control/control.json.gz")},
                                   tmp.file("c.braid"));
  TraceReader r(tmp.file("c.braid"));
  auto ops = gpu_collectives_by_op(r, run);
  EXPECT_EQ(ops["alltoall"], 42);
  EXPECT_EQ(ops["allreduce"], 18);
  EXPECT_EQ(r.ranks(run)[0].rank, 3);
  EXPECT_EQ(r.ranks(run)[0].world_size, 8);
}

TEST(KinetoImport, NewDevKernelFormWithMetadata) {
  // tracelens b200: one ncclDevKernel_AllGather_RING_LL, _allgather_base BFloat16 in 25136 ->
  // out 201088, group 8, PG "3"; 71 process groups in pg_config.
  TempDir tmp;
  int64_t run = test::import_files({traces("tracelens/tests/traces/b200/eager_trace.json.gz")},
                                   tmp.file("b.braid"));
  TraceReader r(tmp.file("b.braid"));
  std::vector<Collective> colls;
  r.collectives(run, [&](const Collective& c) {
    colls.push_back(c);
    return true;
  });
  ASSERT_EQ(colls.size(), 1u);
  const auto& c = colls[0];
  EXPECT_EQ(c.op, CollOp::AllGather);
  EXPECT_EQ(c.in_count, 25136);
  EXPECT_EQ(c.out_count, 201088);
  EXPECT_EQ(c.bytes, 201088 * 2);
  EXPECT_EQ(r.str(c.dtype), "bfloat16");
  EXPECT_EQ(r.str(c.comm), "3");
  EXPECT_EQ(c.group_size, 8);
  EXPECT_EQ(r.str(c.algo), "RING");
  EXPECT_EQ(r.str(c.proto), "LL");
  // ts 1365627949863.953 us after baseTimeNanoseconds 1767189312000000000.
  EXPECT_EQ(c.start, 1767189312000000000LL + 1365627949863953LL);
  EXPECT_EQ(c.end - c.start, 21953);
  // pg_config lists the 15 groups this rank belongs to (pg_count says 71 in the whole job).
  EXPECT_EQ(r.communicators(run).size(), 15u);
  EXPECT_EQ(r.ranks(run)[0].nccl_version, "2.27.5");
}

TEST(KinetoImport, FractionalMicrosecondsLandAsExactNanoseconds) {
  // ns_resolution_trace: displayTimeUnit "ns", ts in µs with 3 decimals and no time base.
  TempDir tmp;
  std::string path = traces("hta/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
  int64_t run = test::import_files({path}, tmp.file("ns.braid"));
  TraceReader r(tmp.file("ns.braid"));
  // Independently: cut the ts/dur digits of every kernel event out of the JSON text and convert
  // them by string surgery (no floating point anywhere).
  std::string text = test::gunzip_file(path);
  auto ns_of = [](const std::string& s) {
    auto dot = s.find('.');
    std::string whole = dot == std::string::npos ? s : s.substr(0, dot);
    std::string frac = dot == std::string::npos ? "" : s.substr(dot + 1);
    frac = (frac + "000").substr(0, 3);
    return std::stoll(whole) * 1000 + std::stoll(frac);
  };
  auto number_after = [&](size_t from, const char* key) {
    size_t k = text.find(key, from) + std::strlen(key);
    size_t e = text.find_first_not_of("0123456789.", k);
    return text.substr(k, e - k);
  };
  std::set<std::pair<int64_t, int64_t>> expected;
  for (size_t at = text.find("\"cat\": \"kernel\""); at != std::string::npos;
       at = text.find("\"cat\": \"kernel\"", at + 1))
    expected.insert({ns_of(number_after(at, "\"ts\": ")), ns_of(number_after(at, "\"dur\": "))});
  std::set<std::pair<int64_t, int64_t>> got;
  r.kernels(run, [&](const Kernel& k) {
    got.insert({k.start, k.end - k.start});
    return true;
  });
  EXPECT_EQ(got, expected);
  EXPECT_EQ(got.size(), 4350u);
  // World size 1: NCCL launched nothing; the collectives come from record_param_comms.
  auto ops = std::map<std::string, int64_t>{};
  r.collectives(run, [&](const Collective& c) {
    EXPECT_EQ(c.stream, -1);
    ops[std::string(to_string(c.op))]++;
    return true;
  });
  EXPECT_EQ(ops["allreduce"], 25);
  EXPECT_EQ(ops["broadcast"], 10);
}

TEST(KinetoImport, TwoRanksOfOneJobMakeOneRun) {
  TempDir tmp;
  int64_t run = test::import_files({traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz"),
                                    traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz")},
                                   tmp.file("j.braid"));
  TraceReader r(tmp.file("j.braid"));
  auto ranks = r.ranks(run);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].rank, 0);
  EXPECT_EQ(ranks[1].rank, 1);
  EXPECT_EQ(ranks[1].world_size, 128);
  auto ops = gpu_collectives_by_op(r, run);
  // Per rank: 4 all_to_all, 4 all_reduce, 2 _all_gather_base, all as SendRecv kernels.
  EXPECT_EQ(ops["alltoall"], 8);
  EXPECT_EQ(ops["allreduce"], 8);
  EXPECT_EQ(ops["allgather"], 4);
  auto k0 = test::count_kineto(traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz"));
  auto k1 = test::count_kineto(traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz"));
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels WHERE rank=0"), k0.kernels);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels WHERE rank=1"), k1.kernels);
}

// An import writes a rank at a time, so a reader that holds one rank at a time (braid-view's
// loader, the streamed analysis) reads each rank's rows in the table's order, not through the
// index, and gets them in the index's order all the same: HTA's real two-rank trace.
TEST(KinetoImport, EachImportedRanksRowsAreReadInTheTablesOrder) {
  TempDir tmp;
  const std::string path = tmp.file("j.braid");
  int64_t run = test::import_files({traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz"),
                                    traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz")},
                                   path);
  TraceReader r(path);
  int64_t total = 0;
  for (int32_t rank : {0, 1}) {
    auto ids = [&](const char* table, const char* lane) {
      std::vector<int64_t> v;
      sql::Stmt q(r.db(), std::string("SELECT correlation FROM ") + table +
                              " WHERE run_id = ? AND rank = ? ORDER BY " + lane +
                              ", start_ns, rowid");
      q.bind(1, run);
      q.bind(2, rank);
      while (q.step()) v.push_back(q.i64(0));
      return v;
    };
    const int64_t before = r.rows_read_in_table_order();
    const std::vector<Kernel> kernels = r.kernels(run, rank);
    const std::vector<Memcpy> memcpys = r.memcpys(run, rank);
    const std::vector<ApiCall> calls = r.api_calls(run, rank);
    std::vector<int64_t> got;
    for (const Kernel& k : kernels) got.push_back(k.correlation);
    EXPECT_EQ(got, ids("kernels", "stream")) << "rank " << rank;
    got.clear();
    for (const Memcpy& m : memcpys) got.push_back(m.correlation);
    EXPECT_EQ(got, ids("memcpys", "stream")) << "rank " << rank;
    got.clear();
    for (const ApiCall& a : calls) got.push_back(a.correlation);
    EXPECT_EQ(got, ids("api_calls", "tid")) << "rank " << rank;
    const auto rows = static_cast<int64_t>(kernels.size() + memcpys.size() + calls.size());
    EXPECT_GT(kernels.size(), 1000u) << "rank " << rank;
    EXPECT_EQ(r.rows_read_in_table_order() - before, rows) << "rank " << rank;
    total += rows;
  }
  EXPECT_EQ(total, sql::scalar(r.db(),
                               "SELECT (SELECT COUNT(*) FROM kernels) + (SELECT COUNT(*) "
                               "FROM memcpys) + (SELECT COUNT(*) FROM api_calls)"));
}

TEST(KinetoImport, SameRankTwiceIsRefused) {
  TempDir tmp;
  auto f = traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz");
  try {
    test::import_files({f, f}, tmp.file("x.braid"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Usage);
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("x.braid")));
}

// ---- synthetic inputs with known answers ----

std::string event(const char* cat, const char* name, const char* ts, const char* dur,
                  const char* args = "{}") {
  return std::string("{\"ph\":\"X\",\"cat\":\"") + cat + "\",\"name\":\"" + name +
         "\",\"pid\":0,\"tid\":7,\"ts\":" + ts + ",\"dur\":" + dur + ",\"args\":" + args + "}";
}

// The rank and the time base given after traceEvents: read from the tail of a plain file, and
// applied in SQL after loading for a gzip stream, which cannot be read from the end.
void expect_late_rank_and_base(bool gzip) {
  TempDir tmp;
  std::string json = "{\"traceEvents\":[" +
                     event("kernel", "gemm_kernel", "10.5", "2", "{\"stream\":7,\"correlation\":1}") +
                     "," + event("cpu_op", "aten::mm", "9", "1.25") +
                     "],\"distributedInfo\":{\"rank\":5,\"world_size\":8},"
                     "\"baseTimeNanoseconds\":1000000000000}";
  std::string path = tmp.file(gzip ? "late.json.gz" : "late.json");
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, json.data(), static_cast<unsigned>(json.size()));
    gzclose(f);
  } else {
    test::write_file(path, json);
  }
  int64_t run = test::import_files({path}, tmp.file("late.braid"));
  TraceReader r(tmp.file("late.braid"));
  std::vector<Kernel> ks;
  r.kernels(run, [&](const Kernel& k) {
    ks.push_back(k);
    return true;
  });
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].rank, 5);
  EXPECT_EQ(ks[0].start, 1000000000000LL + 10500);
  EXPECT_EQ(ks[0].end, 1000000000000LL + 12500);
  EXPECT_EQ(ks[0].category, Category::Gemm);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT start_ns FROM api_calls WHERE rank=5"), 1000000000000LL + 9000);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM api_calls WHERE rank<>5"), 0);
  bool shifted = false;
  for (auto& d : r.diagnostics(run)) shifted |= d.code == "kineto.late_time_base";
  EXPECT_EQ(shifted, gzip);  // a plain file's tail gives the base before any event is written
}

TEST(KinetoImport, LateRankAndTimeBaseAreApplied) { expect_late_rank_and_base(false); }
TEST(KinetoImport, LateRankAndTimeBaseAreAppliedThroughGzip) { expect_late_rank_and_base(true); }

TEST(KinetoImport, TimestampForms) {
  TempDir tmp;
  // Integer µs, fractional µs, more than 3 decimals (rounded), exponent, negative duration.
  std::string json = "[" + event("kernel", "k1", "1700000000000000", "3") + "," +
                     event("kernel", "k2", "1700000000000000.001", "0.5") + "," +
                     event("kernel", "k3", "12.34567", "1.0004") + "," +
                     event("kernel", "k4", "1.5e3", "2") + "," +
                     event("kernel", "k5", "100", "-4") + "]";
  test::write_file(tmp.file("ts.json"), json);
  int64_t run = test::import_files({tmp.file("ts.json")}, tmp.file("ts.braid"));
  TraceReader r(tmp.file("ts.braid"));
  std::map<std::string, std::pair<int64_t, int64_t>> got;
  r.kernels(run, [&](const Kernel& k) {
    got[r.str(k.name)] = {k.start, k.end - k.start};
    return true;
  });
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(got["k1"], P(1700000000000000000, 3000));
  EXPECT_EQ(got["k2"], P(1700000000000000001, 500));
  EXPECT_EQ(got["k3"], P(12346, 1000));
  EXPECT_EQ(got["k4"], P(1500000, 2000));
  EXPECT_EQ(got["k5"], P(100000, 0));
  bool negative_noted = false;
  for (auto& d : r.diagnostics(run)) negative_noted |= d.code == "kineto.negative_duration" && d.count == 1;
  EXPECT_TRUE(negative_noted);
}

TEST(KinetoImport, EscapedNamesAndLargeEventsSurviveBatching) {
  TempDir tmp;
  std::string big_name(200000, 'x');  // one event far larger than the scanner's first window
  std::string json = "{\"traceEvents\":[";
  for (int i = 0; i < 20000; ++i) {
    if (i) json += ",\n";
    json += event("kernel", i == 7 ? "we\\\"ird \\\\ name [x] {y}" : "elementwise_kernel",
                  std::to_string(i).c_str(), "1");
  }
  json += "," + event("kernel", big_name.c_str(), "30000", "1") + "]}";
  test::write_file(tmp.file("b.json"), json);
  int64_t run = test::import_files({tmp.file("b.json")}, tmp.file("b.braid"));
  TraceReader r(tmp.file("b.braid"));
  int64_t n = 0;
  bool weird = false, big = false;
  r.kernels(run, [&](const Kernel& k) {
    ++n;
    weird |= r.str(k.name) == "we\"ird \\ name [x] {y}";
    big |= r.str(k.name) == big_name;
    return true;
  });
  EXPECT_EQ(n, 20001);
  EXPECT_TRUE(weird);
  EXPECT_TRUE(big);
}

// Times that cannot be times (overflowing the int64 ns a file stores, over 130 years from the
// clock's origin either way)
// are skipped and counted, never stored; found by fuzzing (issue 23), each case below was
// stored as garbage before.
TEST(KinetoImport, TimesThatAreNotTimesAreSkippedAndCounted) {
  TempDir tmp;
  std::string json = "[" + event("kernel", "good", "1700000000000000", "3") + "," +
                     event("kernel", "exp_huge", "1e30", "1") + "," +         // double -> int64
                     event("kernel", "near_max", "9200000000000000", "1") + "," +  // after 2100
                     event("kernel", "sum_overflows", "9000000000000000", "9000000000000000") +
                     "," + event("kernel", "before_1840", "-4200000000000000", "1") + "," +
                     event("kernel", "exp_inf", "1e400", "1") + "," +
                     event("kernel", "dur_exp_huge", "10", "-1e300") + "]";
  test::write_file(tmp.file("t.json"), json);
  int64_t run = test::import_files({tmp.file("t.json")}, tmp.file("t.braid"));
  TraceReader r(tmp.file("t.braid"));
  std::vector<std::string> names;
  r.kernels(run, [&](const Kernel& k) {
    names.push_back(r.str(k.name));
    EXPECT_TRUE(valid_span(k.start, k.end)) << r.str(k.name);
    return true;
  });
  EXPECT_EQ(names, std::vector<std::string>{"good"});
  int64_t bad_time = 0, malformed = 0;
  for (auto& d : r.diagnostics(run)) {
    if (d.code == "kineto.bad_time") bad_time = d.count;
    if (d.code == "kineto.malformed_event") malformed = d.count;
  }
  // 1e30, 1e400 and -1e300 do not parse as a time in ns (malformed); the others parse and are
  // over 130 years from the origin or overflow when added.
  EXPECT_EQ(bad_time, 3);
  EXPECT_EQ(malformed, 3);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels WHERE start_ns < -4102444800000000000 "
                                "OR end_ns < start_ns OR end_ns > 4102444800000000000"),
            0);
}

// A time base learnt after the events (a gzip stream) that would move them past 2100 refuses
// the file; nothing is written.
TEST(KinetoImport, LateTimeBaseOutsideTheRangeIsRefused) {
  TempDir tmp;
  std::string json = "{\"traceEvents\":[" + event("kernel", "k", "10.5", "2") +
                     "],\"baseTimeNanoseconds\":9000000000000000000}";
  std::string path = tmp.file("late.json.gz");
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, json.data(), static_cast<unsigned>(json.size()));
  gzclose(f);
  try {
    test::import_files({path}, tmp.file("late.braid"));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a time"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("late.braid")));
}

void expect_bad(const std::string& content, ErrorCode code, const std::string& needle) {
  TempDir tmp;
  test::write_file(tmp.file("bad.json"), content);
  try {
    test::import_files({tmp.file("bad.json")}, tmp.file("bad.braid"), TraceFormat::Kineto);
    ADD_FAILURE() << "expected an error for: " << content.substr(0, 80);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    std::string msg = e.what();
    EXPECT_NE(msg.find(tmp.file("bad.json")), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("bad.braid")));
}

TEST(KinetoImport, BadInputGetsAClearError) {
  expect_bad("", ErrorCode::Empty, "empty");
  expect_bad("{\"traceEvents\":[]}", ErrorCode::Empty, "no trace events");
  expect_bad("{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1", ErrorCode::BadFormat, "truncated");
  expect_bad("{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1 \"dur\":2}]}", ErrorCode::BadFormat, "malformed");
  expect_bad("{\"traceEvents\":[{\"ph\":\"X\",ts:1}]}", ErrorCode::BadFormat, "malformed");
  expect_bad("{\"schemaVersion\":1}", ErrorCode::BadFormat, "no \"traceEvents\"");
  expect_bad("hello", ErrorCode::BadFormat, "not JSON");
  expect_bad("{\"traceEvents\":{}}", ErrorCode::BadFormat, "not an array");
}

TEST(KinetoImport, TruncatedGzipIsReported) {
  TempDir tmp;
  std::string gz;
  {
    FILE* f = std::fopen(traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz").c_str(), "rb");
    ASSERT_NE(f, nullptr) << "shared traces not found under " << BRAID_TRACES_DIR;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) gz.append(buf, n);
    std::fclose(f);
  }
  test::write_file(tmp.file("cut.json.gz"), gz.substr(0, gz.size() / 2));
  try {
    test::import_files({tmp.file("cut.json.gz")}, tmp.file("cut.braid"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::BadFormat);
    EXPECT_NE(std::string(e.what()).find("truncated gzip"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("cut.braid")));
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

TEST(KinetoImport, ProgressCoversAllFilesInOrder) {
  TempDir tmp;
  std::vector<std::string> files = {traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz"),
                                    traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz")};
  uint64_t total = std::filesystem::file_size(files[0]) + std::filesystem::file_size(files[1]);
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  TraceWriter w(tmp.file("p.braid"), TraceWriter::Mode::Create);
  ImportOptions opts;
  opts.progress = [&](uint64_t done, uint64_t all) { calls.emplace_back(done, all); };
  ImportStats stats;
  import_traces(w, files, TraceFormat::Kineto, opts, stats);
  w.commit();
  ASSERT_FALSE(calls.empty());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, total);
    EXPECT_LE(calls[i].first, total);
    if (i) {
      EXPECT_GE(calls[i].first, calls[i - 1].first) << "progress went backwards at " << i;
    }
  }
  EXPECT_EQ(calls.back().first, total);
}

}  // namespace
}  // namespace braid

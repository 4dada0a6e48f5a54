// Legacy autograd-profiler traces (PyTorch without Kineto) on the fixture in
// tests/data/legacy_gloo (made by its make_traces.py with Debian's python3-torch: 3 gloo ranks,
// 4 steps, rank 2 sleeps 30 ms before its all-reduce in step 2): import, host collectives matched
// across ranks, the planted straggler found; and imports that would store nothing refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>

#include "analysis/analyze.h"
#include "trace/error.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::analysis {
namespace {

using ::testing::HasSubstr;

std::string fixture(int r) {
  return std::string(BRAID_TEST_DATA_DIR) + "/legacy_gloo/rank-" + std::to_string(r) + ".json";
}

// What a file holds, read here without the importer.
struct Counts {
  int64_t complete = 0, calls = 0, gloo = 0;
  std::set<int64_t> steps;
};
Counts count(const std::string& path) {
  std::string text = test::slurp(path);
  simdjson::dom::parser p;
  Counts c;
  for (auto e : p.parse(text).get_array()) {
    std::string_view ph, name;
    if (e["ph"].get_string().get(ph) || ph != "X" || e["name"].get_string().get(name)) continue;
    ++c.complete;
    if (name.rfind("c10d::", 0) == 0) ++c.calls;
    if (name.rfind("gloo:", 0) == 0) ++c.gloo;
    if (name.rfind("ProfilerStep#", 0) == 0)
      c.steps.insert(std::atoll(std::string(name.substr(13)).c_str()));
  }
  return c;
}

TEST(LegacyImport, RankFromFileName) {
  EXPECT_EQ(rank_from_file_name("/x/rank-3.json"), 3);
  EXPECT_EQ(rank_from_file_name("trace_rank12.json.gz"), 12);
  EXPECT_EQ(rank_from_file_name("job7_worker_2.json"), 2);
  EXPECT_EQ(rank_from_file_name("host4-5.json"), 5);
  EXPECT_EQ(rank_from_file_name("trace.json"), std::nullopt);
}

TEST(LegacyImport, ThreadsStepsAndHostCollectives) {
  test::TempDir tmp;
  std::vector<std::string> files = {fixture(0), fixture(1), fixture(2)};
  EXPECT_EQ(detect_format(files[0]), TraceFormat::Legacy);
  int64_t run = test::import_files(files, tmp.file("j.braid"));
  TraceReader r(tmp.file("j.braid"));
  auto ranks = r.ranks(run);
  ASSERT_EQ(ranks.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    Counts c = count(files[k]);
    ASSERT_GT(c.calls, 0);
    EXPECT_EQ(c.calls, c.gloo);
    EXPECT_EQ(ranks[k].rank, k);
    EXPECT_EQ(ranks[k].backend, "gloo");
    std::string where = " WHERE run_id=" + std::to_string(run) + " AND rank=" + std::to_string(k);
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM api_calls" + where), c.complete);
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM collectives" + where), c.calls);
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM steps" + where),
              static_cast<int64_t>(c.steps.size()));
    EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM streams" + where + " AND gpu=0"),
              3);  // main + 2 gloo
  }
  // --rank overrides the names.
  TraceWriter w(tmp.file("k.braid"), TraceWriter::Mode::Create);
  ImportOptions opts;
  opts.ranks = {5, 6, 7};
  ImportStats stats;
  int64_t run2 = import_traces(w, files, TraceFormat::Auto, opts, stats);
  w.commit();
  TraceReader r2(tmp.file("k.braid"));
  std::vector<int32_t> got;
  for (const RankInfo& i : r2.ranks(run2)) got.push_back(i.rank);
  EXPECT_EQ(got, (std::vector<int32_t>{5, 6, 7}));
}

TEST(LegacyImport, StragglerIsTheLateRankOfItsStep) {
  test::TempDir tmp;
  test::import_files({fixture(0), fixture(1), fixture(2)}, tmp.file("j.braid"));
  TraceReader r(tmp.file("j.braid"));
  Analysis a = analyze(r);
  // Every collective (a broadcast and 4 all-reduces) matched on all 3 ranks.
  ASSERT_EQ(a.match.groups.size(), 5u);
  EXPECT_EQ(a.match.unmatched, 0);
  EXPECT_EQ(a.match.mismatched, 0);
  int seen = 0;
  for (const CollectiveMetrics& c : a.metrics.collectives) {
    EXPECT_TRUE(c.complete);
    EXPECT_EQ(c.members.size(), 3u);
    EXPECT_EQ(c.transfer_ns + c.wait_ns, c.end - c.first_arrival);
    if (c.step == 2) {
      ++seen;
      EXPECT_EQ(c.op, CollOp::AllReduce);
      EXPECT_EQ(c.late_rank, 2);
      EXPECT_GT(c.wait_ns, 25'000'000);  // the 30 ms sleep, less the others' own delays
    } else {
      EXPECT_LT(c.wait_ns, 25'000'000);
    }
  }
  EXPECT_EQ(seen, 1);
  // The critical path of step 2 goes through the all-reduce and names the straggler.
  bool found = false;
  for (const CriticalPath& p : a.paths) {
    if (p.step != 2) continue;
    for (const PathSegment& s : p.chain)
      if (s.kind == SegmentKind::Collective && s.late_rank == 2) found = true;
    EXPECT_GT(p.length(), 25'000'000);
  }
  EXPECT_TRUE(found);
  EXPECT_THAT(report_text(a), HasSubstr("last to arrive:"));
}

// docs/import-kineto.md's commands, as a user runs them.
TEST(LegacyImport, DocCommands) {
  test::TempDir tmp;
  test::CliResult i = test::run_braid(tmp, "import " + fixture(0) + " " + fixture(1) + " " +
                                               fixture(2) + " -o " + tmp.file("cpu.braid"));
  ASSERT_EQ(i.code, 0) << i.err;
  test::CliResult a = test::run_braid(tmp, "analyze " + tmp.file("cpu.braid"));
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_THAT(a.out, HasSubstr("matched 5 groups; 0 unmatched, 0 mismatched"));
  // Step 2's path: rank 2's host work (the planted sleep), then the all-reduce it was late for.
  size_t p2 = a.out.find("critical path of step 2");
  ASSERT_NE(p2, std::string::npos) << a.out;
  std::string path = a.out.substr(p2, a.out.find("critical path of step 3") - p2);
  EXPECT_THAT(path, HasSubstr("rank 2"));
  EXPECT_THAT(path, HasSubstr("host work"));
  EXPECT_THAT(path, HasSubstr("(last arrival: rank 2)"));
}

TEST(LegacyImport, ImportThatStoresNothingIsAnError) {
  test::TempDir tmp;
  // The fixture read as Kineto: nothing has a cat.
  test::CliResult k =
      test::run_braid(tmp, "import --format kineto " + fixture(0) + " -o " + tmp.file("k.braid"));
  EXPECT_NE(k.code, 0);
  Counts c = count(fixture(0));
  EXPECT_THAT(
      k.err, HasSubstr(fixture(0) + ": 0 of " + std::to_string(c.complete) + " events recognized"));
  EXPECT_THAT(k.err, HasSubstr("no cat field; is this a legacy profiler trace?"));
  EXPECT_FALSE(std::filesystem::exists(tmp.file("k.braid")));
  // Events without cat that do not say "CPU functions" either: auto-detected as Kineto, refused.
  test::write_file(tmp.file("x.json"), R"([{"name":"a","ph":"X","ts":1,"dur":2,"pid":1,"tid":1}])");
  test::CliResult x =
      test::run_braid(tmp, "import " + tmp.file("x.json") + " -o " + tmp.file("x.braid"));
  EXPECT_NE(x.code, 0);
  EXPECT_THAT(x.err, HasSubstr(tmp.file("x.json") + ": 0 of 1 events recognized"));
  EXPECT_FALSE(std::filesystem::exists(tmp.file("x.braid")));
  // A legacy file with no complete event.
  test::write_file(tmp.file("rank-0.json"),
                   R"([{"name":"a","ph":"i","ts":1,"pid":"CPU functions","tid":1}])");
  test::CliResult l =
      test::run_braid(tmp, "import " + tmp.file("rank-0.json") + " -o " + tmp.file("l.braid"));
  EXPECT_NE(l.code, 0);
  EXPECT_THAT(l.err, HasSubstr(tmp.file("rank-0.json") + ": 0 of 1 events recognized"));
  EXPECT_FALSE(std::filesystem::exists(tmp.file("l.braid")));
}

}  // namespace
}  // namespace braid::analysis

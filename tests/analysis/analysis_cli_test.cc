// `braid analyze` and `braid merge` as a user runs them, on synthetic jobs with known answers:
// per-process files merged with their planted clock skews recovered, the straggler named in the
// report, results stored in the file, and the errors a user can make.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "analysis/synthetic.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::analysis {
namespace {

using ::testing::HasSubstr;
using test::TempDir;




TEST(AnalysisCli, MergePerRankFilesThenAnalyze) {
  TempDir tmp;
  SyntheticJob job;
  job.clock_skew = {0, 12'345'678, -37'123, 250};  // ns, per rank
  std::string inputs;
  for (int r = 0; r < job.nranks; ++r) {
    SyntheticJob one = job;
    one.only_ranks = {r};
    std::string f = tmp.file("rank" + std::to_string(r) + ".braid");
    write_synthetic_job(f, one);
    inputs += " " + f;
  }
  std::string merged = tmp.file("job.braid");
  test::CliResult m = test::run_braid(tmp, "merge" + inputs + " -o " + merged);
  ASSERT_EQ(m.code, 0) << m.err;
  {
    TraceReader r(merged);
    sql::Stmt s(r.db(), "SELECT rank, clock_offset_ns FROM ranks ORDER BY rank");
    std::vector<int64_t> off;
    while (s.step()) off.push_back(s.i64(1));
    ASSERT_EQ(off.size(), size_t(job.nranks));
    // Rank r records true time + skew[r]: relative to rank 0 its offset is -(skew[r] - skew[0]),
    // recovered within 1 us.
    for (int k = 1; k < job.nranks; ++k)
      EXPECT_NEAR(double(off[k] - off[0]), double(-(job.clock_skew[k] - job.clock_skew[0])), 1000.0)
          << "rank " << k;
  }
  // Merging a rank twice is refused and the existing output is left alone.
  auto before = test::slurp(merged);
  test::CliResult dup = test::run_braid(tmp, "merge" + inputs + " " + tmp.file("rank1.braid") + " -o " + merged);
  EXPECT_NE(dup.code, 0);
  EXPECT_THAT(dup.err, HasSubstr("braid: error: "));
  EXPECT_EQ(test::slurp(merged), before);

  test::CliResult a = test::run_braid(tmp, "analyze " + merged + " --json");
  ASSERT_EQ(a.code, 0) << a.err;
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_EQ(p.parse(a.out).get(doc), simdjson::SUCCESS) << a.out.substr(0, 400);
  EXPECT_THAT(a.out, HasSubstr("\"late_rank\":3"));  // the planted straggler
  test::CliResult text = test::run_braid(tmp, "analyze " + merged);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("rank 3"));
  {
    TraceReader r(merged);
    EXPECT_GT(sql::scalar(r.db(), "SELECT COUNT(*) FROM analysis_collectives"), 0);
    EXPECT_GT(sql::scalar(r.db(), "SELECT COUNT(*) FROM analysis_ranks"), 0);
  }
}

// `braid analyze` of `files` (one per rank) by one process and by `mpirun -np np`: the same
// --json report to the byte; returns it.
std::string same_under_mpirun(const TempDir& tmp, const std::string& files, int np) {
  test::CliResult one = test::run_braid(tmp, "analyze" + files + " --json --no-store");
  EXPECT_EQ(one.code, 0) << one.err;
  const std::string out = tmp.file("mpi.json"), err = tmp.file("mpi.err");
  const int st = std::system(
      (test::mpirun(np) + " analyze" + files + " --json --no-store >" + out + " 2>" + err).c_str());
  EXPECT_EQ(st, 0) << test::slurp(err);
  EXPECT_EQ(test::slurp(out), one.out) << np << " processes";
  return one.out;
}

// A real 8-rank gloo job (tests/data/gloo_straggler) imported one file per rank, analyzed by one
// process and by `mpirun -np 4`: the same report to the byte, and each process stores the job's
// results into the files it loaded. Then two ranks of a real GPU job (HTA's sampled 128-rank
// trace: NCCL kernels, critical paths of over a hundred segments) at -np 2.
TEST(AnalysisCli, PerRankFilesUnderMpirunGiveWhatOneProcessGives) {
  if (!test::have_mpirun()) GTEST_SKIP() << "no mpirun on this machine";
  TempDir tmp;
  std::string files;
  for (int r = 0; r < 8; ++r) {
    const std::string f = tmp.file("rank" + std::to_string(r) + ".braid");
    test::CliResult imp = test::run_braid(tmp, "import " + std::string(BRAID_TEST_DATA_DIR) +
                                                   "/gloo_straggler/rank-" + std::to_string(r) +
                                                   ".json.gz -o " + f + " -q");
    ASSERT_EQ(imp.code, 0) << imp.err;
    files += " " + f;
  }
  const std::string report = same_under_mpirun(tmp, files, 4);
  EXPECT_THAT(report, HasSubstr("and 7 more files"));
  // Stored by the processes (the same command without --no-store): the job's rows under each
  // file's run, each file's own rank's clock offset.
  const std::string out = tmp.file("mpi.json"), err = tmp.file("mpi.err");
  int st =
      std::system((test::mpirun(4) + " analyze" + files + " --json >" + out + " 2>" + err).c_str());
  ASSERT_EQ(st, 0) << test::slurp(err);
  EXPECT_EQ(test::slurp(out), report);
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_EQ(p.parse(report).get(doc), simdjson::SUCCESS);
  std::map<int64_t, int64_t> offset;
  for (simdjson::dom::element c : doc["clocks"]["ranks"].get_array())
    offset[c["rank"].get_int64().value()] = c["offset_ns"].get_int64().value();
  ASSERT_EQ(offset.size(), 8u);
  for (int r = 0; r < 8; ++r) {
    TraceReader reader(tmp.file("rank" + std::to_string(r) + ".braid"));
    EXPECT_EQ(sql::scalar(reader.db(), "SELECT COUNT(DISTINCT rank) FROM analysis_ranks"), 8) << r;
    EXPECT_EQ(sql::scalar(reader.db(), "SELECT clock_offset_ns FROM ranks"), offset[r]) << r;
  }
  // A file that is not there: one line naming it, a non-zero exit, under mpirun too.
  st = std::system((test::mpirun(4) + " analyze" + files + " " + tmp.file("gone.braid") + " >" +
                    out + " 2>" + err)
                       .c_str());
  EXPECT_NE(st, 0);
  const std::string said = test::slurp(err);
  EXPECT_THAT(said, HasSubstr("braid: error: " + tmp.file("gone.braid")));
  EXPECT_EQ(said.find("braid: error:"), said.rfind("braid: error:")) << said;

  std::string gpu;
  for (int r = 0; r < 2; ++r) {
    const std::string f = tmp.file("gpu" + std::to_string(r) + ".braid");
    test::CliResult imp =
        test::run_braid(tmp, "import " +
                                 test::traces("hta/tests/data/trace_filter/sampled_rank-" +
                                              std::to_string(r) + ".json.gz") +
                                 " -o " + f + " -q");
    ASSERT_EQ(imp.code, 0) << imp.err;
    gpu += " " + f;
  }
  const std::string gpu_report = same_under_mpirun(tmp, gpu, 2);
  ASSERT_EQ(p.parse(gpu_report).get(doc), simdjson::SUCCESS);
  // Its critical paths run on rank 1, which only process 1 holds: process 0 printed segments it
  // learned from the other process's answers.
  int64_t on_rank1 = 0;
  for (simdjson::dom::element path : doc["critical_paths"].get_array())
    for (simdjson::dom::element seg : path["chain"].get_array())
      on_rank1 += seg["rank"].get_int64().value() == 1;
  EXPECT_GT(on_rank1, 100) << gpu_report.substr(0, 400);
}

// --stream (analysis/stream.h) prints and stores what --no-stream (the whole run) does; both at
// once is a usage error.
TEST(AnalysisCli, StreamGivesTheSameReportAndTables) {
  TempDir tmp;
  SyntheticJob job;
  job.steps = 6;
  job.clock_skew = {0, 5'500'000, 37'123, -250};
  const std::string a = tmp.file("a.braid"), b = tmp.file("b.braid");
  write_synthetic_job(a, job);
  write_synthetic_job(b, job);
  test::CliResult whole = test::run_braid(tmp, "analyze --no-stream " + a);
  test::CliResult streamed = test::run_braid(tmp, "analyze --stream " + b);
  ASSERT_EQ(whole.code, 0) << whole.err;
  ASSERT_EQ(streamed.code, 0) << streamed.err;
  // The report names its file; the rest is the same.
  EXPECT_EQ(streamed.out.substr(b.size()), whole.out.substr(a.size()));
  for (const char* table : {"analysis_ranks", "analysis_collectives", "analysis_critical_path"}) {
    auto dump = [&](const std::string& f) {
      TraceReader r(f);
      sqlite3_stmt* s = nullptr;
      EXPECT_EQ(sqlite3_prepare_v2(r.db(), (std::string("SELECT * FROM ") + table).c_str(), -1, &s,
                                   nullptr),
                SQLITE_OK);
      std::string out;
      while (sqlite3_step(s) == SQLITE_ROW)
        for (int c = 0; c < sqlite3_column_count(s); ++c) {
          const unsigned char* t = sqlite3_column_text(s, c);
          out += (t ? reinterpret_cast<const char*>(t) : "") + std::string(c ? "|" : "\n");
        }
      sqlite3_finalize(s);
      return out;
    };
    EXPECT_FALSE(dump(a).empty()) << table;
    EXPECT_EQ(dump(b), dump(a)) << table;
  }
  test::CliResult both = test::run_braid(tmp, "analyze --stream --no-stream " + a);
  EXPECT_EQ(both.code, 2);
  EXPECT_THAT(both.err, HasSubstr("--stream"));
  // Several files are not streamed: said, not ignored.
  test::CliResult two = test::run_braid(tmp, "analyze --stream " + a + " " + b);
  EXPECT_EQ(two.code, 2);
  EXPECT_THAT(two.err, HasSubstr("--stream analyzes one file in one process"));
  EXPECT_EQ(std::count(two.err.begin(), two.err.end(), '\n'), 1) << two.err;
}

TEST(AnalysisCli, ErrorsAreOneLineWithAnExitCode) {
  TempDir tmp;
  auto r = test::run_braid(tmp, "analyze " + tmp.file("missing.braid"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("braid: error: "));
  std::string f = tmp.file("job.braid");
  write_synthetic_job(f, SyntheticJob{});
  r = test::run_braid(tmp, "analyze " + f + " --run 99");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("braid: error: "));
  r = test::run_braid(tmp, "merge -o " + tmp.file("x.braid"));
  EXPECT_EQ(r.code, 2);  // inputs are required
}

}  // namespace
}  // namespace braid::analysis

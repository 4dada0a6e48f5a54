// `braid analyze` and `braid merge` as a user runs them, on synthetic jobs with known answers:
// per-process files merged with their planted clock skews recovered, the straggler named in the
// report, results stored in the file, and the errors a user can make.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>
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

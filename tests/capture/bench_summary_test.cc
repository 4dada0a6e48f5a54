// The capture overhead benchmark's table (bench/capture_summary.h) on measurements with known
// medians, and its refusal of a malformed file.
#include <gtest/gtest.h>

#include <sstream>

#include "bench/capture_summary.h"
#include "trace/error.h"

namespace braid::bench {
namespace {

TEST(CaptureOverheadSummary, MediansRatiosAndAddedCostPerWorkload) {
  std::istringstream in(
      "# interleaved runs\n"
      "none launch_sync 9700\nfloor launch_sync 10500\nbraid launch_sync 11000\n"
      "none launch_sync 9600\nfloor launch_sync 10400\nbraid launch_sync 10900\n"
      "none launch_sync 9800\nfloor launch_sync 10600\nbraid launch_sync 12000\n"
      "none launch_step 2.0\nbraid launch_step 2.4\ntorch launch_step 3.6\n"
      "none launch_step 4.0\nbraid launch_step 4.4\ntorch launch_step 5.6\n");
  auto rows = summarize_overhead(in, "m");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].workload, "launch_sync");
  EXPECT_DOUBLE_EQ(rows[0].median.at("none"), 9700);
  EXPECT_DOUBLE_EQ(rows[0].median.at("braid"), 11000);
  EXPECT_EQ(rows[0].runs.at("braid"), 3);
  EXPECT_DOUBLE_EQ(rows[1].median.at("none"), 3.0);  // even count: mean of the middle two
  EXPECT_DOUBLE_EQ(rows[1].median.at("torch"), 4.6);
  EXPECT_DOUBLE_EQ(rows[0].median.at("floor"), 10500);
  std::string t = overhead_table(rows);
  EXPECT_NE(t.find("| workload | plain | CUPTI floor | braid | braid - floor | braid - plain |"),
            std::string::npos)
      << t;
  // braid - floor 500 ns: braid's own cost per launch above CUPTI's for the same records.
  EXPECT_NE(t.find("| launch_sync | 9700 | 10500 | 11000 | +500 | +1300 | 1.13x | 1.08x |  |  |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| launch_step | 3.00 |  | 3.40 |  | +0.40 | 1.13x |  | 4.60 | 1.53x |"),
            std::string::npos)
      << t;
}

TEST(CaptureOverheadSummary, MalformedLineNamesFileAndLine) {
  for (const char* bad : {"none launch_sync\n", "perf launch_sync 3\n", "none x 3 4\n",
                          "none x -1\n", "cupti x 3\n"}) {
    std::istringstream in(std::string("none ok 1\n") + bad);
    try {
      summarize_overhead(in, "runs/m.txt");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("runs/m.txt:2: expected", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace braid::bench

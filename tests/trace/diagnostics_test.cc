// The one table of diagnostics codes (trace/diagnostics.h): well formed, used by diag::make, and
// docs/schema.md's table of codes is exactly it (the test prints the rows to paste when not).
#include "trace/diagnostics.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace braid {
namespace {

TEST(DiagnosticsTable, CodesAreUniqueNamedAndDescribed) {
  std::set<std::string_view> seen;
  for (const diag::Info& i : diag::kTable) {
    EXPECT_TRUE(seen.insert(i.code).second) << "code listed twice: " << i.code;
    const size_t dot = i.code.find('.');
    EXPECT_TRUE(dot != std::string_view::npos && dot > 0 && dot + 1 < i.code.size()) << i.code;
    EXPECT_FALSE(i.layer.empty()) << i.code;
    EXPECT_FALSE(i.description.empty()) << i.code;
    EXPECT_EQ(i.description.find('|'), std::string_view::npos) << i.code;  // a markdown cell
    EXPECT_EQ(diag::find(i.code), &i);
  }
  EXPECT_GE(diag::kCount, 56u);
  EXPECT_EQ(diag::find("kineto.no_such_code"), nullptr);
}

TEST(DiagnosticsTable, MakeTakesTheTablesSeverityAndCode) {
  Diagnostic d = diag::make(diag::Code::kineto_bad_time, 3, "first: ts 1e30", 2);
  EXPECT_EQ(d.code, "kineto.bad_time");
  EXPECT_EQ(d.severity, Severity::Warning);
  EXPECT_EQ(d.count, 3);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.detail, "first: ts 1e30");
  EXPECT_EQ(diag::make(diag::Code::nsys_missing_table, Severity::Info, 1, "").severity,
            Severity::Info);
  Diagnostic e;
  diag::set_code(e, diag::Code::capture_cupti_unavailable);
  EXPECT_EQ(e.code, "capture.cupti_unavailable");
  EXPECT_EQ(e.severity, Severity::Error);
}

TEST(DiagnosticsTable, SchemaDocListsExactlyTheTable) {
  const std::string path = std::string(BRAID_TEST_DATA_DIR) + "/../../docs/schema.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::vector<std::string> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Diagnostics codes";
    if (inside && line.rfind("| `", 0) == 0) rows.push_back(line);
  }
  std::vector<std::string> want;
  std::string paste;
  for (const diag::Info& i : diag::kTable) {
    want.push_back("| `" + std::string(i.code) + "` | " + std::string(to_string(i.severity)) +
                   " | `" + std::string(i.layer) + "` | " + std::string(i.description) + " |");
    paste += want.back() + "\n";
  }
  EXPECT_EQ(rows, want) << path
                        << "'s section \"## Diagnostics codes\" must list trace/diagnostics.h's "
                           "table; its rows are:\n"
                        << paste;
}

}  // namespace
}  // namespace braid

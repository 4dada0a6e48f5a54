// What each importer stores, per real trace of ../shared/data/traces, checked in as golden files
// (Perfetto's diff tests: trace + query + expected output): `braid import` of the trace (with its
// execution trace where it has one), then `braid info --json`, compared byte for byte with
// tests/data/import_golden/<name>.json. A change in what an importer stores shows in review as a
// change of these files; BRAID_UPDATE_GOLDEN=1 rewrites them. Paths are written as <traces>/...
// and the output file's name is fixed, so the files do not depend on where the tree lives.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "trace/test_util.h"

namespace braid {
namespace {

struct Case {
  const char* name;
  std::vector<const char*> files;  // relative to ../shared/data/traces
  std::vector<const char*> ets;    // --et, one per file (or none)
};

const Case kCases[] = {
    {"hta_nccl_data", {"hta/tests/data/nccl_parser_config/nccl_data.json.gz"}, {}},
    {"hta_trace_filter",
     {"hta/tests/data/trace_filter/sampled_rank-0.json.gz",
      "hta/tests/data/trace_filter/sampled_rank-1.json.gz"},
     {}},
    {"hta_trace_diff_control", {"hta/tests/data/trace_diff/control/control.json.gz"}, {}},
    {"hta_trace_diff_test", {"hta/tests/data/trace_diff/test/test.json.gz"}, {}},
    {"hta_df_index_resolver", {"hta/tests/data/df_index_resolver/df_index_resolver.json.gz"}, {}},
    {"hta_negative_queue_length",
     {"hta/tests/data/negative_queue_length_values_check/rank0.json.gz"},
     {}},
    {"hta_ns_resolution",
     {"hta/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"},
     {}},
    {"hta_cpu_only", {"hta/tests/data/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"}, {}},
    {"hta_simple_add_with_et",
     {"hta/tests/data/execution_trace/benchmark_simple_add_trace.json.gz"},
     {"hta/tests/data/execution_trace/benchmark_simple_add_et.json.gz"}},
    {"chakra_feeder_et", {"chakra/tests/data/feeder_tests_trace.tar.gz"}, {}},
    {"chakra_json", {"chakra/tests/data/json_trace.tar.gz"}, {}},
    {"tracelens_b200_eager", {"tracelens/tests/traces/b200/eager_trace.json.gz"}, {}},
    {"param_linear_with_et",
     {"param/et_replay/tests/inputs/linear_kineto.json.gz"},
     {"param/et_replay/tests/inputs/linear_et.json.gz"}},
    {"param_resnet_kineto", {"param/et_replay/tests/inputs/resnet_kineto.json.gz"}, {}},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

class ImportGolden : public ::testing::TestWithParam<Case> {};

TEST_P(ImportGolden, InfoJsonMatches) {
  const Case& c = GetParam();
  test::TempDir tmp;
  std::string args = "import -q";
  for (const char* f : c.files) args += " " + test::traces(f);
  if (!c.ets.empty()) {
    args += " --et";
    for (const char* e : c.ets) args += " " + test::traces(e);
  }
  const std::string out = tmp.file("job.braid");
  test::CliResult r = test::run_braid(tmp, args + " -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  r = test::run_braid(tmp, "info " + out + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string got = replace_all(r.out, tmp.path() + "/", "");
  got = replace_all(got, std::string(BRAID_TRACES_DIR) + "/", "<traces>/");
  const std::string golden =
      std::string(BRAID_TEST_DATA_DIR) + "/import_golden/" + c.name + ".json";
  if (std::getenv("BRAID_UPDATE_GOLDEN")) {
    test::write_file(golden, got);
    GTEST_SKIP() << "wrote " << golden;
  }
  const std::string want = test::slurp(golden);
  ASSERT_FALSE(want.empty()) << golden << " is missing (BRAID_UPDATE_GOLDEN=1 writes it)";
  if (got == want) return;
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  ADD_FAILURE() << golden << " differs from byte " << at << ": got \""
                << got.substr(at > 80 ? at - 80 : 0, 240) << "\", want \""
                << want.substr(at > 80 ? at - 80 : 0, 240)
                << "\" (BRAID_UPDATE_GOLDEN=1 rewrites it; review the change)";
}

INSTANTIATE_TEST_SUITE_P(RealTraces, ImportGolden, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace braid

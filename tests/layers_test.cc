// The layer rule (docs/architecture.md): a folder includes only its own headers and those of the
// layers below it. trace/ is the bottom; capture/ and analysis/ sit on trace/; fusion/ on
// analysis/; replay/ on fusion/; app/ and bench/ on everything. An include of a higher layer (or
// of a sibling: capture/ and analysis/ know nothing of each other) fails this test, naming the
// file and line.
//
// trace/ is two libraries (trace/CMakeLists.txt): the store (braid_store, trace/*) and the
// importers and exporter on it (braid_trace, trace/import/ and trace/export/, here "trace-io").
// The store includes nothing of trace-io, and neither do capture/ (the agent links only the store)
// nor analysis/, fusion/ and replay/ (their libraries link the store, not the importers: only
// the commands and the GUI import or export).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> m = {
      {"trace", {"trace"}},
      {"trace-io", {"trace-io", "trace"}},
      {"capture", {"capture", "trace"}},
      {"analysis", {"analysis", "trace"}},
      {"fusion", {"fusion", "analysis", "trace"}},
      {"replay", {"replay", "fusion", "analysis", "trace"}},
      {"app", {"app", "replay", "fusion", "analysis", "capture", "trace-io", "trace"}},
      {"bench", {"bench", "app", "replay", "fusion", "analysis", "capture", "trace-io", "trace"}},
  };
  return m;
}

// The layer of a path relative to the root ("trace/import/kineto.cc" -> "trace-io"), "" for one
// outside the layers.
std::string layer_of(const std::string& path) {
  if (path.rfind("trace/import/", 0) == 0 || path.rfind("trace/export/", 0) == 0) return "trace-io";
  const size_t slash = path.find('/');
  const std::string top = slash == std::string::npos ? "" : path.substr(0, slash);
  return allowed().count(top) ? top : "";
}

// The includes of `text` (a file of folder `layer`) that break the rule, as "line N: <include>".
std::vector<std::string> violations(const std::string& layer, const std::string& text) {
  std::vector<std::string> out;
  const auto& ok = allowed().at(layer);
  size_t line = 0, pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    std::string l = text.substr(pos, end - pos);
    const size_t at = l.find_first_not_of(" \t");
    if (at != std::string::npos && l.compare(at, 10, "#include \"") == 0) {
      const std::string path = l.substr(at + 10, l.find('"', at + 10) - at - 10);
      const std::string top = layer_of(path);
      if (!top.empty() && !ok.count(top))
        out.push_back("line " + std::to_string(line) + ": #include \"" + path + "\"");
    }
    pos = end + 1;
  }
  return out;
}

TEST(Layers, TheCheckerSeesAHigherLayerInclude) {
  EXPECT_TRUE(violations("trace", "#include \"trace/model.h\"\n#include <vector>\n").empty());
  EXPECT_EQ(violations("trace", "// x\n#include \"analysis/run_data.h\"\n"),
            std::vector<std::string>{"line 2: #include \"analysis/run_data.h\""});
  EXPECT_EQ(violations("analysis", "  #include \"capture/collector.h\"").size(), 1u);
  EXPECT_EQ(violations("fusion", "#include \"replay/sim.h\"").size(), 1u);
  EXPECT_TRUE(violations("replay", "#include \"fusion/ir.h\"\n#include \"simdjson.h\"").empty());
  // The store and the agent's folder stay off the importers; the importers use the store.
  EXPECT_EQ(violations("trace", "#include \"trace/import/importer.h\"").size(), 1u);
  EXPECT_EQ(violations("capture", "#include \"trace/export/chrome.h\"").size(), 1u);
  EXPECT_TRUE(violations("trace-io", "#include \"trace/rows.h\"").empty());
  EXPECT_TRUE(violations("analysis", "#include \"trace/input.h\"").empty());
  EXPECT_EQ(violations("replay", "#include \"trace/import/kineto.h\"").size(), 1u);
}

TEST(Layers, NoFolderIncludesALayerAboveIt) {
  const std::filesystem::path root = std::filesystem::path(BRAID_TESTS_DIR).parent_path();
  int files = 0;
  std::vector<std::string> found;
  for (const auto& [folder, _] : allowed()) {
    if (folder == "trace-io") continue;  // inside trace/
    ASSERT_TRUE(std::filesystem::is_directory(root / folder)) << (root / folder);
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / folder)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu")) continue;
      const std::string layer = layer_of(std::filesystem::relative(e.path(), root).string());
      std::ifstream in(e.path(), std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      ++files;
      for (const std::string& v : violations(layer, text))
        found.push_back(std::filesystem::relative(e.path(), root).string() + ": " + v);
    }
  }
  EXPECT_GT(files, 200);
  std::string all;
  for (const std::string& f : found) all += "\n  " + f;
  EXPECT_TRUE(found.empty()) << found.size() << " includes of a higher layer:" << all;
}

}  // namespace

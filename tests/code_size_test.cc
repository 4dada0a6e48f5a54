// Code size (docs/architecture.md, "Short functions, one name per meaning"): no source file of
// the layers over 800 lines, and no function over 150 lines but the few listed here, each of
// which says in a comment above it why it is one function.
//
// A function is a top-level definition as clang-format lays it out: a line at column 0 that
// opens a body ('{' at its end, a '(' in its signature) up to the next line that is "}" alone.
// Member functions defined inside a class body are indented and not counted; the long ones of
// the code base are free functions or out-of-class members.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

constexpr int kMaxFunctionLines = 150;
constexpr int kMaxFileLines = 800;

// The functions allowed over kMaxFunctionLines, by file and the name their signature holds.
const std::map<std::string, std::string>& allowed_long() {
  static const std::map<std::string, std::string> m = {
      {"app/view/panels/timeline.cc", "void timeline(App& app"},
      {"fusion/passes/movement.cc", "plan_movement("},
      {"capture/daemon/records_codec.cc", "apply_records("},
  };
  return m;
}

struct Function {
  std::string file, signature;
  int line = 0, lines = 0;
};

// A line at column 0 that may start a function's signature.
bool starts_signature(const std::string& l) {
  if (l.empty() || l.find('(') == std::string::npos) return false;
  const char c = l[0];
  if (c == ' ' || c == '\t' || c == '}' || c == '#' || c == '/') return false;
  for (const char* k : {"namespace", "extern", "using", "static_assert", "template"})
    if (l.rfind(k, 0) == 0) return false;
  return true;
}

// Top-level functions of `lines`, with their length (signature to closing brace): a signature
// line, continued by indented lines, whose last line ends with '{'; the body ends at the next
// "}" alone ("};" ends an initializer, not a function).
std::vector<Function> functions(const std::string& file, const std::vector<std::string>& lines) {
  std::vector<Function> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!starts_signature(lines[i])) continue;
    size_t open = i;
    while (open + 1 < lines.size() && open - i < 8 && lines[open].back() != '{' &&
           lines[open].back() != ';' && !lines[open + 1].empty() && lines[open + 1][0] == ' ')
      ++open;
    if (lines[open].empty() || lines[open].back() != '{' || lines[open].find(" = ") != std::string::npos)
      continue;
    size_t end = open + 1;
    while (end < lines.size() && lines[end] != "}" && lines[end].rfind("};", 0) != 0) ++end;
    if (end == lines.size() || lines[end] != "}") continue;
    out.push_back({file, lines[i], static_cast<int>(i + 1), static_cast<int>(end - i + 1)});
    i = end;
  }
  return out;
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

struct Scan {
  std::vector<Function> long_functions;
  std::vector<std::pair<std::string, size_t>> long_files;
  size_t files = 0, functions = 0;
};

Scan scan() {
  const fs::path root = fs::path(BRAID_TESTS_DIR).parent_path();
  Scan s;
  for (const char* folder : {"trace", "capture", "analysis", "fusion", "replay", "app", "bench"})
    for (const auto& e : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      const std::vector<std::string> lines = read_lines(e.path());
      ++s.files;
      if (lines.size() > static_cast<size_t>(kMaxFileLines)) s.long_files.push_back({rel, lines.size()});
      for (const Function& f : functions(rel, lines)) {
        ++s.functions;
        if (f.lines > kMaxFunctionLines) s.long_functions.push_back(f);
      }
    }
  return s;
}

TEST(CodeSize, TheScanSeesTheCodeBase) {
  const Scan s = scan();
  // A scan that finds nothing would pass the checks below: the code base has hundreds of files
  // and over a thousand top-level functions.
  EXPECT_GT(s.files, 250u);
  EXPECT_GT(s.functions, 1000u);
}

TEST(CodeSize, FunctionSplitterFindsWrappedSignaturesAndTheirEnd) {
  const std::vector<std::string> text = {
      "namespace x {",
      "int f(int a) {",
      "  return a;",
      "}",
      "",
      "std::vector<int> long_name(const std::string& path,",
      "                           int b) {",
      "  if (b) {",
      "    return {};",
      "  }",
      "  return {1};",
      "}",
      "}  // namespace x",
  };
  const std::vector<Function> f = functions("t.cc", text);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].line, 2);
  EXPECT_EQ(f[0].lines, 3);
  EXPECT_EQ(f[1].signature, "std::vector<int> long_name(const std::string& path,");
  EXPECT_EQ(f[1].line, 6);
  EXPECT_EQ(f[1].lines, 7);
}

TEST(CodeSize, NoFileOver800Lines) {
  for (const auto& [file, n] : scan().long_files)
    ADD_FAILURE() << file << ": " << n << " lines (at most " << kMaxFileLines
                  << "): split it by what its parts do (docs/architecture.md)";
}

TEST(CodeSize, OnlyTheListedFunctionsExceed150Lines) {
  std::set<std::string> seen;
  for (const Function& f : scan().long_functions) {
    auto it = allowed_long().find(f.file);
    if (it != allowed_long().end() && f.signature.find(it->second) != std::string::npos) {
      seen.insert(f.file);
      continue;
    }
    ADD_FAILURE() << f.file << ":" << f.line << ": a function of " << f.lines << " lines (at most "
                  << kMaxFunctionLines << "): split it, or list it here with a comment above it "
                  << "saying why it is one function";
  }
  EXPECT_LE(allowed_long().size(), 5u);
  // A listed function that got short is taken off the list.
  for (const auto& [file, name] : allowed_long())
    EXPECT_TRUE(seen.count(file)) << file << ": " << name << " is no longer long: unlist it";
}

TEST(CodeSize, EachListedLongFunctionSaysWhy) {
  const fs::path root = fs::path(BRAID_TESTS_DIR).parent_path();
  for (const auto& [file, name] : allowed_long()) {
    const std::vector<std::string> lines = read_lines(root / file);
    size_t at = 0;
    while (at < lines.size() && lines[at].find(name) == std::string::npos) ++at;
    ASSERT_LT(at, lines.size()) << file << ": no line with '" << name << "'";
    std::string comment;
    for (size_t i = at; i > 0 && lines[i - 1].rfind("//", 0) == 0; --i) comment += lines[i - 1];
    EXPECT_NE(comment.find("Why one function"), std::string::npos)
        << file << ":" << at + 1 << ": the comment above " << name << " must say why it is long";
  }
}

}  // namespace

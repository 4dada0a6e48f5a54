// The command lines the documentation shows and the error messages suggest, checked against
// the `braid` that is built: every verb exists and every --flag is one its --help lists (a
// renamed or invented flag in README.md, docs/*.md or a message fails here). doc_blocks_test
// runs the documents' command lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "trace/test_util.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = fs::path(BRAID_TESTS_DATA_ROOT);

struct CommandLine {
  std::string where;  // file:line
  std::string verb;
  std::vector<std::string> flags;
};

std::vector<std::string> split(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> v;
  for (std::string t; in >> t;) v.push_back(t);
  return v;
}

// The `braid VERB ...` command in `text` (after a `braid` or `.../braid` token), if any: its
// verb and --flags, up to a comment, a pipe, `--` (a command to run follows) or the end.
bool parse(const std::string& text, CommandLine& c) {
  auto t = split(text);
  size_t i = 0;
  while (i < t.size() && t[i] != "braid" && !(t[i].size() > 6 && t[i].ends_with("/braid"))) ++i;
  if (i + 1 >= t.size()) return false;
  // A command, not prose mentioning braid: `braid` starts it, or follows a launcher.
  static const std::regex launcher("\\$|mpirun|mpiexec|time|/usr/bin/time|timeout|sudo|[A-Z_]+=.*");
  if (i > 0 && !t[i].ends_with("/braid") && !std::regex_match(t[0], launcher)) return false;
  c.verb = t[i + 1];
  if (!std::regex_match(c.verb, std::regex("[a-z]+"))) return false;
  for (size_t k = i + 2; k < t.size(); ++k) {
    std::string f = t[k];
    if (f == "#" || f == "|" || f == "&&" || f == ";" || f == "--" || f == "\\") break;
    while (!f.empty() && (f[0] == '[' || f[0] == '(' || f[0] == '`')) f.erase(0, 1);
    if (f.rfind("--", 0) != 0 || f.size() < 3) continue;
    f = f.substr(0, f.find_first_of("=]),.`|"));
    if (f.size() > 2) c.flags.push_back(f);
  }
  return true;
}

// Command lines in the code blocks (fenced or indented) and inline code of a Markdown file.
std::vector<CommandLine> from_markdown(const fs::path& p) {
  std::vector<CommandLine> out;
  std::ifstream in(p);
  bool fenced = false;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    std::vector<std::string> pieces;
    if (fenced || line.rfind("    ", 0) == 0) pieces.push_back(line);
    for (size_t a = line.find('`'); a != std::string::npos;) {
      size_t b = line.find('`', a + 1);
      if (b == std::string::npos) break;
      pieces.push_back(line.substr(a + 1, b - a - 1));
      a = line.find('`', b + 1);
    }
    for (const std::string& piece : pieces) {
      CommandLine c;
      // Usage lines of --help blocks ("Usage: ./build/app/braid VERB [OPTIONS]") are the help
      // itself; `braid-view` is another program.
      if (piece.find("Usage:") != std::string::npos ||
          piece.find("braid-view") != std::string::npos)
        continue;
      if (parse(piece, c)) {
        c.where = p.filename().string() + ":" + std::to_string(n);
        out.push_back(c);
      }
    }
  }
  return out;
}

// Backticked `braid ...` suggestions in the sources' string literals (error messages, help).
std::vector<CommandLine> from_sources() {
  std::vector<CommandLine> out;
  for (const char* dir : {"app", "analysis", "capture", "fusion", "replay", "trace"}) {
    for (auto& e : fs::recursive_directory_iterator(kRoot / dir)) {
      if (e.path().extension() != ".cc" && e.path().extension() != ".h") continue;
      std::ifstream in(e.path());
      int n = 0;
      for (std::string line; std::getline(in, line);) {
        ++n;
        for (size_t a = line.find("`braid "); a != std::string::npos;
             a = line.find("`braid ", a + 1)) {
          size_t b = line.find('`', a + 1);
          if (b == std::string::npos) break;
          CommandLine c;
          if (parse(line.substr(a + 1, b - a - 1), c)) {
            c.where = e.path().lexically_relative(kRoot).string() + ":" + std::to_string(n);
            out.push_back(c);
          }
        }
      }
    }
  }
  return out;
}

TEST(DocExamples, EveryShownCommandNamesAVerbAndFlagsThatExist) {
  test::TempDir tmp;
  std::vector<CommandLine> all = from_sources();
  std::vector<fs::path> docs = {kRoot / "README.md"};
  for (auto& e : fs::directory_iterator(kRoot / "docs"))
    if (e.path().extension() == ".md") docs.push_back(e.path());
  for (const fs::path& d : docs)
    for (CommandLine& c : from_markdown(d)) all.push_back(c);
  ASSERT_GT(all.size(), 50u);
  std::map<std::string, test::CliResult> help;
  size_t flags = 0;
  for (const CommandLine& c : all) {
    auto it = help.find(c.verb);
    if (it == help.end()) it = help.emplace(c.verb, test::run_braid(tmp, c.verb + " --help")).first;
    // `braid NOSUCH --help` prints the top-level help: a verb's help has its own usage line.
    ASSERT_TRUE(it->second.code == 0 &&
                std::regex_search(it->second.out, std::regex("Usage: \\S*braid " + c.verb + " ")))
        << c.where << ": `braid " << c.verb << "` is not a verb";
    for (const std::string& f : c.flags) {
      ++flags;
      EXPECT_TRUE(std::regex_search(it->second.out, std::regex("(^|[ ,])" + f + "([^a-z-]|$)")))
          << c.where << ": `braid " << c.verb << "` has no " << f;
    }
  }
  EXPECT_GT(flags, 100u);
  for (const char* v : {"lift", "fuse", "ab", "replay", "import", "analyze"})
    EXPECT_TRUE(help.count(v)) << v;
}

#ifdef BRAID_VIEW
// `braid-view ...` command lines of README.md and docs/*.md: every --flag is one
// `braid-view --help` lists.
TEST(DocExamples, EveryBraidViewLineNamesFlagsThatExist) {
  test::TempDir tmp;
  const std::string help_file = tmp.file("help");
  ASSERT_EQ(std::system((std::string("'") + BRAID_VIEW + "' --help > '" + help_file + "'").c_str()),
            0);
  std::ifstream hin(help_file);
  const std::string help((std::istreambuf_iterator<char>(hin)), std::istreambuf_iterator<char>());
  std::vector<fs::path> docs = {kRoot / "README.md"};
  for (auto& e : fs::directory_iterator(kRoot / "docs"))
    if (e.path().extension() == ".md") docs.push_back(e.path());
  size_t lines = 0, flags = 0;
  for (const fs::path& d : docs) {
    std::ifstream in(d);
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      // A command continued on the next lines (`\` at the end) is one line.
      for (std::string more; !line.empty() && line.back() == '\\' && std::getline(in, more); ++n)
        line = line.substr(0, line.size() - 1) + " " + more;
      const size_t at = line.find("braid-view ");
      if (at == std::string::npos || line.find("--") == std::string::npos) continue;
      ++lines;
      const auto t = split(line.substr(at));
      for (std::string f : t) {
        if (f == "#") break;
        while (!f.empty() && (f[0] == '[' || f[0] == '(' || f[0] == '`')) f.erase(0, 1);
        if (f.rfind("--", 0) != 0 || f.size() < 3) continue;
        f = f.substr(0, f.find_first_of("=]),.`|"));
        ++flags;
        EXPECT_TRUE(std::regex_search(help, std::regex("(^|[ ,])" + f + "([^a-z-]|$)")))
            << d.filename().string() << ":" << n << ": braid-view has no " << f;
      }
    }
  }
  EXPECT_GT(lines, 5u);
  EXPECT_GE(flags, 10u);
}
#endif

}  // namespace
}  // namespace braid

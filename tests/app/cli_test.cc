// The `braid` command line, run as a user would: exit codes, one-line errors, untouched output,
// and `info --json` numbers against an independent count of the input files.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid {
namespace {

using test::TempDir;
using test::traces;




void expect_one_line_error(const test::CliResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.err.rfind("braid: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(Cli, InfoJsonCountsMatchTheFiles) {
  TempDir tmp;
  auto f0 = traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz");
  auto f1 = traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz");
  auto r = test::run_braid(tmp, "import -q " + f0 + " " + f1 + " -o " + tmp.file("job.braid"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = test::run_braid(tmp, "info --json " + tmp.file("job.braid"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto c0 = test::count_kineto(f0), c1 = test::count_kineto(f1);
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(r.out);
  auto run = doc["runs"].at(0);
  EXPECT_EQ(int64_t(run["counts"]["kernels"]), c0.kernels + c1.kernels);
  EXPECT_EQ(int64_t(run["counts"]["memcpys"]), c0.memcpys + c1.memcpys);
  EXPECT_EQ(int64_t(run["counts"]["memsets"]), c0.memsets + c1.memsets);
  EXPECT_EQ(int64_t(run["counts"]["api_calls"]), c0.api + c1.api);
  EXPECT_EQ(simdjson::dom::array(run["ranks"]).size(), 2u);
  // NCCL kernels: all SendRecv in the files; per op from the CPU side.
  EXPECT_EQ(int64_t(run["counts"]["collectives"]), c0.nccl_kernels + c1.nccl_kernels);
  EXPECT_EQ(int64_t(run["collectives_by_op"]["alltoall"]["count"]), 8);
  EXPECT_EQ(int64_t(run["collectives_by_op"]["allreduce"]["count"]), 8);
  EXPECT_EQ(int64_t(run["collectives_by_op"]["allgather"]["count"]), 4);
  // Every NCCL kernel is a SendRecv kernel; each takes the category of the operation its CPU
  // side names, so the comm categories match the collectives.
  EXPECT_EQ(c0.nccl_by_kernel_coll["SendRecv"] + c1.nccl_by_kernel_coll["SendRecv"], 20);
  EXPECT_EQ(int64_t(run["kernels_by_category"]["comm.alltoall"]["count"]), 8);
  EXPECT_EQ(int64_t(run["kernels_by_category"]["comm.allreduce"]["count"]), 8);
  EXPECT_EQ(int64_t(run["kernels_by_category"]["comm.allgather"]["count"]), 4);
  EXPECT_TRUE(run["kernels_by_category"]["comm.sendrecv"].error());
}

TEST(Cli, InfoJsonCollectiveBytes) {
  TempDir tmp;
  auto f = traces("hta/tests/data/nccl_parser_config/nccl_data.json.gz");
  ASSERT_EQ(test::run_braid(tmp, "import -q " + f + " -o " + tmp.file("n.braid")).code, 0);
  auto r = test::run_braid(tmp, "info --json " + tmp.file("n.braid"));
  ASSERT_EQ(r.code, 0);
  // Independent: sum of In msg nelems * 4 over the AllReduce kernels' args in the file.
  std::string text = test::gunzip_file(f);
  simdjson::dom::parser p;
  int64_t bytes = 0, count = 0;
  for (auto e : p.parse(text)["traceEvents"].get_array()) {
    std::string_view cat, name;
    if (e["cat"].get_string().get(cat) || cat != "kernel") continue;
    if (e["name"].get_string().get(name) || name.find("AllReduce") == std::string_view::npos) continue;
    bytes += int64_t(e["args"]["In msg nelems"]) * 4;
    ++count;
  }
  simdjson::dom::parser p2;
  auto ar = p2.parse(r.out)["runs"].at(0)["collectives_by_op"]["allreduce"];
  EXPECT_EQ(int64_t(ar["count"]), count);
  EXPECT_EQ(int64_t(ar["bytes"]), bytes);
  EXPECT_EQ(count, 15);
}

TEST(Cli, TextInfoAndExport) {
  TempDir tmp;
  auto f = traces("tracelens/tests/traces/b200/eager_trace.json.gz");
  auto r = test::run_braid(tmp, "import " + f + " -o " + tmp.file("b.braid"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("imported 1 file"), std::string::npos) << r.out;
  r = test::run_braid(tmp, "info " + tmp.file("b.braid"));
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("allgather"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA B200"), std::string::npos) << r.out;
  r = test::run_braid(tmp, "export " + tmp.file("b.braid") + " -o " + tmp.file("b.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_EQ(p.load(tmp.file("b.json")).get(doc), simdjson::SUCCESS);
  EXPECT_GT(simdjson::dom::array(doc["traceEvents"]).size(), 1000u);
}

TEST(Cli, BadInputsGiveOneLineErrorsAndKeepExistingOutput) {
  TempDir tmp;
  // An existing output that must survive every failed import below.
  auto good = traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz");
  ASSERT_EQ(test::run_braid(tmp, "import -q " + good + " -o " + tmp.file("out.braid")).code, 0);
  std::string before = test::slurp(tmp.file("out.braid"));

  auto r = test::run_braid(tmp, "import -q --force " + tmp.file("nope.json") + " -o " + tmp.file("out.braid"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("nope.json"), std::string::npos) << r.err;

  std::string gz = test::slurp(good);
  test::write_file(tmp.file("cut.json.gz"), gz.substr(0, gz.size() / 3));
  r = test::run_braid(tmp, "import -q --force " + tmp.file("cut.json.gz") + " -o " + tmp.file("out.braid"));
  expect_one_line_error(r, "cut.json.gz: truncated gzip");

  test::write_file(tmp.file("bad.json"), "{\"traceEvents\":[{\"ph\":\"X\" \"ts\":1}]}");
  r = test::run_braid(tmp, "import -q --force " + tmp.file("bad.json") + " -o " + tmp.file("out.braid"));
  expect_one_line_error(r, "bad.json: malformed JSON");

  test::write_file(tmp.file("empty.json"), "{\"traceEvents\":[]}");
  r = test::run_braid(tmp, "import -q --force " + tmp.file("empty.json") + " -o " + tmp.file("out.braid"));
  expect_one_line_error(r, "empty.json: no trace events");

  test::write_file(tmp.file("junk.bin"), std::string("\x01\x02\x03garbage", 10));
  r = test::run_braid(tmp, "import -q --force " + tmp.file("junk.bin") + " -o " + tmp.file("out.braid"));
  expect_one_line_error(r, "junk.bin: unrecognized trace format");

  EXPECT_EQ(test::slurp(tmp.file("out.braid")), before) << "a failed import changed the existing output";

  // Without --force an existing output is refused before any work.
  r = test::run_braid(tmp, "import -q " + good + " -o " + tmp.file("out.braid"));
  expect_one_line_error(r, "already exists");

  // Readers: a non-SQLite file and a newer schema.
  r = test::run_braid(tmp, "info " + tmp.file("bad.json"));
  expect_one_line_error(r, "bad.json: not a .braid file");
  std::filesystem::copy_file(tmp.file("out.braid"), tmp.file("newer.braid"));
  {
    sqlite3* db = nullptr;
    sqlite3_open(tmp.file("newer.braid").c_str(), &db);
    sql::exec(db, "UPDATE meta SET value='7.0' WHERE key='schema_version'");
    sqlite3_close(db);
  }
  r = test::run_braid(tmp, "info " + tmp.file("newer.braid"));
  expect_one_line_error(r, "newer.braid: schema version 7.0 is newer");
  r = test::run_braid(tmp, "info " + tmp.file("missing.braid"));
  expect_one_line_error(r, "missing.braid: no such file");
  // No temporary files left anywhere.
  for (auto& e : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(Cli, InterruptedImportLeavesNothingBehind) {
  TempDir tmp;
  auto good = traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz");
  ASSERT_EQ(test::run_braid(tmp, "import -q " + good + " -o " + tmp.file("out.braid")).code, 0);
  std::string before = test::slurp(tmp.file("out.braid"));
  // A trace big enough (~120 MB) that the import is still running when SIGINT arrives.
  {
    FILE* f = std::fopen(tmp.file("big.json").c_str(), "wb");
    std::fputs("{\"traceEvents\":[", f);
    for (int i = 0; i < 1000000; ++i)
      std::fprintf(f, "%s{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"elementwise_kernel_%d\","
                      "\"pid\":0,\"tid\":7,\"ts\":%d.125,\"dur\":1.5,\"args\":{\"stream\":7}}",
                   i ? "," : "", i % 64, i * 2);
    std::fputs("]}", f);
    std::fclose(f);
  }
  pid_t pid = fork();
  if (pid == 0) {
    execl(BRAID_CLI, BRAID_CLI, "import", "-q", "--force", tmp.file("big.json").c_str(), "-o",
          tmp.file("out.braid").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  usleep(200 * 1000);
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st)) << "the import finished before the signal; make the input bigger";
  EXPECT_EQ(WTERMSIG(st), SIGINT);
  EXPECT_EQ(test::slurp(tmp.file("out.braid")), before);
  for (auto& e : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(Cli, HelpIsTruthful) {
  TempDir tmp;
  auto r = test::run_braid(tmp, "--help");
  EXPECT_EQ(r.code, 0);
  for (const char* verb : {"import", "info", "export", "demo"})
    EXPECT_NE(r.out.find(verb), std::string::npos) << verb;
  r = test::run_braid(tmp, "import --help");
  EXPECT_EQ(r.code, 0);
  for (const char* opt : {"--output", "--format", "--rank", "--append", "--force"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  r = test::run_braid(tmp, "frobnicate");
  EXPECT_NE(r.code, 0);
}

}  // namespace
}  // namespace braid

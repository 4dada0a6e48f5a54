// `braid merge` on per-rank files written by the real capture writer: every row of every table
// (the capture tables nccl_calls and nccl_proxy_ops included) arrives in the merged run with its
// references intact (string ids remapped, links to collectives, kernels and calls kept), the
// meta keys of each input are kept, and an input with a table or column this braid does not
// know is refused instead of losing it. With the agent library built, the same is checked on the
// files the fake-NCCL job writes under the real libbraid_capture.so.
#include "analysis/merge.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "analysis/store.h"
#include "capture/file_sink.h"
#include "capture/launcher.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::capture {
namespace {

// Columns that hold ids into `strings` (docs/schema.md: names are ids into strings).
bool string_column(const std::string& c) {
  return c.size() > 3 && c.compare(c.size() - 3, 3, "_id") == 0 && c != "run_id" &&
         c != "call_id" && c != "group_id" && c != "external_id" && c != "schedule_id";
}

std::vector<std::string> columns(sqlite3* db, const std::string& table) {
  std::vector<std::string> out;
  sql::Stmt c(db, "SELECT name FROM pragma_table_info(?)");
  c.bind(1, table);
  while (c.step()) out.push_back(c.text(0));
  return out;
}

// Tables with a rank column: every per-rank table of the run.
std::vector<std::string> rank_tables(sqlite3* db) {
  std::vector<std::string> out;
  sql::Stmt t(db, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name");
  while (t.step()) {
    auto cols = columns(db, t.text(0));
    bool has_run = false, has_rank = false;
    for (auto& c : cols) has_run |= c == "run_id", has_rank |= c == "rank";
    if (has_run && has_rank) out.push_back(t.text(0));
  }
  return out;
}

// The rows of one table for one (run, rank), strings resolved to their text, run_id left out
// (and the clock columns of `ranks`, which merge sets), as a multiset of printed rows.
std::multiset<std::string> rows_of(sqlite3* db, const std::string& table, int64_t run,
                                   int rank, bool skip_merge_diags) {
  std::string sel;
  for (const std::string& c : columns(db, table)) {
    if (c == "run_id" || (table == "ranks" && (c == "clock_offset_ns" || c == "offset_error_ns")))
      continue;
    if (!sel.empty()) sel += " || '|' || ";
    if (string_column(c))
      sel += "COALESCE((SELECT text FROM strings WHERE id = t." + c + "), '<' || t." + c + " || '>')";
    else
      sel += "COALESCE(t." + c + ", 'NULL')";
  }
  std::string q = "SELECT " + sel + " FROM " + table + " t WHERE run_id=? AND rank=?";
  if (table == "diagnostics" && skip_merge_diags)
    q += " AND code NOT LIKE 'merge.%' AND code NOT LIKE 'analysis.%'";
  sql::Stmt s(db, q);
  s.bind(1, run);
  s.bind(2, rank);
  std::multiset<std::string> out;
  while (s.step()) out.insert(s.text(0));
  return out;
}

// Links that must survive: calls to their collective, proxy ops to their call and collective,
// collectives to their kernel. Counts over the whole run.
std::map<std::string, int64_t> links(sqlite3* db, int64_t run) {
  std::map<std::string, int64_t> out;
  auto count = [&](const std::string& name, const std::string& q) {
    sql::Stmt s(db, q);
    s.bind(1, run);
    out[name] = s.step() ? s.i64(0) : -1;
  };
  count("call->collective",
        "SELECT COUNT(*) FROM nccl_calls c JOIN collectives k ON k.run_id=c.run_id AND "
        "k.rank=c.rank AND k.comm_id=c.comm_id AND k.seq=c.seq AND k.op=c.op AND "
        "k.peer_or_root=c.peer_or_root WHERE c.run_id=?");
  count("proxy->call",
        "SELECT COUNT(*) FROM nccl_proxy_ops p JOIN nccl_calls c ON c.run_id=p.run_id AND "
        "c.rank=p.rank AND c.call_id=p.call_id AND c.comm_id=p.comm_id AND c.seq=p.seq "
        "WHERE p.run_id=?");
  count("collective->kernel",
        "SELECT COUNT(*) FROM collectives c JOIN kernels k ON k.run_id=c.run_id AND "
        "k.rank=c.rank AND k.correlation=c.kernel_ref WHERE c.run_id=?");
  count("calls", "SELECT COUNT(*) FROM nccl_calls WHERE run_id=?");
  count("proxy", "SELECT COUNT(*) FROM nccl_proxy_ops WHERE run_id=?");
  return out;
}

// Every per-rank row of every input is in the merged run, and nothing else is.
void expect_all_rows_arrive(const std::vector<std::string>& inputs, const std::string& merged,
                            int64_t merged_run) {
  TraceReader m(merged);
  std::map<std::string, int64_t> want_links;
  std::set<std::string> tables_seen;
  std::map<std::string, size_t> total;  // table -> rows over all inputs
  for (const std::string& in : inputs) {
    TraceReader r(in);
    ASSERT_EQ(r.runs().size(), 1u) << in;
    int64_t run = r.runs()[0].run_id;
    for (auto& [k, v] : links(r.db(), run)) want_links[k] += v;
    for (const std::string& table : rank_tables(r.db())) {
      tables_seen.insert(table);
      for (const RankInfo& ri : r.ranks(run)) {
        auto want = rows_of(r.db(), table, run, ri.rank, false);
        auto got = rows_of(m.db(), table, merged_run, ri.rank, true);
        EXPECT_EQ(got, want) << table << " rank " << ri.rank << " from " << in;
        total[table] += want.size();
      }
    }
  }
  for (const char* t : {"nccl_calls", "nccl_proxy_ops", "kernels", "collectives"})
    EXPECT_TRUE(tables_seen.count(t)) << t << " not in the inputs: the test checks too little";
  // No rows beyond the inputs' (diagnostics: merge adds its own, checked elsewhere).
  for (auto& [table, n] : total) {
    if (table == "diagnostics") continue;
    EXPECT_EQ(sql::scalar(m.db(), "SELECT COUNT(*) FROM " + table + " WHERE run_id=" +
                                      std::to_string(merged_run)),
              static_cast<int64_t>(n))
        << table;
    EXPECT_EQ(sql::scalar(m.db(), "SELECT COUNT(*) FROM " + table + " WHERE run_id<>" +
                                      std::to_string(merged_run)),
              0)
        << table;
  }
  EXPECT_EQ(links(m.db(), merged_run), want_links);
}

// One rank's capture through the real FileSink. Strings are interned in a rank-dependent order
// (and rank-specific ones first), so the same text has different ids in different files.
void add_rank(FileSink& sink, const std::string& path, int rank, Ns skew) {
  for (int i = 0; i <= rank; ++i) sink.intern("only on rank " + std::to_string(rank) + "/" + std::to_string(i));
  std::vector<std::string> texts = {"nccl:world", "sum", "float32", "ring", "simple",
                                    "gemm_kernel", "ncclDevKernel_AllReduce", "cudaLaunchKernel",
                                    "forward", "torch", "bfloat16"};
  if (rank % 2) std::reverse(texts.begin(), texts.end());
  for (auto& t : texts) sink.intern(t);
  RankInfo ri;
  ri.rank = rank;
  ri.world_size = 3;
  ri.host = "node" + std::to_string(rank / 2);
  ri.pid = 1000 + rank;
  ri.device = rank;
  ri.backend = "nccl";
  ri.source = path;
  sink.set_rank_info(ri);
  sink.add_stream({rank, 7, true, "compute"});
  sink.add_stream({rank, 100 + rank, false, "main thread"});
  sink.add_communicator({"nccl:world", 3, "[0,1,2]", "world", "nccl"});
  sink.set_meta("capture.window", "all");
  sink.set_meta("capture.rank_source", rank == 2 ? "communicator" : "env");
  sink.set_diagnostic({rank, Severity::Info, "capture.clock_fit", 3 + rank, "slope 1"});
  Ns t = 1'000'000 + skew;
  int64_t corr = 50;
  for (int64_t seq = 0; seq < 6; ++seq, t += 100'000) {
    Kernel g;
    g.rank = rank;
    g.stream = 7;
    g.start = t;
    g.end = t + 20'000;
    g.name = sink.intern("gemm_kernel");
    g.category = Category::Gemm;
    g.correlation = corr++;
    sink.add(g);
    ApiCall a;
    a.rank = rank;
    a.tid = 100 + rank;
    a.start = t + 21'000;
    a.end = t + 22'000;
    a.name = sink.intern("cudaLaunchKernel");
    a.kind = ApiKind::Runtime;
    a.correlation = corr;
    sink.add(a);
    // The collective ends at the same job time on every rank (the last arrival is rank 0 here).
    Kernel k;
    k.rank = rank;
    k.stream = 7;
    k.start = t + 25'000 + 2'000 * rank;
    k.end = t + 60'000;
    k.name = sink.intern("ncclDevKernel_AllReduce");
    k.category = Category::CommAllReduce;
    k.correlation = corr++;
    sink.add(k);
    Collective c;
    c.rank = rank;
    c.comm = sink.intern("nccl:world");
    c.seq = seq;
    c.op = CollOp::AllReduce;
    c.dtype = sink.intern(seq % 2 ? "bfloat16" : "float32");
    c.in_count = c.out_count = 1 << 20;
    c.bytes = 4 << 20;
    c.stream = 7;
    c.start = k.start;
    c.end = k.end;
    c.enqueue = a.start;
    c.algo = sink.intern("ring");
    c.proto = sink.intern("simple");
    c.channels = 2;
    c.group_size = 1;
    c.name = k.name;
    c.kernel_ref = k.correlation;
    sink.add(c);
    NcclCallRow call;
    call.rank = rank;
    call.comm = c.comm;
    call.seq = seq;
    call.call_id = 10 * seq + 1;
    call.op = CollOp::AllReduce;
    call.redop = sink.intern("sum");
    call.sendbuff = 0x7f0000000000ull + seq;
    call.recvbuff = call.sendbuff;
    call.count = c.in_count;
    call.dtype = c.dtype;
    call.stream_handle = 0x1234;
    call.tid = 100 + rank;
    call.enqueue = a.start;
    call.ret = a.end;
    call.comm_rank = rank;
    call.comm_size = 3;
    sink.add(call);
    for (int ch = 0; ch < 2; ++ch) {
      ProxyOpRow p;
      p.rank = rank;
      p.comm = c.comm;
      p.seq = seq;
      p.call_id = call.call_id;
      p.channel = ch;
      p.peer = (rank + 1) % 3;
      p.is_send = ch == 0;
      p.steps = 8;
      p.chunk_size = 1 << 17;
      p.tid = 200 + rank;
      p.start = k.start + 1'000;
      p.end = k.end - 1'000;
      sink.add(p);
    }
    sink.checkpoint();  // several transactions, as a live capture writes
  }
  Memcpy mc;
  mc.rank = rank;
  mc.stream = 7;
  mc.start = t;
  mc.end = t + 5'000;
  mc.kind = MemKind::HtoD;
  mc.bytes = 4096;
  sink.add(mc);
  Range r;
  r.rank = rank;
  r.stream = 100 + rank;
  r.start = 1'000'000 + skew;
  r.end = t;
  r.name = sink.intern("forward");
  r.domain = sink.intern("torch");
  sink.add(r);
  sink.add(Step{rank, 0, 1'000'000 + skew, t});
}

void write_rank(const std::string& path, int rank, Ns skew) {
  FileSink sink(path, {"train.py --rank " + std::to_string(rank), "cupti", ""});
  add_rank(sink, path, rank, skew);
  sink.close();
}

TEST(CaptureMerge, FileSinkRanksArriveWhole) {
  test::TempDir tmp;
  const Ns skew[3] = {0, 5'000'000, -3'000'000};
  std::vector<std::string> files;
  for (int r = 0; r < 3; ++r) {
    files.push_back(tmp.file("job.rank" + std::to_string(r) + ".braid"));
    write_rank(files.back(), r, skew[r]);
  }
  std::string out = tmp.file("job.braid");
  analysis::MergeResult m = analysis::merge_files(files, out);
  expect_all_rows_arrive(files, out, m.run_id);

  TraceReader r(out);
  // Calls and proxy ops: 6 per rank, 2 proxy ops each, all linked.
  auto l = links(r.db(), m.run_id);
  EXPECT_EQ(l["calls"], 18);
  EXPECT_EQ(l["call->collective"], 18);
  EXPECT_EQ(l["proxy"], 36);
  EXPECT_EQ(l["proxy->call"], 36);
  EXPECT_EQ(m.events, 3 * (6 * 7 + 2));  // per seq: 2 kernels, api, coll, call, 2 proxy
  // Times stay on each rank's clock; the planted skews come back as the stored offsets, which
  // put the calls' host times onto the job axis like the kernels'.
  std::map<int, Ns> offset;
  for (const RankInfo& ri : r.ranks(m.run_id)) offset[ri.rank] = ri.clock_offset;
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(offset[k] - offset[0], -(skew[k] - skew[0]), 3'000) << "rank " << k;
  sql::Stmt q(r.db(), "SELECT c.rank, c.enqueue_ns + k.clock_offset_ns FROM nccl_calls c JOIN "
                      "ranks k ON k.run_id=c.run_id AND k.rank=c.rank WHERE c.seq=3");
  std::map<int, Ns> job_time;
  while (q.step()) job_time[static_cast<int>(q.i64(0))] = q.i64(1);
  ASSERT_EQ(job_time.size(), 3u);
  EXPECT_NEAR(job_time[1], job_time[0], 3'000);
  EXPECT_NEAR(job_time[2], job_time[0], 3'000);
  // Meta: every input's keys under input.<i>., and the ones all agree on under their own name.
  EXPECT_EQ(r.meta("capture.window"), "all");
  EXPECT_EQ(r.meta("capture.rank_source"), "");  // they differ: only per input
  EXPECT_EQ(r.meta("input.0.capture.rank_source"), "env");
  EXPECT_EQ(r.meta("input.2.capture.rank_source"), "communicator");
  EXPECT_EQ(r.meta("input.1.path"), files[1]);
  EXPECT_EQ(r.meta("schema_version"), "1.2");
  for (const Diagnostic& d : r.diagnostics(m.run_id)) EXPECT_NE(d.code, "merge.not_carried");
}

// A per-node file as the capture daemon writes it (several ranks in one captured run, one
// FileSink) merged with a per-process one.
TEST(CaptureMerge, PerNodeFileWithTwoRanks) {
  test::TempDir tmp;
  std::vector<std::string> files = {tmp.file("node0.braid"), tmp.file("job.rank2.braid")};
  {
    FileSink node(files[0], {"braid daemon", "cupti", ""});
    add_rank(node, files[0], 1, 2'000'000);
    add_rank(node, files[0], 0, 0);
    node.close();
  }
  write_rank(files[1], 2, -1'000'000);
  std::string out = tmp.file("job.braid");
  analysis::MergeResult m = analysis::merge_files(files, out);
  EXPECT_EQ(m.ranks, (std::vector<int32_t>{0, 1, 2}));
  expect_all_rows_arrive(files, out, m.run_id);
  TraceReader r(out);
  EXPECT_EQ(links(r.db(), m.run_id)["proxy->call"], 36);
}

TEST(CaptureMerge, UnknownTableOrColumnIsRefused) {
  test::TempDir tmp;
  std::vector<std::string> files = {tmp.file("a.braid"), tmp.file("b.braid")};
  write_rank(files[0], 0, 0);
  write_rank(files[1], 1, 0);
  auto alter = [](const std::string& path, const char* ddl) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sql::exec(db, ddl);
    sqlite3_close(db);
  };
  const std::string out = tmp.file("m.braid");
  alter(files[1], "CREATE TABLE nccl_bootstrap(run_id INTEGER, rank INTEGER, x INTEGER)");
  try {
    analysis::merge_files(files, out);
    ADD_FAILURE() << "merge accepted an unknown table";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("nccl_bootstrap"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(files[1]), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  write_rank(files[1], 1, 0);
  alter(files[0], "ALTER TABLE nccl_calls ADD COLUMN bus_id INTEGER");
  try {
    analysis::merge_files(files, out);
    ADD_FAILURE() << "merge accepted an unknown column";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("nccl_calls.bus_id"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

// The same through `braid merge` as a user runs it: exit 0 with the summary; an unknown table is
// exit 1 with one line naming it, and no output.
TEST(CaptureMerge, CliCarriesCaptureRowsAndRefusesUnknownTables) {
  test::TempDir tmp;
  std::vector<std::string> files = {tmp.file("job.rank0.braid"), tmp.file("job.rank1.braid")};
  write_rank(files[0], 0, 0);
  write_rank(files[1], 1, 1'000'000);
  test::CliResult ok = test::run_braid(tmp, "merge " + files[0] + " " + files[1] + " -o " + tmp.file("job.braid"));
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("merged 2 files (2 ranks, 88 events)"), std::string::npos) << ok.out;
  {
    TraceReader r(tmp.file("job.braid"));
    EXPECT_EQ(links(r.db(), 1)["proxy->call"], 24);
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(files[1].c_str(), &db), SQLITE_OK);
  sql::exec(db, "CREATE TABLE nccl_bootstrap(run_id INTEGER)");
  sqlite3_close(db);
  test::CliResult bad = test::run_braid(tmp, "merge " + files[0] + " " + files[1] + " -o " + tmp.file("new.braid"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("table 'nccl_bootstrap'"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.file("new.braid")));
}

TEST(CaptureMerge, WhatIsNotCarriedIsSaid) {
  test::TempDir tmp;
  std::vector<std::string> files = {tmp.file("a.braid"), tmp.file("b.braid")};
  write_rank(files[0], 0, 0);
  write_rank(files[1], 1, 0);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(files[1].c_str(), &db), SQLITE_OK);
  analysis::ensure_tables(db);  // their owner creates them with its first rows
  sql::exec(db, "INSERT INTO runs(run_id, kind, source, created_at) VALUES (2, 'simulated', 'x', 'now');"
                "INSERT INTO analysis_clocks VALUES (1, 1, 0, 0, 0, 0, 1, 0, 1)");
  sqlite3_close(db);
  auto m = analysis::merge_files(files, tmp.file("m.braid"));
  TraceReader r(tmp.file("m.braid"));
  std::string detail;
  for (const Diagnostic& d : r.diagnostics(m.run_id))
    if (d.code == "merge.not_carried") detail = d.detail;
  EXPECT_NE(detail.find(files[1] + ": runs 2 (only run 1 is merged), analysis_clocks 1 rows"),
            std::string::npos)
      << detail;
}

#ifdef CAPTURE_FAKE_NCCL_JOB
// The fake-NCCL job under the real libbraid_capture.so, one process per rank, then merged.
TEST(CaptureMerge, FakeNcclJobUnderTheAgent) {
  test::TempDir tmp;
  constexpr int kRanks = 4;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kRanks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                            "SLURM_PROCID", "PMI_RANK"})
        unsetenv(v);
      setenv("BRAID_CAPTURE_OUTPUT", tmp.file("job.braid").c_str(), 1);
      setenv("BRAID_CAPTURE_COMMAND", "fake_nccl_job", 1);
      setenv("BRAID_CAPTURE_FLUSH_MS", "50", 1);
      setenv("FAKE_NCCL_DIR", tmp.path().c_str(), 1);
      setenv("NCCL_PROFILER_PLUGIN", CAPTURE_AGENT_LIB, 1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(kRanks).c_str(), 1);
      if (!freopen(tmp.file("out" + std::to_string(rank)).c_str(), "w", stdout)) _exit(4);
      std::string r = std::to_string(rank), n = std::to_string(kRanks);
      execl(CAPTURE_FAKE_NCCL_JOB, CAPTURE_FAKE_NCCL_JOB, r.c_str(), n.c_str(),
            tmp.path().c_str(), nullptr);
      _exit(5);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  }
  auto files = recorded_files(tmp.file("job.braid"));
  ASSERT_EQ(files.size(), static_cast<size_t>(kRanks));
  std::string out = tmp.file("merged.braid");
  analysis::MergeResult m = analysis::merge_files(files, out);
  EXPECT_EQ(m.ranks.size(), static_cast<size_t>(kRanks));
  expect_all_rows_arrive(files, out, m.run_id);
  TraceReader r(out);
  auto l = links(r.db(), m.run_id);
  EXPECT_GT(l["calls"], 4 * 15);
  EXPECT_GT(l["proxy"], 0);
  EXPECT_GT(l["call->collective"], 4 * 15);
  EXPECT_EQ(r.meta("capture.rank_source"), "RANK");  // every rank from the launcher's RANK
}
#endif

}  // namespace
}  // namespace braid::capture

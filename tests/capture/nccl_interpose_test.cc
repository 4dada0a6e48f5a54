// The NCCL interposer in libbraid_capture.so against a fake NCCL, four ranks as four processes
// (one of them without a launcher rank, so it takes its rank from its largest communicator):
// communicator identities agree across ranks, sequence numbers are dense per communicator,
// grouped calls are marked as a group, NCCL's calls into its own API are not double counted,
// and every call still reaches the real (fake) NCCL.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "capture/launcher.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

extern char** environ;

namespace braid::capture {
namespace {

constexpr int kRanks = 4;

pid_t spawn(int rank, const std::string& dir, bool with_rank_env) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                        "PMI_RANK"})
    unsetenv(v);
  setenv("BRAID_CAPTURE_OUTPUT", (dir + "/job.braid").c_str(), 1);
  setenv("BRAID_CAPTURE_COMMAND", "fake_nccl_job", 1);
  setenv("BRAID_CAPTURE_FLUSH_MS", "50", 1);
  setenv("FAKE_NCCL_DIR", dir.c_str(), 1);
  setenv("NCCL_PROFILER_PLUGIN", CAPTURE_AGENT_LIB, 1);  // as braid record sets it
  if (with_rank_env) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(kRanks).c_str(), 1);
  }
  std::string out = dir + "/out" + std::to_string(rank);
  if (!freopen(out.c_str(), "w", stdout)) _exit(4);
  std::string r = std::to_string(rank), n = std::to_string(kRanks);
  execl(CAPTURE_FAKE_NCCL_JOB, CAPTURE_FAKE_NCCL_JOB, r.c_str(), n.c_str(), dir.c_str(), nullptr);
  _exit(5);
}

struct RankFile {
  std::string path;
  std::vector<Collective> colls;  // by (comm, seq)
  std::map<std::string, std::string> comm_of;  // label -> identity, filled by the test
  RankInfo info;
  std::vector<Communicator> comms;
  std::vector<Diagnostic> diags;
  std::map<int64_t, std::tuple<int64_t, std::string, std::string>> calls;  // call_id -> (group, op, redop)
  // (comm, seq, op) -> (peer, steps, is_send): point-to-point calls count seq per channel, so
  // (comm, seq) alone may name a collective and a send.
  using Key = std::tuple<std::string, int64_t, std::string>;
  std::map<Key, std::tuple<int64_t, int64_t, int64_t>> proxy;
  std::map<Key, std::tuple<std::string, std::string, int64_t>>
      detail;  // -> (algo, proto, channels)
};

RankFile load(const std::string& path) {
  RankFile f;
  f.path = path;
  TraceReader r(path);
  auto runs = r.runs();
  EXPECT_EQ(runs.size(), 1u);
  r.collectives(1, [&](const Collective& c) {
    f.colls.push_back(c);
    return true;
  });
  auto ranks = r.ranks(1);
  EXPECT_EQ(ranks.size(), 1u);
  if (!ranks.empty()) f.info = ranks[0];
  f.comms = r.communicators(1);
  f.diags = r.diagnostics(1);
  // Resolve comm ids to text for comparisons across files.
  for (auto& c : f.colls) c.name = 0;
  sql::Stmt q(r.db(), "SELECT c.call_id, c.group_id, c.op, s.text FROM nccl_calls c LEFT JOIN strings s ON s.id = c.redop_id");
  while (q.step()) f.calls[q.i64(0)] = {q.i64(1), q.text(2), q.text(3)};
  sql::Stmt p(r.db(),
              "SELECT s.text, p.seq, c.op, p.peer, p.steps, p.is_send FROM nccl_proxy_ops p "
              "JOIN strings s ON s.id = p.comm_id JOIN nccl_calls c ON c.call_id = p.call_id");
  while (p.step()) f.proxy[{p.text(0), p.i64(1), p.text(2)}] = {p.i64(3), p.i64(4), p.i64(5)};
  for (auto& c : f.colls)
    f.detail[{r.str(c.comm), c.seq, std::string(to_string(c.op))}] = {
        c.algo ? r.str(c.algo) : "", c.proto ? r.str(c.proto) : "", c.channels};
  return f;
}

std::string comm_text(const std::string& path, StrId id) {
  TraceReader r(path);
  return r.str(id);
}

TEST(NcclInterpose, FourRanksAgainstAFakeNccl) {
  test::TempDir tmp;
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) pids.push_back(spawn(r, tmp.path(), r != 3));
  for (int r = 0; r < kRanks; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank " << r << " status " << st;
  }
  // Every call reached the fake NCCL: rank 0 also made the unique id, even ranks use `evens`.
  const int expected_calls[kRanks] = {26, 23, 25, 23};
  for (int r = 0; r < kRanks; ++r) {
    std::ifstream out(tmp.file("out" + std::to_string(r)));
    std::string line;
    std::getline(out, line);
    EXPECT_EQ(line, "calls=" + std::to_string(expected_calls[r])) << "rank " << r;
  }

  auto files = recorded_files(tmp.file("job.braid"));
  ASSERT_EQ(files.size(), 4u);
  std::map<int, RankFile> by_rank;
  for (auto& p : files) {
    RankFile f = load(p);
    by_rank[f.info.rank] = std::move(f);
  }
  ASSERT_EQ(by_rank.size(), 4u);
  // Rank 3 had no launcher rank: its file is named by pid and its rank came from the world
  // communicator, rows renumbered.
  EXPECT_NE(by_rank[3].path.find(".pid"), std::string::npos);
  EXPECT_EQ(by_rank[3].info.world_size, 4);
  EXPECT_NE(by_rank[0].path.find("job.rank0.braid"), std::string::npos);
  for (auto& [rank, f] : by_rank) {
    EXPECT_EQ(f.info.nccl_version, "2.28.9");
    for (auto& c : f.colls) EXPECT_EQ(c.rank, rank);
  }

  // Identities as text, per rank: world / half / evens by their nranks and first seq ops.
  std::map<int, std::map<std::string, std::vector<Collective>>> per_comm;  // rank -> identity -> ops
  for (auto& [rank, f] : by_rank)
    for (auto& c : f.colls) per_comm[rank][comm_text(f.path, c.comm)].push_back(c);
  std::string world;
  for (auto& [id, ops] : per_comm[0])
    if (ops.size() == 13) world = id;
  ASSERT_FALSE(world.empty());
  EXPECT_EQ(world.rfind("nccl:", 0), 0u);
  const std::string half_even = world + "/split0.0", half_odd = world + "/split0.1",
                    evens = world + "/split1.0";
  for (int r = 0; r < kRanks; ++r) {
    auto& comms = per_comm[r];
    ASSERT_EQ(comms.count(world), 1u) << "rank " << r;
    ASSERT_EQ(comms[world].size(), 13u);
    const std::string& half = r % 2 ? half_odd : half_even;
    ASSERT_EQ(comms.count(half), 1u) << "rank " << r;
    EXPECT_EQ(comms[half].size(), 2u);
    EXPECT_EQ(comms.count(evens), r % 2 ? 0u : 1u);
    EXPECT_EQ(comms.size(), r % 2 ? 2u : 3u);

    std::vector<Collective> ops, sends, recvs;
    for (auto& c : comms[world])
      (c.op == CollOp::Send ? sends : c.op == CollOp::Recv ? recvs : ops).push_back(c);
    std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
    const CollOp expect[] = {CollOp::AllReduce, CollOp::AllReduce,     CollOp::AllReduce,
                             CollOp::AllGather, CollOp::ReduceScatter, CollOp::Broadcast,
                             CollOp::Broadcast, CollOp::Reduce,        CollOp::AllToAll,
                             CollOp::Gather,    CollOp::Scatter};
    ASSERT_EQ(ops.size(), 11u);
    for (int i = 0; i < 11; ++i) {
      EXPECT_EQ(ops[i].seq, i) << "rank " << r;
      EXPECT_EQ(ops[i].op, expect[i]) << "rank " << r << " seq " << i;
      EXPECT_EQ(ops[i].stream, -1);  // no CUPTI here: host-side times
      EXPECT_LE(ops[i].start, ops[i].end);
    }
    // Point-to-point calls count per (peer, direction): the send to the next rank and the receive
    // from the previous one are each the first of their channel, as on the ranks they pair with.
    ASSERT_EQ(sends.size(), 1u);
    ASSERT_EQ(recvs.size(), 1u);
    EXPECT_EQ(sends[0].seq, 0);
    EXPECT_EQ(recvs[0].seq, 0);
    EXPECT_EQ(sends[0].group_size, 2);
    EXPECT_EQ(recvs[0].group_size, 2);
    EXPECT_EQ(ops[0].group_size, 1);
    EXPECT_EQ(sends[0].peer_or_root, (r + 1) % kRanks);
    EXPECT_EQ(recvs[0].peer_or_root, (r + kRanks - 1) % kRanks);
    EXPECT_EQ(ops[3].in_count, 128);
    EXPECT_EQ(ops[3].out_count, 512);
    EXPECT_EQ(ops[3].bytes, 1024);  // bfloat16
    EXPECT_EQ(ops[4].in_count, 256);
    EXPECT_EQ(ops[4].out_count, 64);
    EXPECT_EQ(ops[4].bytes, 512);  // float16
    EXPECT_EQ(ops[5].peer_or_root, 0);
    EXPECT_EQ(ops[6].peer_or_root,
              1);  // ncclBcast, recorded once although NCCL calls ncclBroadcast
    EXPECT_EQ(ops[6].in_count, 16);
    EXPECT_EQ(ops[8].bytes, 16);  // alltoall 4 int8 to each of 4 ranks
    EXPECT_EQ(ops[9].out_count, 8);
    EXPECT_EQ(ops[10].in_count, 8);
    auto half_ops = comms[half];
    std::sort(half_ops.begin(), half_ops.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
    EXPECT_EQ(half_ops[0].seq, 0);
    EXPECT_EQ(half_ops[1].seq, 1);
  }

  // The grouped send/recv share one nonzero group id; ungrouped calls have none; reductions named.
  for (auto& [rank, f] : by_rank) {
    std::map<std::string, std::vector<int64_t>> groups_by_op;
    std::multiset<std::string> redops;
    for (auto& [id, c] : f.calls) {
      groups_by_op[std::get<1>(c)].push_back(std::get<0>(c));
      if (!std::get<2>(c).empty()) redops.insert(std::get<2>(c));
    }
    ASSERT_EQ(groups_by_op["send"].size(), 1u);
    EXPECT_NE(groups_by_op["send"][0], 0);
    EXPECT_EQ(groups_by_op["send"][0], groups_by_op["recv"][0]);
    for (int64_t g : groups_by_op["allreduce"]) EXPECT_EQ(g, 0);
    EXPECT_EQ(redops.count("max"), 1u);
    EXPECT_EQ(redops.count("avg"), 2u);
    EXPECT_EQ(redops.count("min"), 1u);
    EXPECT_EQ(redops.count("sum"), rank % 2 ? 3u : 4u);
    // No CUPTI in this process: every collective is host-side, and said so.
    int64_t without = -1;
    for (auto& d : f.diags)
      if (d.code == "capture.collective_without_kernel") without = d.count;
    EXPECT_EQ(without, static_cast<int64_t>(f.colls.size()));
    // The profiler plugin's details joined their collectives; its proxy ops name them.
    for (auto& [key, d] : f.detail) {
      bool p2p = std::get<2>(key) == "send" || std::get<2>(key) == "recv";
      EXPECT_EQ(std::get<0>(d), p2p ? "" : "RING")
          << std::get<0>(key) << " seq " << std::get<1>(key);
      EXPECT_EQ(std::get<1>(d), p2p ? "" : "SIMPLE");
      EXPECT_EQ(std::get<2>(d), p2p ? 1 : 2);
    }
    EXPECT_EQ(f.proxy.size(), f.colls.size());
    auto first = f.proxy.find({world, 0, "allreduce"});
    ASSERT_NE(first, f.proxy.end());
    EXPECT_EQ(first->second, std::make_tuple(int64_t{(rank + 1) % kRanks}, int64_t{4}, int64_t{1}));
    EXPECT_EQ(f.proxy.count({world, 0, "recv"}), 1u);  // the grouped recv's, at ncclGroupEnd
    std::map<std::string, int> nranks;
    for (auto& c : f.comms) nranks[c.comm] = c.nranks;
    EXPECT_EQ(nranks[world], 4);
    EXPECT_EQ(nranks[rank % 2 ? half_odd : half_even], 2);
    // Each call knows this process's place in its communicator.
    TraceReader r(f.path);
    sql::Stmt q(r.db(), "SELECT s.text, MIN(c.comm_rank), MAX(c.comm_rank), MIN(c.comm_size) "
                        "FROM nccl_calls c JOIN strings s ON s.id = c.comm_id GROUP BY s.text");
    std::map<std::string, std::tuple<int64_t, int64_t, int64_t>> places;
    while (q.step()) places[q.text(0)] = {q.i64(1), q.i64(2), q.i64(3)};
    EXPECT_EQ(places[world], std::make_tuple(int64_t{rank}, int64_t{rank}, int64_t{4}));
    const std::string& half = rank % 2 ? half_odd : half_even;
    EXPECT_EQ(places[half], std::make_tuple(int64_t{rank / 2}, int64_t{rank / 2}, int64_t{2}));
  }
}

TEST(NcclInterpose, WithoutCaptureRequestedItOnlyPassesThrough) {
  test::TempDir tmp;
  pid_t pid = fork();
  if (pid == 0) {
    unsetenv("BRAID_CAPTURE_OUTPUT");
    setenv("FAKE_NCCL_DIR", tmp.path().c_str(), 1);
    setenv("NCCL_PROFILER_PLUGIN", CAPTURE_AGENT_LIB, 1);  // the plugin must stay silent too
    if (!freopen(tmp.file("out").c_str(), "w", stdout)) _exit(4);
    execl(CAPTURE_FAKE_NCCL_JOB, CAPTURE_FAKE_NCCL_JOB, "0", "1", tmp.path().c_str(), nullptr);
    _exit(5);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  std::ifstream out(tmp.file("out"));
  std::string line;
  std::getline(out, line);
  EXPECT_EQ(line, "calls=26");
  for (auto& e : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().string().find(".braid"), std::string::npos) << "unexpected " << e.path();
}

}  // namespace
}  // namespace braid::capture

namespace braid::capture {
namespace {

TEST(NcclInterpose, CallsOutsideTheWindowAreNotWritten) {
  // A cuda-profiler-api window that never opens (no CUDA here): the communicator is known, its
  // calls are not written (they still take sequence numbers, checked on GPUs by capture_gpu_test).
  test::TempDir tmp;
  pid_t pid = fork();
  if (pid == 0) {
    unsetenv("RANK");
    setenv("BRAID_CAPTURE_OUTPUT", tmp.file("job.braid").c_str(), 1);
    setenv("BRAID_CAPTURE_WINDOW", "cuda-profiler-api", 1);
    setenv("FAKE_NCCL_DIR", tmp.path().c_str(), 1);
    setenv("NCCL_PROFILER_PLUGIN", CAPTURE_AGENT_LIB, 1);
    if (!freopen(tmp.file("out").c_str(), "w", stdout)) _exit(4);
    execl(CAPTURE_FAKE_NCCL_JOB, CAPTURE_FAKE_NCCL_JOB, "0", "1", tmp.path().c_str(), nullptr);
    _exit(5);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  auto files = recorded_files(tmp.file("job.braid"));
  ASSERT_EQ(files.size(), 1u);
  TraceReader r(files[0]);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM collectives"), 0);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM nccl_calls"), 0);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM nccl_proxy_ops"), 0);
  EXPECT_EQ(r.communicators(1).size(), 3u);  // world, its split and the evens split
  EXPECT_EQ(r.meta("capture.window"), "cuda-profiler-api");
}

}  // namespace
}  // namespace braid::capture

namespace braid::capture {
namespace {

TEST(NcclInterpose, InjectedByTheRecordEnvironment) {
  // The job links only the (fake) NCCL; the agent arrives through the environment braid record
  // gives the command (LD_PRELOAD first, NCCL_PROFILER_PLUGIN, BRAID_CAPTURE_*).
  test::TempDir tmp;
  RecordOptions o;
  o.output = tmp.file("job.braid");
  o.command = {"fake_nccl_job_plain"};
  unsetenv("NCCL_PROFILER_PLUGIN");
  auto env = capture_environment(o);
  std::map<std::string, std::string> m(env.begin(), env.end());
  ASSERT_EQ(m["LD_PRELOAD"].rfind(CAPTURE_AGENT_LIB, 0), 0u);
  ASSERT_EQ(m["NCCL_PROFILER_PLUGIN"], CAPTURE_AGENT_LIB);
  pid_t pid = fork();
  if (pid == 0) {
    unsetenv("NCCL_PROFILER_PLUGIN");
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("FAKE_NCCL_DIR", tmp.path().c_str(), 1);
    if (!freopen(tmp.file("out").c_str(), "w", stdout)) _exit(4);
    execl(CAPTURE_FAKE_NCCL_JOB_PLAIN, CAPTURE_FAKE_NCCL_JOB_PLAIN, "0", "1", tmp.path().c_str(),
          nullptr);
    _exit(5);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  std::ifstream out(tmp.file("out"));
  std::string line;
  std::getline(out, line);
  EXPECT_EQ(line, "calls=26");
  auto files = recorded_files(o.output);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("job.rank0.braid"), std::string::npos);
  TraceReader r(files[0]);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM collectives"), 16);  // 13 + 2 + 1
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM collectives WHERE algo_id != 0"), 14);
  EXPECT_EQ(r.runs()[0].source, "fake_nccl_job_plain");
}

}  // namespace
}  // namespace braid::capture

// A capture killed with SIGKILL leaves a valid .braid holding everything flushed before the
// kill: a child writes through the agent's real path (Pipeline -> Collector -> FileSink) and
// acknowledges each flushed batch on a pipe; the parent kills it mid-stream and reopens the file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture/file_sink.h"
#include "capture/pipeline.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::capture {
namespace {

constexpr int kBatch = 500;

// Child: writes batches forever, acknowledging each once flushed.
[[noreturn]] void write_until_killed(const std::string& path, int ack_fd, bool through_pipeline) {
  static CommBook book;
  static int handle;
  CommRecord* comm = book.add(&handle, "nccl:durable", "uid", 0, 2);
  auto sink = std::make_unique<FileSink>(path, FileSinkOptions{"durability test", "test", ""});
  if (!through_pipeline) {
    for (int32_t b = 0;; ++b) {
      for (int i = 0; i < kBatch; ++i) {
        Kernel k;
        k.start = int64_t{b} * kBatch + i;
        k.end = k.start + 1;
        k.name = sink->intern("kernel " + std::to_string(i % 7));
        k.correlation = k.start;
        sink->add(k);
      }
      sink->checkpoint();
      if (write(ack_fd, &b, sizeof b) != sizeof b) _exit(3);
    }
  }
  Pipeline pipe(std::move(sink), 0, 5, PipelineHooks{}, PipelineOptions{10000, 10000, 1 << 20},
                nullptr);
  int64_t id = 1;
  for (int32_t b = 0;; ++b) {
    for (int i = 0; i < kBatch; ++i) {
      NcclCall c;
      c.call_id = id++;
      c.external_id = c.call_id;
      c.comm = comm;
      c.seq = comm->next_seq++;
      c.op = CollOp::AllReduce;
      c.dtype = "float32";
      c.dtype_bytes = 4;
      c.count = 16;
      c.enqueue = c.call_id * 10;
      c.ret = c.enqueue + 5;
      pipe.post(c);
    }
    pipe.flush();
    if (write(ack_fd, &b, sizeof b) != sizeof b) _exit(3);
  }
}

int64_t run_and_kill(const std::string& path, bool through_pipeline, int batches_before_kill) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    try {
      write_until_killed(path, fds[1], through_pipeline);
    } catch (...) {
      _exit(2);
    }
  }
  close(fds[1]);
  int32_t last = -1, b = 0;
  while (last + 1 < batches_before_kill && read(fds[0], &b, sizeof b) == sizeof b) last = b;
  kill(child, SIGKILL);
  int st = 0;
  waitpid(child, &st, 0);
  close(fds[0]);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "child ended on its own: " << st;
  return int64_t{last + 1} * kBatch;  // rows acknowledged as durable
}

TEST(Durability, SinkKilledMidStreamKeepsEveryCommittedRow) {
  test::TempDir tmp;
  std::string path = tmp.file("killed.rank0.braid");
  int64_t acked = run_and_kill(path, false, 20);
  ASSERT_GE(acked, 20 * kBatch);
  TraceReader r(path);  // opens: a valid .braid
  ASSERT_EQ(r.runs().size(), 1u);
  EXPECT_EQ(r.runs()[0].kind, RunKind::Captured);
  int64_t n = 0;
  bool names_ok = true;
  r.kernels(1, [&](const Kernel& k) {
    ++n;
    names_ok = names_ok && r.str(k.name).rfind("kernel ", 0) == 0;
    return true;
  });
  EXPECT_GE(n, acked);
  EXPECT_EQ(n % kBatch, 0);  // whole transactions only
  EXPECT_TRUE(names_ok);     // every row's string was committed with it
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM pragma_integrity_check WHERE integrity_check != 'ok'"), 0);
}

TEST(Durability, PipelineKilledMidStreamKeepsEveryFlushedCall) {
  test::TempDir tmp;
  std::string path = tmp.file("killed.rank0.braid");
  int64_t acked = run_and_kill(path, true, 10);
  ASSERT_GE(acked, 10 * kBatch);
  TraceReader r(path);
  int64_t calls = sql::scalar(r.db(), "SELECT COUNT(*) FROM nccl_calls");
  EXPECT_GE(calls, acked);
  // Their sequence numbers are 0..calls-1: nothing lost in the middle.
  EXPECT_EQ(sql::scalar(r.db(), "SELECT MAX(seq) FROM nccl_calls"), calls - 1);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(DISTINCT call_id) FROM nccl_calls"), calls);
}

TEST(Durability, CleanCloseLeavesOneFileWithEverything) {
  test::TempDir tmp;
  std::string path = tmp.file("clean.braid");
  {
    FileSink s(path, {"x", "test", ""});
    for (int i = 0; i < 1000; ++i) {
      Kernel k;
      k.start = i;
      k.end = i + 1;
      s.add(k);
    }
    s.close();
  }
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
  TraceReader r(path);
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM kernels"), 1000);
}

}  // namespace
}  // namespace braid::capture

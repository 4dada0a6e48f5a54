// `braid record` on a GPU machine: the CUDA test program (three streams, events, copies, NVTX
// steps, NCCL on a one-rank communicator) and a one-rank PyTorch job. Skips, saying why, where
// capture is not possible (no driver, no GPU) or PyTorch is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "capture/launcher.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/test_util.h"

namespace braid::capture {
namespace {

int sh(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

std::string record(const test::TempDir& tmp, const std::string& opts, const std::string& cmd) {
  std::string out = tmp.file("job.braid");
  int rc = sh(std::string(BRAID_CLI) + " record -f -o " + out + " " + opts + " -- " + cmd + " >" +
              tmp.file("stdout") + " 2>" + tmp.file("stderr"));
  std::ifstream err(tmp.file("stderr"));
  std::stringstream ss;
  ss << err.rdbuf();
  EXPECT_EQ(rc, 0) << ss.str();
  auto files = recorded_files(out);
  EXPECT_EQ(files.size(), 1u) << ss.str();
  return files.empty() ? "" : files[0];
}

struct Counts {
  int64_t our_kernels = 0;
  std::set<int64_t> our_streams;
  int64_t htod = 0, dtoh = 0, memset = 0;
  std::vector<Collective> colls;
  std::set<std::string> apis;
};

Counts count(const TraceReader& r) {
  Counts c;
  r.kernels(1, [&](const Kernel& k) {
    const std::string& n = r.str(k.name);
    if (n.find("braid_scale") != std::string::npos || n.find("braid_add") != std::string::npos) {
      ++c.our_kernels;
      c.our_streams.insert(k.stream);
    }
    return true;
  });
  r.memcpys(1, [&](const Memcpy& m) {
    c.htod += m.kind == MemKind::HtoD;
    c.dtoh += m.kind == MemKind::DtoH;
    c.memset += m.kind == MemKind::Memset;
    return true;
  });
  r.collectives(1, [&](const Collective& x) {
    c.colls.push_back(x);
    return true;
  });
  r.api_calls(1, [&](const ApiCall& a) {
    c.apis.insert(r.str(a.name));
    return true;
  });
  return c;
}

class GpuRecord : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = capture_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "no capture possible here: " << reason;
  }
};

TEST_F(GpuRecord, StreamsEventsCopiesNvtxAndNccl) {
  test::TempDir tmp;
  std::string file = record(tmp, "", std::string(CAPTURE_CUDA_PROGRAM) + " 4");
  ASSERT_FALSE(file.empty());
  TraceReader r(file);
  Counts c = count(r);
  EXPECT_EQ(c.our_kernels, 12);  // 3 per step
  EXPECT_EQ(c.our_streams.size(), 3u);
  EXPECT_GE(c.htod, 4);
  EXPECT_GE(c.dtoh, 4);
  EXPECT_GE(c.memset, 4);
  ASSERT_EQ(c.colls.size(), 12u);  // 3 NCCL calls per step
  std::map<std::string, int> ops;
  for (auto& x : c.colls) {
    ++ops[std::string(to_string(x.op))];
    EXPECT_EQ(r.str(x.comm).rfind("nccl:", 0), 0u);
    // Linked to what carried it on the GPU (a kernel, or a copy on one rank).
    EXPECT_NE(x.stream, -1) << "seq " << x.seq << ": collective not linked to GPU work";
    EXPECT_NE(x.kernel_ref, 0);
    EXPECT_GE(x.start, x.enqueue);
  }
  EXPECT_EQ(ops["allreduce"], 8);
  EXPECT_EQ(ops["broadcast"], 4);
  auto comms = r.communicators(1);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].nranks, 1);
  auto steps = r.steps(1);
  EXPECT_EQ(steps.size(), 4u);
  for (const char* api : {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaEventRecord", "sync:stream"}) {
    bool found = false;
    for (auto& a : c.apis) found |= a.rfind(api, 0) == 0;
    EXPECT_TRUE(found) << api;
  }
  auto ranks = r.ranks(1);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_GE(ranks[0].device, 0);
  EXPECT_FALSE(ranks[0].device_name.empty());
  EXPECT_FALSE(ranks[0].nccl_version.empty());
  bool fitted = false;
  for (auto& d : r.diagnostics(1)) {
    fitted |= d.code == "capture.clock_fit";
    EXPECT_NE(d.code, "capture.dropped_records") << d.detail;
  }
  EXPECT_TRUE(fitted);
}

TEST_F(GpuRecord, StepWindowCapturesOnlyItsSteps) {
  test::TempDir tmp;
  std::string file = record(tmp, "--steps 1-2", std::string(CAPTURE_CUDA_PROGRAM) + " 4");
  ASSERT_FALSE(file.empty());
  TraceReader r(file);
  Counts c = count(r);
  EXPECT_EQ(c.our_kernels, 6);
  EXPECT_EQ(c.colls.size(), 6u);
  // Sequence numbers keep counting outside the window: steps 1-2 are seq 3..8.
  std::set<int64_t> seqs;
  for (auto& x : c.colls) seqs.insert(x.seq);
  EXPECT_EQ(*seqs.begin(), 3);
  EXPECT_EQ(*seqs.rbegin(), 8);
}

TEST_F(GpuRecord, CudaProfilerApiWindow) {
  test::TempDir tmp;
  std::string file = record(tmp, "--cuda-profiler-api", std::string(CAPTURE_CUDA_PROGRAM) + " 4");
  ASSERT_FALSE(file.empty());
  TraceReader r(file);
  EXPECT_EQ(count(r).our_kernels, 6);
}

TEST_F(GpuRecord, PyTorchOneRankAllReduce) {
  if (sh("python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' "
         ">/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with a CUDA build of torch is not available";
  test::TempDir tmp;
  std::ofstream(tmp.file("job.py")) << R"PY(
import torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda")
w = torch.randn(1024, 1024, device="cuda")
for i in range(5):
    torch.cuda.nvtx.range_push(f"step {i}")
    y = w @ w
    dist.all_reduce(x)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
assert x[0].item() == 1.0
dist.destroy_process_group()
)PY";
  std::string file = record(tmp, "", "python3 " + tmp.file("job.py"));
  ASSERT_FALSE(file.empty());
  TraceReader r(file);
  int64_t kernels = 0;
  r.kernels(1, [&](const Kernel&) { return ++kernels > 0; });
  EXPECT_GT(kernels, 5);
  int64_t allreduces = 0;
  r.collectives(1, [&](const Collective& c) {
    allreduces += c.op == CollOp::AllReduce;
    return true;
  });
  EXPECT_GE(allreduces, 5);
  EXPECT_EQ(r.steps(1).size(), 5u);
}

}  // namespace
}  // namespace braid::capture

#include "analysis/synthetic.h"

#include <algorithm>

#include "trace/json.h"
#include "trace/writer.h"

namespace braid::analysis {

namespace {
// Deterministic jitter in [-j, j] from a small hash of (rank, index).
Ns jitter(Ns j, int rank, int index) {
  if (j <= 0) return 0;
  uint64_t h = (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ULL) ^
               (static_cast<uint64_t>(index) * 0xC2B2AE3D27D4EB4FULL);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  return static_cast<Ns>(h % static_cast<uint64_t>(2 * j + 1)) - j;
}
}  // namespace

int64_t write_synthetic_job(const std::string& path, const SyntheticJob& job) {
  TraceWriter w(path, TraceWriter::Mode::Overwrite);
  int64_t run = w.begin_run(RunKind::Imported, "synthetic", "synthetic", "synthetic DP job");
  const Ns us = 1000;
  StrId gemm = w.intern("sm90_xmma_gemm_bf16bf16_bf16f32"),
        opt = w.intern("multi_tensor_apply_kernel"),
        nccl = w.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
        launch = w.intern("cudaLaunchKernel"), record = w.intern("cudaEventRecord"),
        wait = w.intern("cudaStreamWaitEvent"), comm = w.intern(job.comm),
        f32 = w.intern("float32");
  Communicator cm;
  cm.comm = job.comm;
  cm.nranks = job.nranks;
  std::vector<int> members(static_cast<size_t>(std::max(job.nranks, 0)));
  for (int r = 0; r < job.nranks; ++r) members[r] = r;
  cm.ranks = json::int_array(members, json::Writer::Style::Spaced);
  cm.label = "synthetic all-reduce group";
  cm.backend = "nccl";
  w.add_communicator(run, cm);

  auto written = [&](int r) {
    return job.only_ranks.empty() ||
           std::find(job.only_ranks.begin(), job.only_ranks.end(), r) != job.only_ranks.end();
  };
  for (int r = 0; r < job.nranks; ++r) {
    if (!written(r)) continue;
    RankInfo info;
    info.rank = r;
    info.world_size = job.nranks;
    info.host = "node0";
    info.device = r;
    info.device_name = "NVIDIA H100 80GB HBM3";
    info.backend = "nccl";
    info.source = "synthetic";
    w.add_rank(run, info);
    w.add_stream(run, {r, 7, true, "stream 7"});
    w.add_stream(run, {r, 13, true, "stream 13"});
    w.add_stream(run, {r, 100 + r, false, "thread main"});
  }

  int64_t corr = 1;
  for (int s = 0; s < job.steps; ++s) {
    const Ns S = job.base + s * job.step_period;
    auto d_of = [&](int r) { return r == job.straggler ? job.straggler_delay : 0; };
    // True arrival times of the two all-reduces.
    Ns last_a = 0;
    for (int r = 0; r < job.nranks; ++r) last_a = std::max(last_a, S + (200 * us + d_of(r)));
    const Ns end_a = last_a + 80 * us;
    Ns last_b = 0;
    for (int r = 0; r < job.nranks; ++r)
      last_b = std::max(last_b, std::max(end_a, S + 300 * us + d_of(r)));
    const Ns end_b = last_b + 80 * us;
    for (int r = 0; r < job.nranks; ++r) {
      if (!written(r)) continue;
      const Ns skew = r < static_cast<int>(job.clock_skew.size()) ? job.clock_skew[r] : 0;
      const Ns d = d_of(r);
      const int64_t tid = 100 + r;
      auto kernel = [&](int64_t stream, Ns start, Ns end, StrId name, Category cat, Ns at) {
        Kernel k{r, stream, start + skew, end + skew, name, cat, corr, 0};
        w.add(run, k);
        w.add(run, ApiCall{r, tid, at + skew, at + skew + 2 * us, launch, ApiKind::Runtime, corr, 0});
        return corr++;
      };
      auto host = [&](StrId name, Ns at) {
        w.add(run, ApiCall{r, tid, at + skew, at + skew + 1 * us, name, ApiKind::Runtime, 0, 0});
      };
      w.add_step(run,
                 {r, s, S - 2 * us + skew, end_b + 20 * us + skew});  // host enters, then launches
      kernel(7, S, S + 100 * us, gemm, Category::Gemm, S - 1 * us);
      kernel(7, S + 100 * us, S + 200 * us + d, gemm, Category::Gemm, S + 5 * us);
      host(record, S + 8 * us);
      kernel(7, S + 200 * us + d, S + 300 * us + d, gemm, Category::Gemm, S + 10 * us);
      host(record, S + 12 * us);
      auto collective = [&](int index, Ns start, Ns end, Ns at) {
        Ns e = end + jitter(job.end_jitter, r, s * 2 + index);
        host(wait, at - 1 * us);
        int64_t c = kernel(13, start, e, nccl, Category::CommAllReduce, at);
        Collective col;
        col.rank = r;
        col.comm = comm;
        col.seq = job.record_seq ? s * 2 + index : -1;
        col.op = CollOp::AllReduce;
        col.dtype = r == job.untyped_rank ? 0 : f32;
        col.in_count = col.out_count = job.count;
        col.bytes = r == job.untyped_rank ? -1 : job.count * 4;
        col.stream = 13;
        col.start = start + skew;
        col.end = e + skew;
        col.enqueue = at + skew;
        col.group_size = job.nranks;
        col.name = nccl;
        col.kernel_ref = c;
        w.add(run, col);
      };
      const Ns start_a = S + 200 * us + d;
      const bool drop = r == job.drop_rank && s == job.drop_step;
      if (!drop) collective(0, start_a, end_a, S + 15 * us);
      const Ns start_b = std::max(drop ? 0 : end_a, S + 300 * us + d);
      collective(1, start_b, end_b, S + 20 * us);
      kernel(7, end_b, end_b + 20 * us, opt, Category::Elementwise, S + 25 * us);
    }
  }
  w.commit();
  return run;
}

}  // namespace braid::analysis

// A small trace with known events at known times, written with TraceWriter, for the view's
// tests: two ranks (rank 1's clock 1 us behind, fixed by clock_offset_ns), on the job axis:
//   stream 7:  gemm [10, 40) us, vector_add [45, 50) us, allreduce kernel rank 0 [55, 90) us,
//              rank 1 [60, 90) us (rank 0 waits 5 us), with its collective (pg0, seq 0, 64 MiB)
//   stream 20: memcpy HtoD [0, 8) us, attention [92, 100) us
//   thread 100: aten::mm [9, 39) us enclosing cudaLaunchKernel [9.5, 10.5) us
//   one step per rank: [0, 100) us
// Times are offsets from kBase, an epoch-like value a double cannot hold to the nanosecond.
// Run 2 (optional) is the same job `kRun2Base - kBase` later, with the allreduce ending at
// 70 us instead of 90 us: the "after" run of compare mode.
#pragma once

#include <string>

#include "trace/writer.h"

namespace braid::test {

inline constexpr Ns kBase = 1'700'000'000'123'456'789LL;
inline constexpr Ns kRun2Base = kBase + 5'000'000'000LL;
inline constexpr Ns kRank1Offset = 1000;
inline constexpr int64_t kAllReduceBytes = 64LL << 20;

inline void write_known_run(TraceWriter& w, RunKind kind, Ns base, Ns allreduce_end_us,
                            const std::string& label) {
  int64_t run = w.begin_run(kind, "known_trace.h", "test", label);
  StrId gemm = w.intern("gemm_kernel_A"), add = w.intern("vector_add"),
        nccl = w.intern("ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
        attn = w.intern("flash_attention_fwd"), mm = w.intern("aten::mm"),
        launch = w.intern("cudaLaunchKernel"), pg = w.intern("pg0"), ring = w.intern("RING"),
        ll = w.intern("LL"), f32 = w.intern("float32"), h2d = w.intern("Memcpy HtoD");
  for (int32_t rank = 0; rank < 2; ++rank) {
    Ns off = rank == 1 ? kRank1Offset : 0;
    auto t = [&](double us) { return base + static_cast<Ns>(us * 1000) - off; };  // rank clock
    RankInfo ri;
    ri.rank = rank;
    ri.world_size = 2;
    ri.host = "node0";
    ri.device = rank;
    ri.device_name = "Test GPU";
    ri.clock_offset = off;
    w.add_rank(run, ri);
    w.add_stream(run, {rank, 7, true, "stream 7"});
    w.add_stream(run, {rank, 20, true, "stream 20"});
    w.add_stream(run, {rank, 100, false, "thread 100"});
    w.add(run, Kernel{rank, 7, t(10), t(40), gemm, Category::Gemm, 1, 0});
    w.add(run, Kernel{rank, 7, t(45), t(50), add, Category::Elementwise, 2, 0});
    double ar0 = rank == 0 ? 55 : 60;
    w.add(run, Kernel{rank, 7, t(ar0), t(static_cast<double>(allreduce_end_us)), nccl,
                      Category::CommAllReduce, 3, 0});
    w.add(run, Kernel{rank, 20, t(92), t(100), attn, Category::Attention, 4, 0});
    w.add(run, Memcpy{rank, 20, t(0), t(8), MemKind::HtoD, 1 << 20, h2d, 5});
    w.add(run, ApiCall{rank, 100, t(9), t(39), mm, ApiKind::CpuOp, 0, 0});
    w.add(run, ApiCall{rank, 100, t(9.5), t(10.5), launch, ApiKind::Runtime, 1, 0});
    Collective c;
    c.rank = rank;
    c.comm = pg;
    c.seq = 0;
    c.op = CollOp::AllReduce;
    c.dtype = f32;
    c.in_count = c.out_count = kAllReduceBytes / 4;
    c.bytes = kAllReduceBytes;
    c.stream = 7;
    c.start = t(ar0);
    c.end = t(static_cast<double>(allreduce_end_us));
    c.algo = ring;
    c.proto = ll;
    c.group_size = 2;
    c.name = nccl;
    c.kernel_ref = 3;
    w.add(run, c);
    w.add_step(run, Step{rank, 0, t(0), t(100)});
  }
  w.add_communicator(run, Communicator{"pg0", 2, "[0,1]", "default_pg", "nccl"});
}

// run 1: the trace above; with `two_runs`, run 2 as well.
inline void write_known_trace(const std::string& path, bool two_runs = false) {
  TraceWriter w(path, TraceWriter::Mode::Overwrite);
  write_known_run(w, RunKind::Imported, kBase, 90, "before");
  if (two_runs) write_known_run(w, RunKind::Simulated, kRun2Base, 70, "after");
  w.commit();
}

}  // namespace braid::test

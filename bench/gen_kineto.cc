#include "bench/gen_kineto.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string_view>
#include <vector>

#include "bench/gen_kineto_catalog.h"
#include "trace/error.h"
#include "trace/output_file.h"

namespace braid::bench {
namespace {

namespace fs = std::filesystem;
using std::string_view;

using namespace kineto_gen;  // NOLINT: the generator's own catalogue

class Gen {
 public:
  Gen(const KinetoGenOptions& o, BufferedOut& w) : o_(o), w_(w), rng_(o.seed) {
    c_.rank = o.rank;
    c_.world_size = o.world_size;
    device_ = o.rank % 8;
    pid_ = 1000 + static_cast<int64_t>(rng_.in(0, 3'000'000));
    tid_main_ = pid_;
    tid_bwd_ = pid_ + 1 + rng_.in(10, 2000);
    t_ = (3'000'000'000'000 + rng_.in(0, 1'000'000'000'000)) * 1000 + rng_.in(0, 999);  // ns
    trace_start_ = t_;
    gpu_[0] = gpu_[1] = gpu_[2] = t_;
    cpu_main_ = cpu_bwd_ = t_ + 1'000'000;
    corr_ = 1 + rng_.in(100, 5000);

    int tp = std::gcd(o.world_size, 8);
    default_pg_ = {"0", "default_pg", ranks_string(0, o.world_size), o.world_size, kDpStream};
    int tp0 = o.rank / tp * tp;
    // As PyTorch names them: every rank creates every TP group, in order, after the default one.
    tp_pg_ = {std::to_string(1 + o.rank / tp), "tp", ranks_string(tp0, tp), tp, kTpStream};
  }

  KinetoGenCounts run() {
    header();
    do step();
    while (w_.bytes() < o_.target_bytes);
    footer();
    w_.flush();
    c_.bytes = static_cast<int64_t>(w_.bytes());
    return c_;
  }

 private:
  static std::string ranks_string(int first, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) {
      if (i) s += ", ";
      s += std::to_string(first + i);
    }
    return s + "]";
  }

  // ---- file structure ----
  void header() {
    w_.put("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n");
    int ndev = std::min(o_.world_size, 8);
    for (int d = 0; d < ndev; ++d) {
      w_.put(d ? ",\n    {\n" : "    {\n");
      w_.put("      \"id\": ");
      w_.num(d);
      w_.put(
          ", \"name\": \"NVIDIA H100 80GB HBM3\", \"totalGlobalMem\": 85021163520,\n"
          "      \"computeMajor\": 9, \"computeMinor\": 0,\n"
          "      \"maxThreadsPerBlock\": 1024, \"maxThreadsPerMultiprocessor\": 2048,\n"
          "      \"regsPerBlock\": 65536, \"warpSize\": 32,\n"
          "      \"sharedMemPerBlock\": 49152, \"numSms\": 132\n"
          "    , \"regsPerMultiprocessor\": 65536, \"sharedMemPerBlockOptin\": 232448, "
          "\"sharedMemPerMultiprocessor\": 233472\n    }");
    }
    w_.put(
        "\n  ],\n  \"cupti_version\": 24,\n  \"cuda_runtime_version\": 12040,\n"
        "  \"cuda_driver_version\": 12040,\n");
    w_.put("  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": ");
    w_.num(o_.rank);
    w_.put(", \"world_size\": ");
    w_.num(o_.world_size);
    w_.put(", \"pg_count\": ");
    w_.num(tp_pg_.size > 1 ? 2 : 1);
    w_.put(", \"pg_config\": [");
    pg_config(default_pg_);
    if (tp_pg_.size > 1) {
      w_.put(", ");
      pg_config(tp_pg_);
    }
    w_.put(
        "], \"nccl_version\": \"2.21.5\"},\n  \"record_shapes\": 1,\n"
        "  \"with_stack\": 0,\n  \"traceEvents\": [\n");
  }
  void pg_config(const PG& pg) {
    w_.put("{\"pg_name\": \"");
    w_.put(pg.name);
    w_.put("\", \"pg_desc\": \"");
    w_.put(pg.desc);
    w_.put("\", \"backend_config\": \"cuda:nccl\", \"pg_size\": ");
    w_.num(pg.size);
    w_.put(", \"ranks\": ");
    w_.put(pg.ranks);
    w_.put("}");
  }

  void footer() {
    Ns ts = trace_start_;
    auto meta = [&](string_view what, int64_t pid, int64_t tid, string_view key, string_view sval,
                    int64_t ival, bool is_str) {
      open();
      w_.put("    \"name\": \"");
      w_.put(what);
      w_.put("\", \"ph\": \"M\", \"ts\": ");
      w_.us(ts);
      w_.put(", \"pid\": ");
      w_.num(pid);
      w_.put(", \"tid\": ");
      w_.num(tid);
      w_.put(",\n    \"args\": {\n      \"");
      w_.put(key);
      w_.put("\": ");
      if (is_str) {
        w_.put("\"");
        w_.put(sval);
        w_.put("\"");
      } else {
        w_.num(ival);
      }
      w_.put("\n    }\n  }");
      ++c_.metadata;
    };
    meta("process_name", pid_, 0, "name", "python3.10", 0, true);
    meta("process_labels", pid_, 0, "labels", "CPU", 0, true);
    meta("process_sort_index", pid_, 0, "sort_index", "", pid_, false);
    std::string gpu_label = "GPU " + std::to_string(device_);
    meta("process_name", device_, 0, "name", "python3.10", 0, true);
    meta("process_labels", device_, 0, "labels", gpu_label, 0, true);
    meta("process_sort_index", device_, 0, "sort_index", "", 16777216 + device_, false);
    for (int s : {kComputeStream, kTpStream, kDpStream}) {
      if (s != kComputeStream && o_.world_size == 1) continue;
      if (s == kTpStream && tp_pg_.size == 1) continue;
      std::string n = "stream " + std::to_string(s) + " ";
      meta("thread_name", device_, s, "name", n, 0, true);
      meta("thread_sort_index", device_, s, "sort_index", "", s, false);
    }
    for (auto [tid, what] : {std::pair<int64_t, string_view>{tid_main_, "pt_main_thread"},
                             {tid_bwd_, "pt_autograd_0"}}) {
      std::string n = "thread " + std::to_string(tid) + " (" + std::string(what) + ")";
      meta("thread_name", pid_, tid, "name", n, 0, true);
      meta("thread_sort_index", pid_, tid, "sort_index", "", tid, false);
    }
    // The span and instants Kineto closes every trace with (string pids: importers skip them).
    Ns end = std::max({cpu_main_, cpu_bwd_, gpu_[0], gpu_[1], gpu_[2]});
    open();
    w_.put("    \"ph\": \"X\", \"cat\": \"Trace\", \"ts\": ");
    w_.us(trace_start_);
    w_.put(", \"dur\": ");
    w_.us(end - trace_start_);
    w_.put(
        ",\n    \"pid\": \"Spans\", \"tid\": \"PyTorch Profiler\",\n"
        "    \"name\": \"PyTorch Profiler (0)\",\n    \"args\": {\n      \"Op count\": 0\n"
        "    }\n  }");
    open();
    w_.put(
        "    \"name\": \"Iteration Start: PyTorch Profiler\", \"ph\": \"i\", \"s\": \"g\",\n"
        "    \"pid\": \"Traces\", \"tid\": \"Trace PyTorch Profiler\", \"ts\": ");
    w_.us(trace_start_);
    w_.put("\n  }");
    open();
    w_.put(
        "    \"name\": \"Record Window End\", \"ph\": \"i\", \"s\": \"g\",\n"
        "    \"pid\": \"\", \"tid\": \"\", \"ts\": ");
    w_.us(end + 1000);
    w_.put("\n  }");
    c_.other += 3;
    w_.put("\n  ],\n  \"traceName\": \"/tmp/braid_gen_rank");
    w_.num(o_.rank);
    w_.put(".pt.trace.json\",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": ");
    w_.num(1'765'000'000'000'000'000);
    w_.put("\n}\n");
  }

  // Starts one element of traceEvents.
  void open() { w_.put(c_.events++ ? ",\n  {\n" : "  {\n"); }

  // ---- single events ----
  void cpu_op(string_view name, int64_t tid, Ns ts, Ns dur, int64_t ext, int64_t seq = -1) {
    open();
    w_.put("    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"");
    w_.put(name);
    pid_tid_ts(pid_, tid, ts, dur);
    w_.put("\n      \"External id\": ");
    w_.num(ext);
    w_.put(",\"Record function id\": ");
    w_.num(ext - 1);
    if (seq >= 0) {
      w_.put(", \"Sequence number\": ");
      w_.num(seq);
      w_.put(", \"Fwd thread id\": 1");
    }
    w_.put(", \"Ev Idx\": ");
    w_.num(ev_idx_++);
    w_.put("\n    }\n  }");
    ++c_.cpu_ops;
  }
  void pid_tid_ts(int64_t pid, int64_t tid, Ns ts, Ns dur) {
    w_.put("\", \"pid\": ");
    w_.num(pid);
    w_.put(", \"tid\": ");
    w_.num(tid);
    w_.put(",\n    \"ts\": ");
    w_.us(ts);
    w_.put(", \"dur\": ");
    w_.us(dur);
    w_.put(",\n    \"args\": {");
  }
  void runtime(string_view name, int cbid, Ns ts, Ns dur, int64_t tid, int64_t ext, int64_t corr) {
    open();
    w_.put("    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"");
    w_.put(name);
    pid_tid_ts(pid_, tid, ts, dur);
    w_.put("\n      \"External id\": ");
    w_.num(ext);
    w_.put(",      \"cbid\": ");
    w_.num(cbid);
    w_.put(", \"correlation\": ");
    w_.num(corr);
    w_.put("\n    }\n  }");
    ++c_.runtime;
  }
  void flow(bool start, int64_t corr, int64_t pid, int64_t tid, Ns ts) {
    open();
    w_.put(start ? "    \"ph\": \"s\", \"id\": " : "    \"ph\": \"f\", \"id\": ");
    w_.num(corr);
    w_.put(", \"pid\": ");
    w_.num(pid);
    w_.put(", \"tid\": ");
    w_.num(tid);
    w_.put(", \"ts\": ");
    w_.us(ts);
    w_.put(start ? ",\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"\n  }"
                 : ",\n    \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"\n  }");
    ++c_.flows;
  }
  void kernel_head(string_view name, int stream, Ns ts, Ns dur, int64_t ext, int64_t corr, int grid,
                   int block, int regs, int smem) {
    open();
    w_.put("    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"");
    w_.put(name);
    pid_tid_ts(device_, stream, ts, dur);
    w_.put("\n      \"External id\": ");
    w_.num(ext);
    w_.put(",      \"queued\": 0, \"device\": ");
    w_.num(device_);
    w_.put(", \"context\": 1,      \"stream\": ");
    w_.num(stream);
    w_.put(", \"correlation\": ");
    w_.num(corr);
    w_.put(",      \"registers per thread\": ");
    w_.num(regs);
    w_.put(",      \"shared memory\": ");
    w_.num(smem);
    // Occupancy figures as Kineto computes them (6 decimals).
    w_.put(",      \"blocks per SM\": ");
    w_.fixed(int64_t{grid} * 1'000'000 / kSms, 6);
    w_.put(",      \"warps per SM\": ");
    w_.fixed(int64_t{grid} * (block / 32) * 1'000'000 / kSms, 6);
    w_.put(",      \"grid\": [");
    w_.num(grid);
    w_.put(", 1, 1],      \"block\": [");
    w_.num(block);
    w_.put(", 1, 1],      \"est. achieved occupancy %\": ");
    w_.num(std::min<int64_t>(100, int64_t{grid} * block * 100 / (kSms * 2048)));
    ++c_.kernels;
  }
  void gpu_mem(bool set, string_view name, int stream, Ns ts, Ns dur, int64_t ext, int64_t corr,
               int64_t bytes) {
    open();
    w_.put(set ? "    \"ph\": \"X\", \"cat\": \"gpu_memset\", \"name\": \""
               : "    \"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"");
    w_.put(name);
    pid_tid_ts(device_, stream, ts, dur);
    w_.put("\n      \"External id\": ");
    w_.num(ext);
    w_.put(",      \"device\": ");
    w_.num(device_);
    w_.put(", \"context\": 1,      \"stream\": ");
    w_.num(stream);
    w_.put(", \"correlation\": ");
    w_.num(corr);
    w_.put(",      \"bytes\": ");
    w_.num(bytes);
    w_.put(", \"memory bandwidth (GB/s)\": ");
    w_.fixed(bytes * 1'000'000 / std::max<Ns>(dur, 1), 6);  // bytes/ns = GB/s
    w_.put("\n    }\n  }");
    ++(set ? c_.memsets : c_.memcpys);
  }
  void annotation(bool gpu, string_view name, int64_t num, int64_t pid, int64_t tid, Ns ts, Ns dur,
                  int64_t ext) {
    open();
    w_.put(gpu ? "    \"ph\": \"X\", \"cat\": \"gpu_user_annotation\", \"name\": \""
               : "    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"");
    w_.put(name);
    if (num >= 0) w_.num(num);
    pid_tid_ts(pid, tid, ts, dur);
    w_.put("\n      \"External id\": ");
    w_.num(ext);
    if (!gpu) {
      w_.put(",\"Record function id\": ");
      w_.num(ext - 1);
      w_.put(", \"Ev Idx\": ");
      w_.num(ev_idx_++);
    }
    w_.put("\n    }\n  }");
    ++(gpu ? c_.gpu_user_annotations : c_.user_annotations);
  }

  // ---- composite operations ----
  Ns gap(int64_t lo, int64_t hi) { return rng_.in(lo, hi); }
  // The CPU clock of a thread: the main (forward) one or the backward one.
  Ns& cpu_of(int64_t tid) { return tid == tid_main_ ? cpu_main_ : cpu_bwd_; }

  // CPU ops nested on one thread (at most 4 deep), the innermost last: open() starts them one
  // inside the other, close() ends them innermost first and writes them.
  struct Nest {
    std::initializer_list<string_view> ops;
    int64_t tid;
    Ns start[4] = {}, end[4] = {};
    int64_t ext[4] = {};
    int64_t inner_ext() const { return ext[ops.size() - 1]; }
  };
  // Starts the ops of `n` after their thread's clock: the outermost within 1-`first_hi` ns, each
  // next within 0.8-`step_hi` ns of its parent. Returns when the innermost has opened.
  Ns open(Nest& n, int64_t first_hi, int64_t step_hi) {
    Ns t = cpu_of(n.tid) + gap(1'000, first_hi);
    for (size_t i = 0; i < n.ops.size(); ++i) {
      n.start[i] = t;
      n.ext[i] = ++ext_;
      t += gap(800, step_hi);
    }
    return t;
  }
  // Ends the ops of `n` from `t` on, innermost first (each within 0.3-`close_hi` ns of its child),
  // moves their thread's clock past them and writes them (sequence number `seq`, -1: none).
  void close(Nest& n, Ns t, int64_t close_hi, int64_t seq) {
    for (size_t i = n.ops.size(); i-- > 0;) {
      n.end[i] = t;
      t += gap(300, close_hi);
    }
    cpu_of(n.tid) = t;
    for (size_t i = 0; i < n.ops.size(); ++i)
      cpu_op(*(n.ops.begin() + i), n.tid, n.start[i], n.end[i] - n.start[i], n.ext[i], seq);
  }

  // Nested CPU ops whose innermost launches `kernels` in turn on the compute stream.
  void launch(int64_t tid, std::initializer_list<string_view> ops,
              std::initializer_list<const KernelSpec*> kernels, int64_t seq = -1) {
    Nest n{ops, tid};
    Ns t = open(n, 6'000, 3'000);
    struct Launch {
      Ns rt, rt_dur, k, k_dur;
      int64_t corr;
    } l[4];
    size_t nk = 0;
    for (const KernelSpec* k : kernels) {
      Launch& x = l[nk++];
      x.rt = t;
      x.rt_dur = gap(3'000, 9'000);
      x.corr = corr_++;
      x.k_dur = rng_.in(k->dur_lo, k->dur_hi);
      x.k = std::max(gpu_[0] + gap(800, 2'500), x.rt + gap(4'000, 9'000));
      gpu_[0] = x.k + x.k_dur;
      fwd_first_ = std::min(fwd_first_, x.k);
      t = x.rt + x.rt_dur + gap(500, 2'000);
    }
    close(n, t, 1'500, seq);
    size_t i = 0;
    for (const KernelSpec* k : kernels) {
      const Launch& x = l[i++];
      runtime("cudaLaunchKernel", 211, x.rt, x.rt_dur, tid, n.inner_ext(), x.corr);
      flow(true, x.corr, pid_, tid, x.rt);
      kernel_head(k->name, kComputeStream, x.k, x.k_dur, n.inner_ext(), x.corr, k->grid, k->block,
                  k->regs, k->smem);
      w_.put("\n    }\n  }");
      flow(false, x.corr, device_, kComputeStream, x.k);
      ++(k->kind == KKind::Gemm        ? c_.gemm_kernels
         : k->kind == KKind::Attention ? c_.attention_kernels
                                       : c_.elementwise_kernels);
    }
  }

  // A memcpy (HtoD/DtoH) or memset through nested CPU ops.
  void memop(int64_t tid, std::initializer_list<string_view> ops, int kind, int64_t bytes) {
    Nest n{ops, tid};
    Ns t = open(n, 4'000, 2'500);
    Ns rt = t, rt_dur = gap(4'000, 12'000);
    int64_t corr = corr_++;
    Ns k = std::max(gpu_[0] + gap(500, 2'000), rt + gap(3'000, 8'000));
    Ns k_dur = 1'000 + bytes / (kind == 2 ? 2000 : 50);  // memset ~2 TB/s, PCIe ~50 GB/s
    gpu_[0] = k + k_dur;
    t = rt + rt_dur + gap(500, 1'500);
    if (kind == 1) t = std::max(t, gpu_[0] + gap(1'000, 3'000));  // DtoH is synchronous
    close(n, t, 1'200, -1);
    runtime(kind == 2 ? "cudaMemsetAsync" : "cudaMemcpyAsync", kind == 2 ? 51 : 41, rt, rt_dur, tid,
            n.inner_ext(), corr);
    flow(true, corr, pid_, tid, rt);
    gpu_mem(kind == 2,
            kind == 0   ? "Memcpy HtoD (Pinned -> Device)"
            : kind == 1 ? "Memcpy DtoH (Device -> Pinned)"
                        : "Memset (Device)",
            kComputeStream, k, k_dur, n.inner_ext(), corr, bytes);
    flow(false, corr, device_, kComputeStream, k);
  }

  // c10d op > record_param_comms (with the comm args) > nccl:* annotation > launch; the NCCL
  // kernel runs on the group's stream after the compute stream's last kernel.
  void collective(int64_t tid, const PG& pg, const Coll& c) {
    Ns& cpu = cpu_of(tid);
    Ns& comm = gpu_[pg.stream == kTpStream ? 1 : 2];
    Ns t0 = cpu + gap(1'000, 5'000);
    Ns t1 = t0 + gap(2'000, 6'000);                                  // record_param_comms
    Ns t2 = t1 + gap(5'000, 15'000);                                 // nccl:* annotation
    Ns wait = t2 + gap(1'000, 3'000), wait_dur = gap(1'000, 3'000);  // cudaStreamWaitEvent
    Ns rt = wait + wait_dur + gap(1'000, 3'000), rt_dur = gap(6'000, 14'000);
    Ns e2 = rt + rt_dur + gap(1'000, 4'000);
    Ns e1 = e2 + gap(3'000, 10'000);
    Ns e0 = e1 + gap(1'000, 4'000);
    cpu = e0;
    int64_t ext0 = ++ext_, ext1 = ++ext_, ext2 = ++ext_;
    int64_t wait_corr = corr_++, corr = corr_++;
    int64_t bytes = std::max(c.in_nelems, c.out_nelems) * c.elem_bytes;
    Ns k = std::max({comm + gap(1'000, 3'000), rt + gap(5'000, 12'000), gpu_[0]});
    Ns k_dur = 8'000 + bytes / rng_.in(40, 120) + gap(0, 4'000);
    comm = k + k_dur;

    cpu_op(c.c10d, tid, t0, e0 - t0, ext0);
    // record_param_comms carries the message sizes and the group.
    open();
    w_.put("    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"record_param_comms");
    pid_tid_ts(pid_, tid, t1, e1 - t1);
    w_.put("\n      \"External id\": ");
    w_.num(ext1);
    w_.put(",\"Record function id\": ");
    w_.num(ext1 - 1);
    w_.put(", \"Process Group Name\": \"");
    w_.put(pg.name);
    w_.put("\", \"Global rank stride\": 1, \"Out msg nelems\": ");
    w_.num(c.out_nelems);
    w_.put(", \"Process Group Ranks\": \"");
    w_.put(pg.ranks);
    w_.put("\", \"Group size\": ");
    w_.num(pg.size);
    w_.put(", \"Global rank start\": ");
    w_.num(pg.ranks.size() > 1 ? std::atoi(pg.ranks.c_str() + 1) : 0);
    w_.put(", \"Ev Idx\": ");
    w_.num(ev_idx_++);
    w_.put(", \"In msg nelems\": ");
    w_.num(c.in_nelems);
    w_.put(", \"In split size\": \"[]\", \"Out split size\": \"[]\", \"dtype\": \"");
    w_.put(c.dtype);
    w_.put("\", \"Process Group Description\": \"");
    w_.put(pg.desc);
    w_.put("\", \"Collective name\": \"");
    w_.put(c.coll_name);
    w_.put("\"\n    }\n  }");
    ++c_.cpu_ops;
    annotation(false, c.annotation, -1, pid_, tid, t2, e2 - t2 - gap(200, 800), ext2);
    runtime("cudaStreamWaitEvent", 147, wait, wait_dur, tid, ext1, wait_corr);
    runtime("cudaLaunchKernelExC", 430, rt, rt_dur, tid, ext1, corr);
    flow(true, corr, pid_, tid, rt);
    int grid = c.op == CollOp::AllToAll ? 32 : 16;
    kernel_head(c.kernel, pg.stream, k, k_dur, ext1, corr, grid, 512, 96, 103'808);
    w_.put(", \"Collective name\": \"");
    w_.put(c.coll_name);
    w_.put("\", \"In msg nelems\": ");
    w_.num(c.in_nelems);
    w_.put(", \"Out msg nelems\": ");
    w_.num(c.out_nelems);
    w_.put(", \"Group size\": ");
    w_.num(pg.size);
    w_.put(", \"dtype\": \"");
    w_.put(c.dtype);
    w_.put("\", \"In split size\": \"[]\", \"Out split size\": \"[]\", \"Process Group Name\": \"");
    w_.put(pg.name);
    w_.put("\", \"Process Group Description\": \"");
    w_.put(pg.desc);
    w_.put("\", \"Process Group Ranks\": \"");
    w_.put(pg.ranks);
    w_.put("\"\n    }\n  }");
    flow(false, corr, device_, pg.stream, k);
    ++c_.nccl_kernels;
    ++c_.nccl_by_op[static_cast<size_t>(c.op)];
  }

  Coll allreduce(int64_t nelems) const {
    string_view k = nelems * 2 < (256 << 10)
                        ? "ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                    : nelems * 2 < (4 << 20)
                        ? "ncclDevKernel_AllReduce_RING_LL128(ncclDevKernelArgsStorage<4096ul>)"
                        : "ncclDevKernel_AllReduce_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)";
    return {CollOp::AllReduce,
            "c10d::allreduce_",
            "allreduce",
            "nccl:all_reduce",
            k,
            "BFloat16",
            nelems,
            nelems,
            2};
  }

  // ---- one training step: data, forward, backward, optimizer ----
  void step() {
    const int64_t n = step_++;
    const bool comm = o_.world_size > 1, tp = tp_pg_.size > 1;
    const int world = o_.world_size;
    Ns step_start = cpu_main_;
    cpu_main_ += gap(5'000, 20'000);
    int64_t step_ext = ++ext_;

    memop(tid_main_, {"aten::to", "aten::_to_copy", "aten::copy_"}, 0,
          int64_t{8} << rng_.in(16, 20));
    memop(tid_main_, {"aten::zeros", "aten::zero_"}, 2, int64_t{4} << rng_.in(18, 22));
    if (comm && n % 16 == 0)  // the data loader's seed, from rank 0
      collective(
          tid_main_, default_pg_,
          {CollOp::Broadcast, "c10d::broadcast_", "broadcast", "nccl:broadcast",
           "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "Long", 53, 53, 8});

    // Forward on the main thread.
    Ns fwd_cpu = cpu_main_;
    int64_t fwd_ext = ++ext_;
    fwd_first_ = INT64_MAX;
    cpu_main_ += gap(2'000, 5'000);
    const int64_t hidden = 4096, tokens = 4096, shard = hidden * hidden * 4 / std::max(world, 1);
    for (int l = 0; l < o_.layers; ++l) {
      if (comm)
        collective(tid_main_, default_pg_,
                   {CollOp::AllGather, "c10d::_allgather_base_", "_allgather_base",
                    "nccl:_all_gather_base",
                    "ncclDevKernel_AllGather_RING_LL128(ncclDevKernelArgsStorage<4096ul>)",
                    "BFloat16", shard, shard * world, 2});
      launch(tid_main_, {"aten::layer_norm", "aten::native_layer_norm"}, {&kLayerNorm});
      launch(tid_main_, {"aten::linear", "aten::addmm"}, {&kGemmQkv});
      launch(tid_main_,
             {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
              "aten::_flash_attention_forward"},
             {&kFlashFwd});
      launch(tid_main_, {"aten::linear", "aten::mm"}, {&kGemmOut});
      if (tp) collective(tid_main_, tp_pg_, allreduce(tokens * hidden / 8 + l * 64));
      launch(tid_main_, {"aten::add_"}, {&kAdd});
      launch(tid_main_, {"aten::layer_norm", "aten::native_layer_norm"}, {&kLayerNorm});
      launch(tid_main_, {"aten::linear", "aten::addmm"}, {&kGemmFc});
      launch(tid_main_, {"aten::gelu"}, {&kGelu});
      launch(tid_main_, {"aten::linear", "aten::mm"}, {&kGemmFc});
      if (tp) collective(tid_main_, tp_pg_, allreduce(tokens * hidden / 64));
      launch(tid_main_, {"aten::add_"}, {&kAdd});
    }
    launch(tid_main_, {"aten::cross_entropy_loss", "aten::log_softmax", "aten::_log_softmax"},
           {&kSoftmax});
    Ns fwd_gpu_first = fwd_first_, fwd_gpu_last = gpu_[0];
    annotation(false, "## forward ##", -1, pid_, tid_main_, fwd_cpu,
               cpu_main_ + gap(500, 1'000) - fwd_cpu, fwd_ext);
    cpu_main_ += gap(1'000, 2'000);
    annotation(true, "## forward ##", -1, device_, kComputeStream, fwd_gpu_first,
               fwd_gpu_last - fwd_gpu_first, fwd_ext);

    // Backward on the autograd thread, once the forward has been issued.
    cpu_bwd_ = std::max(cpu_bwd_, cpu_main_) + gap(10'000, 30'000);
    Ns bwd_cpu = cpu_bwd_;
    int64_t bwd_ext = ++ext_;
    fwd_first_ = INT64_MAX;
    cpu_bwd_ += gap(2'000, 5'000);
    int64_t seq = 10'000 + n * 64;
    for (int l = o_.layers; l-- > 0;) {
      launch(tid_bwd_,
             {"autograd::engine::evaluate_function: MmBackward0", "MmBackward0", "aten::mm"},
             {&kGemmDgrad, &kGemmWgrad}, seq--);
      launch(tid_bwd_,
             {"autograd::engine::evaluate_function: GeluBackward0", "GeluBackward0",
              "aten::gelu_backward"},
             {&kGeluBwd}, seq--);
      launch(tid_bwd_,
             {"autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm"},
             {&kGemmDgrad, &kGemmWgrad}, seq--);
      if (tp) collective(tid_bwd_, tp_pg_, allreduce(tokens * hidden / 8));
      launch(tid_bwd_,
             {"autograd::engine::evaluate_function: NativeLayerNormBackward0",
              "NativeLayerNormBackward0", "aten::native_layer_norm_backward"},
             {&kLayerNormBwd, &kReduce}, seq--);
      launch(tid_bwd_,
             {"autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0",
              "ScaledDotProductFlashAttentionBackward0", "aten::_flash_attention_backward"},
             {&kFlashBwd}, seq--);
      launch(tid_bwd_,
             {"autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm"},
             {&kGemmDgrad, &kGemmWgrad}, seq--);
      if (comm)
        collective(tid_bwd_, default_pg_,
                   {CollOp::ReduceScatter, "c10d::_reduce_scatter_base_", "_reduce_scatter_base",
                    "nccl:_reduce_scatter_base",
                    "ncclDevKernel_ReduceScatter_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)",
                    "BFloat16", shard * world, shard, 2});
    }
    annotation(false, "## backward ##", -1, pid_, tid_bwd_, bwd_cpu,
               cpu_bwd_ + gap(500, 1'000) - bwd_cpu, bwd_ext);
    cpu_bwd_ += gap(1'000, 2'000);
    annotation(true, "## backward ##", -1, device_, kComputeStream, fwd_first_,
               gpu_[0] - fwd_first_, bwd_ext);

    // Optimizer and the expert exchange, back on the main thread.
    cpu_main_ = std::max(cpu_main_, cpu_bwd_) + gap(5'000, 15'000);
    if (comm) {
      int64_t per_peer = 1 << 14;
      collective(tid_main_, default_pg_,
                 {CollOp::AllToAll, "c10d::alltoall_base_", "all_to_all", "nccl:all_to_all",
                  "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "BFloat16",
                  per_peer * world, per_peer * world, 2});
    }
    Ns opt_cpu = cpu_main_;
    int64_t opt_ext = ++ext_;
    cpu_main_ += gap(2'000, 4'000);
    for (int g = 0; g < 3; ++g)
      launch(tid_main_, {"aten::_fused_adam_", "aten::_fused_adam"}, {&kAdam});
    annotation(false, "Optimizer.step#AdamW.step", -1, pid_, tid_main_, opt_cpu,
               cpu_main_ + gap(500, 1'000) - opt_cpu, opt_ext);
    cpu_main_ += gap(1'000, 2'000);
    memop(tid_main_, {"aten::item", "aten::_local_scalar_dense"}, 1, 4);
    cpu_main_ += gap(2'000, 6'000);
    annotation(false, "ProfilerStep#", n, pid_, tid_main_, step_start, cpu_main_ - step_start,
               step_ext);
    ++c_.steps;
    cpu_main_ += gap(1'000, 3'000);
  }

  const KinetoGenOptions& o_;
  BufferedOut& w_;
  Rng rng_;
  KinetoGenCounts c_;
  int device_ = 0;
  int64_t pid_ = 0, tid_main_ = 0, tid_bwd_ = 0;
  Ns t_ = 0, trace_start_ = 0;
  Ns cpu_main_ = 0, cpu_bwd_ = 0;
  Ns gpu_[3] = {};  // compute, TP, DP stream cursors
  Ns fwd_first_ = INT64_MAX;
  int64_t corr_ = 1, ext_ = 0, ev_idx_ = 0, step_ = 0;
  PG default_pg_, tp_pg_;
};

}  // namespace

std::string KinetoGenCounts::to_json() const {
  std::string s = "{";
  auto add = [&](const char* k, int64_t v) {
    if (s.size() > 1) s += ",";
    s += "\"";
    s += k;
    s += "\":";
    s += std::to_string(v);
  };
  add("rank", rank);
  add("world_size", world_size);
  add("bytes", bytes);
  add("events", events);
  add("steps", steps);
  add("user_annotations", user_annotations);
  add("gpu_user_annotations", gpu_user_annotations);
  add("cpu_ops", cpu_ops);
  add("runtime", runtime);
  add("kernels", kernels);
  add("gemm_kernels", gemm_kernels);
  add("attention_kernels", attention_kernels);
  add("elementwise_kernels", elementwise_kernels);
  add("nccl_kernels", nccl_kernels);
  s += ",\"nccl_by_op\":{";
  bool first = true;
  for (int i = 0; i < kNumCollOps; ++i) {
    if (nccl_by_op[static_cast<size_t>(i)] == 0) continue;
    if (!first) s += ",";
    first = false;
    s += "\"" + std::string(to_string(static_cast<CollOp>(i))) +
         "\":" + std::to_string(nccl_by_op[static_cast<size_t>(i)]);
  }
  s += "}";
  add("memcpys", memcpys);
  add("memsets", memsets);
  add("flows", flows);
  add("metadata", metadata);
  add("other", other);
  return s + "}";
}

KinetoGenCounts generate_kineto(const KinetoGenOptions& o, const std::string& out_path) {
  if (o.world_size < 1 || o.world_size > 1'000'000)
    throw Error(ErrorCode::Usage, "gen-kineto: world size must be in 1..1000000");
  if (o.rank < 0 || o.rank >= o.world_size)
    throw Error(ErrorCode::Usage, "gen-kineto: rank " + std::to_string(o.rank) +
                                      " is outside the world of " + std::to_string(o.world_size));
  if (o.layers < 1 || o.layers > 1000)
    throw Error(ErrorCode::Usage, "gen-kineto: layers must be in 1..1000");
  if (o.target_bytes == 0) throw Error(ErrorCode::Usage, "gen-kineto: size must be positive");
  if (out_path.empty()) throw Error(ErrorCode::Usage, "gen-kineto: no output path");
  AtomicOutputFile tmp(out_path);
  BufferedOut w(tmp.fd(), tmp.path());
  KinetoGenCounts c = Gen(o, w).run();
  tmp.commit();
  return c;
}

}  // namespace braid::bench

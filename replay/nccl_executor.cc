#include "replay/nccl_executor.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "fusion/interpreter.h"
#include "replay/common.h"
#include "trace/error.h"

namespace braid::replay {

namespace {

// Occupies its stream for `ns` nanoseconds of the GPU's global timer; one thread, so kernels on
// other streams run beside it.
constexpr const char* kSpinPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry braid_spin(.param .u64 ns)
{
  .reg .pred %p;
  .reg .u64 %t0, %t, %d, %n;
  ld.param.u64 %n, [ns];
  mov.u64 %t0, %globaltimer;
LOOP:
  mov.u64 %t, %globaltimer;
  sub.u64 %d, %t, %t0;
  setp.lt.u64 %p, %d, %n;
  @%p bra LOOP;
  ret;
}
)";

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(ErrorCode::Internal, std::string(what) + ": " + cudaGetErrorString(e));
}
void nccl_check(ncclResult_t e, const char* what) {
  if (e != ncclSuccess)
    throw Error(ErrorCode::Internal, std::string(what) + ": " + ncclGetErrorString(e));
}

ncclDataType_t nccl_type(const std::string& dtype, int esize, bool check) {
  if (check) return ncclUint64;
  const std::string d = normalize_dtype(dtype);
  if (d == "float32") return ncclFloat32;
  if (d == "bfloat16") return ncclBfloat16;
  if (d == "float16") return ncclFloat16;
  if (d == "float64") return ncclFloat64;
  switch (esize) {
    case 1:
      return ncclUint8;
    case 2:
      return ncclFloat16;
    case 8:
      return ncclUint64;
    default:
      return ncclUint32;
  }
}

struct NcclOp {
  const fusion::Op* op = nullptr;
  int stream = 0;
  Ns duration = 0;
  cudaEvent_t start = nullptr, end = nullptr;
};

class NcclPrepared : public PreparedReplay {
 public:
  NcclPrepared(const fusion::Schedule& s, const ReplayOptions& o) : s_(s), opt_(o) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != static_cast<int>(s.ranks.size()))
      throw Error(ErrorCode::Usage, "schedule '" + s.name + "' has " +
                                        std::to_string(s.ranks.size()) + " ranks but the job has " +
                                        std::to_string(n) + " processes (one per GPU)");
    const fusion::Matching m = checked_matching(s);
    check_ = o.data == DataMode::Check;
    rs_ = &s_.ranks[rank_];
    pick_device();
    make_comms(n);
    make_buffers();
    load_spin_kernel();
    plan(m);
  }

  ~NcclPrepared() override {
    cudaDeviceSynchronize();
    for (auto& [id, c] : comms_) ncclCommDestroy(c);
    if (world_) ncclCommDestroy(world_);
    for (void* p : dev_) cudaFree(p);
    for (void* p : stages_) cudaFree(p);
    for (auto& o : order_) {
      cudaEventDestroy(o.start);
      cudaEventDestroy(o.end);
    }
    for (auto& [name, e] : events_) cudaEventDestroy(e);
    if (step_start_) cudaEventDestroy(step_start_);
    for (cudaStream_t st : streams_) cudaStreamDestroy(st);
    if (library_) cudaLibraryUnload(library_);
  }

  StepRecord run_step(bool measure) override {
    if (check_) init_buffers();
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    MPI_Barrier(MPI_COMM_WORLD);
    cuda_check(cudaEventRecord(step_start_, streams_[0]), "cudaEventRecord");
    for (size_t st = 1; st < streams_.size(); ++st)
      cuda_check(cudaStreamWaitEvent(streams_[st], step_start_, 0), "cudaStreamWaitEvent");
    for (NcclOp& o : order_) enqueue(o);
    wait_for_device();
    StepRecord rec;
    rec.ranks.resize(s_.ranks.size());
    for (const NcclOp& o : order_) {
      float a = 0, b = 0;
      cuda_check(cudaEventElapsedTime(&a, step_start_, o.start), "cudaEventElapsedTime");
      cuda_check(cudaEventElapsedTime(&b, step_start_, o.end), "cudaEventElapsedTime");
      rec.ranks[rank_].push_back({o.op->id, o.stream, static_cast<Ns>(a * 1e6),
                                  static_cast<Ns>(b * 1e6)});
    }
    if (measure) measured_.push_back(rec);
    return rec;
  }

  ReplayResult collect() override {
    return gather_steps(measured_, "nccl",
                        {compute_note("nccl replay: ", "as spin kernels", opt_.compute_scale,
                                      check_ ? "uint64 check" : "timing")},
                        device_, device_name_);
  }

  std::vector<fusion::RankBuffers> buffers() const override {
    if (check_) cudaDeviceSynchronize();
    return own_buffers(s_, rank_, check_, [&](size_t b, std::vector<int64_t>& values) {
      cudaMemcpy(values.data(), dev_[b], values.size() * 8, cudaMemcpyDeviceToHost);
    });
  }

 private:
  void pick_device() {
    int count = 0;
    cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int local_rank = 0;
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    device_ = local_rank % count;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device_) == cudaSuccess) device_name_ = prop.name;
  }

  void make_comms(int n) {
    ncclUniqueId id;
    if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    nccl_check(ncclCommInitRank(&world_, n, id, rank_), "ncclCommInitRank");
    for (size_t i = 0; i < s_.comms.size(); ++i) {
      const int idx = s_.comms[i].index_of(rank_);
      ncclComm_t c = nullptr;
      nccl_check(ncclCommSplit(world_, idx >= 0 ? static_cast<int>(i) : NCCL_SPLIT_NOCOLOR,
                               std::max(idx, 0), &c, nullptr),
                 "ncclCommSplit");
      if (idx >= 0) comms_[s_.comms[i].id] = c;
    }
  }

  int esize_of(const std::string& dtype) const { return check_ ? 8 : element_size(dtype); }

  void make_buffers() {
    int64_t total = 0;
    for (const auto& b : rs_->buffers) total += b.size * esize_of(b.dtype);
    if (total > opt_.max_buffer_bytes)
      throw Error(ErrorCode::Unsupported, "rank " + std::to_string(rank_) + " needs " +
                                              std::to_string(total >> 20) +
                                              " MiB of buffers, more than --max-buffer-mb");
    for (size_t b = 0; b < rs_->buffers.size(); ++b) {
      buffer_index_[rs_->buffers[b].name] = static_cast<int>(b);
      void* p = nullptr;
      cuda_check(cudaMalloc(&p, std::max<int64_t>(rs_->buffers[b].size * esize_of(rs_->buffers[b].dtype), 1)),
                 "cudaMalloc");
      cudaMemset(p, 0, std::max<int64_t>(rs_->buffers[b].size * esize_of(rs_->buffers[b].dtype), 1));
      dev_.push_back(p);
    }
  }

  void init_buffers() {
    for (size_t b = 0; b < rs_->buffers.size(); ++b) {
      std::vector<int64_t> v(static_cast<size_t>(rs_->buffers[b].size));
      const int32_t vr = fusion::value_rank(s_, rank_, rs_->buffers[b].replicated);
      fusion::fill_initial_values(vr, rs_->buffers[b].name, v.data(), rs_->buffers[b].size);
      cuda_check(cudaMemcpy(dev_[b], v.data(), v.size() * 8, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
  }

  void load_spin_kernel() {
    cuda_check(cudaLibraryLoadData(&library_, kSpinPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
               "loading the spin kernel (PTX)");
    cuda_check(cudaLibraryGetKernel(&spin_, library_, "braid_spin"), "cudaLibraryGetKernel");
  }

  void plan(const fusion::Matching& m) {
    for (size_t st = 0; st < rs_->streams.size(); ++st) {
      cudaStream_t cs;
      cuda_check(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "cudaStreamCreate");
      streams_.push_back(cs);
    }
    cuda_check(cudaEventCreate(&step_start_), "cudaEventCreate");
    for (const auto& st : rs_->streams)
      for (const auto& op : st.ops)
        if (const auto* r = op.record()) {
          cudaEvent_t e;
          cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
          events_[r->event] = e;
        }
    for (const fusion::OpRef& ref : global_order(s_, m)) {
      if (ref.rank != rank_) continue;
      NcclOp o;
      o.op = &s_.op(ref);
      o.stream = ref.stream;
      if (const auto* c = o.op->compute())
        o.duration = static_cast<Ns>(static_cast<double>(c->duration_ns) * opt_.compute_scale);
      if (const auto* d = o.op->delay())
        o.duration = static_cast<Ns>(static_cast<double>(d->duration_ns) * opt_.compute_scale);
      cuda_check(cudaEventCreate(&o.start), "cudaEventCreate");
      cuda_check(cudaEventCreate(&o.end), "cudaEventCreate");
      if (const auto* c = o.op->collective();
          c && !c->in.empty() && !c->out.empty() && c->in.overlaps(c->out) && c->in != c->out) {
        void* p = nullptr;
        cuda_check(cudaMalloc(&p, c->in.count * esize_of(c->dtype)), "cudaMalloc");
        stages_.push_back(p);
        stage_of_[o.op->id] = p;
      }
      order_.push_back(o);
    }
  }

  char* ptr(const fusion::Slice& sl, int esize) {
    return static_cast<char*>(dev_[buffer_index_.at(sl.buffer)]) + sl.offset * esize;
  }

  void enqueue(NcclOp& o) {
    cudaStream_t cs = streams_[o.stream];
    cuda_check(cudaEventRecord(o.start, cs), "cudaEventRecord");
    switch (o.op->kind()) {
      case fusion::OpKind::Compute:
        if (check_ && !o.op->compute()->opaque) compute_values(*o.op->compute());
        [[fallthrough]];
      case fusion::OpKind::Delay: {
        uint64_t ns = static_cast<uint64_t>(std::max<Ns>(o.duration, 0));
        void* args[] = {&ns};
        cuda_check(cudaLaunchKernel(reinterpret_cast<const void*>(spin_), dim3(1), dim3(1), args,
                                    0, cs),
                   "launching the spin kernel");
        break;
      }
      case fusion::OpKind::Record:
        cuda_check(cudaEventRecord(events_.at(o.op->record()->event), cs), "cudaEventRecord");
        break;
      case fusion::OpKind::Wait:
        cuda_check(cudaStreamWaitEvent(cs, events_.at(o.op->wait()->event), 0),
                   "cudaStreamWaitEvent");
        break;
      case fusion::OpKind::Collective:
        collective(o, *o.op->collective(), cs);
        if (check_) wait_for_device();  // host compute may read the result next
        break;
    }
    cuda_check(cudaEventRecord(o.end, cs), "cudaEventRecord");
  }

  void collective(const NcclOp& o, const fusion::Collective& c, cudaStream_t cs) {
    const int es = esize_of(c.dtype);
    const ncclDataType_t t = nccl_type(c.dtype, es, check_);
    const fusion::Comm* comm = s_.find_comm(c.comm);
    ncclComm_t nc = comms_.at(c.comm);
    const void* in = c.in.empty() ? nullptr : ptr(c.in, es);
    void* out = c.out.empty() ? nullptr : ptr(c.out, es);
    if (auto it = stage_of_.find(o.op->id); it != stage_of_.end()) {
      cuda_check(cudaMemcpyAsync(it->second, in, c.in.count * es, cudaMemcpyDeviceToDevice, cs),
                 "cudaMemcpyAsync");
      in = it->second;
    }
    const size_t n = static_cast<size_t>(c.count);
    const char* what = "NCCL collective";
    switch (c.op) {
      case CollOp::AllReduce:
        nccl_check(ncclAllReduce(in, out, n, t, ncclSum, nc, cs), what);
        break;
      case CollOp::AllGather:
        nccl_check(ncclAllGather(in, out, n, t, nc, cs), what);
        break;
      case CollOp::ReduceScatter:
        nccl_check(ncclReduceScatter(in, out, n, t, ncclSum, nc, cs), what);
        break;
      case CollOp::AllToAll:
        nccl_check(ncclAlltoAll(in, out, n, t, nc, cs), what);
        break;
      case CollOp::Broadcast:
        nccl_check(ncclBroadcast(in ? in : out, out, n, t, comm->index_of(c.root), nc, cs), what);
        break;
      case CollOp::Reduce:
        nccl_check(ncclReduce(in, out, n, t, ncclSum, comm->index_of(c.root), nc, cs), what);
        break;
      case CollOp::Send:
        nccl_check(ncclSend(in, n, t, comm->index_of(c.peer), nc, cs), what);
        break;
      case CollOp::Recv:
        nccl_check(ncclRecv(out, n, t, comm->index_of(c.peer), nc, cs), what);
        break;
      case CollOp::ManyToMany:
        nccl_check(ncclGroupStart(), what);
        for (const auto& k : c.sends)
          nccl_check(ncclSend(static_cast<const char*>(in) + k.offset * es,
                              static_cast<size_t>(k.count), t, comm->index_of(k.peer), nc, cs),
                     what);
        for (const auto& k : c.recvs)
          nccl_check(ncclRecv(static_cast<char*>(out) + k.offset * es,
                              static_cast<size_t>(k.count), t, comm->index_of(k.peer), nc, cs),
                     what);
        nccl_check(ncclGroupEnd(), what);
        break;
      default:
        throw Error(ErrorCode::Unsupported, "no NCCL mapping for " + std::string(to_string(c.op)));
    }
  }

  // Check mode: compute on the host from the device's current contents (the device is idle,
  // since check mode synchronises after every collective and compute).
  void compute_values(const fusion::Compute& c) {
    wait_for_device();
    auto fetch = [&](const fusion::Slice& sl) {
      std::vector<int64_t> v(static_cast<size_t>(sl.count));
      cuda_check(cudaMemcpy(v.data(), ptr(sl, 8), v.size() * 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
      return v;
    };
    std::vector<std::vector<int64_t>> in;
    for (const auto& sl : c.reads) in.push_back(fetch(sl));
    const std::vector<std::vector<int64_t>> outs =
        fusion::compute_outputs(s_, rank_, c, {in.begin(), in.end()});
    for (size_t k = 0; k < c.writes.size(); ++k)
      cuda_check(cudaMemcpy(ptr(c.writes[k], 8), outs[k].data(), outs[k].size() * 8,
                            cudaMemcpyHostToDevice),
                 "cudaMemcpy");
  }

  // Waits for the device with a watchdog: a peer that died or hangs ends the job.
  void wait_for_device() {
    const Ns t0 = monotonic_ns();
    for (;;) {
      bool idle = true;
      for (cudaStream_t cs : streams_) {
        cudaError_t e = cudaStreamQuery(cs);
        if (e == cudaErrorNotReady) {
          idle = false;
          break;
        }
        cuda_check(e, "cudaStreamQuery");
      }
      if (idle) return;
      for (auto& [id, c] : comms_) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(c, &async);
        if (async != ncclSuccess && async != ncclInProgress)
          throw Error(ErrorCode::Internal, "rank " + std::to_string(rank_) + ": NCCL error on '" +
                                               id + "': " + ncclGetErrorString(async));
      }
      if (monotonic_ns() - t0 > opt_.timeout_ns) {
        std::fprintf(stderr,
                     "braid: error: rank %d: the GPU has not finished the step after %.0f s "
                     "(--timeout); a rank died or hangs: ending the job\n",
                     rank_, static_cast<double>(opt_.timeout_ns) * 1e-9);
        std::fflush(stderr);
        for (auto& [id, c] : comms_) ncclCommAbort(c);
        MPI_Abort(MPI_COMM_WORLD, 4);
      }
      timespec ts{0, 50'000};
      nanosleep(&ts, nullptr);
    }
  }

  fusion::Schedule s_;
  ReplayOptions opt_;
  int rank_ = 0;
  bool check_ = false;
  const fusion::RankSchedule* rs_ = nullptr;
  int device_ = -1;
  std::string device_name_;
  ncclComm_t world_ = nullptr;
  std::map<std::string, ncclComm_t> comms_;
  std::unordered_map<std::string, int> buffer_index_;
  std::vector<void*> dev_, stages_;
  std::unordered_map<int64_t, void*> stage_of_;
  std::vector<cudaStream_t> streams_;
  std::map<std::string, cudaEvent_t> events_;
  cudaEvent_t step_start_ = nullptr;
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t spin_ = nullptr;
  std::vector<NcclOp> order_;
  std::vector<StepRecord> measured_;
};

}  // namespace

std::string gpu_unavailable_reason() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(e);
  if (count == 0) return "no CUDA device";
  return "";
}

std::unique_ptr<PreparedReplay> NcclExecutor::prepare(const fusion::Schedule& s,
                                                      const ReplayOptions& o) {
  if (std::string why = gpu_unavailable_reason(); !why.empty())
    throw Error(ErrorCode::Unsupported, "the nccl backend needs a GPU: " + why);
  return std::make_unique<NcclPrepared>(s, o);
}

}  // namespace braid::replay

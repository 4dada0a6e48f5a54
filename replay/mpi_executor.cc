#include "replay/mpi_executor.h"

#include <mpi.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "fusion/interpreter.h"
#include "replay/common.h"
#include "trace/error.h"

namespace braid::replay {

namespace {

// MPI is initialised once per process and finalised when the process exits normally.
struct MpiSession {
  MpiSession() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      // OpenMPI: a process waiting in MPI (the step's barrier, a collective) polls its progress
      // engine; with this it calls sched_yield between polls, so on an oversubscribed host the
      // ranks that compute or move data get the cores at once. mpirun sets it itself when it
      // places more processes than cores; set here so every launch behaves alike (a value the
      // user gave wins). Other MPIs ignore the variable.
      setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (provided < MPI_THREAD_MULTIPLE)
        throw Error(ErrorCode::Unsupported,
                    "the mpi replay backend runs streams as threads and needs "
                    "MPI_THREAD_MULTIPLE, which this MPI library does not provide");
      pin_when_oversubscribed();
    }
  }

  // On a host with more processes than cores, mpirun leaves the processes unbound and the
  // kernel's load balancing settles, per job, into its own placement of ranks on cores: the same
  // replay measured 0.38 ms in one job and 0.93 ms in the next on 2 cores, stable within each,
  // so a calibration job could not predict a replay job. Unbound processes are therefore pinned
  // round-robin (local rank modulo the usable cores, as `--bind-to core --map-by core`), which
  // makes every job place its ranks alike. A binding the launcher or the user made is kept.
  static void pin_when_oversubscribed() {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return;
    const int usable = CPU_COUNT(&mask);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (usable < online) return;  // already bound
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int lrank = 0, lsize = 1;
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    MPI_Comm_free(&local);
    if (lsize <= usable) return;
    int wsize = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (wsize == lsize) pinned_cores = usable;  // one host: world rank r on core r % usable
    int nth = lrank % usable;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &mask) || nth-- > 0) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      sched_setaffinity(0, sizeof one, &one);  // threads started later inherit it
      return;
    }
  }
  // The cores the job's ranks were pinned to round-robin, when they all share this host.
  static inline int pinned_cores = 0;
  ~MpiSession() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
};

void ensure_mpi() { static MpiSession session; }

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Unsigned integer types of the element size: sums wrap like the interpreter's.
MPI_Datatype mpi_type(int esize) {
  switch (esize) {
    case 1:
      return MPI_UINT8_T;
    case 2:
      return MPI_UINT16_T;
    case 8:
      return MPI_UINT64_T;
    default:
      return MPI_UINT32_T;
  }
}

int to_int(int64_t v, const std::string& what) {
  if (v < 0 || v > INT_MAX)
    throw Error(ErrorCode::Unsupported, what + ": count " + std::to_string(v) +
                                            " does not fit an MPI count (int)");
  return static_cast<int>(v);
}

// Sleep mode sleeps to the deadline (the thread's timer slack is 1 ns, see stream_main) and
// does not spin after waking: on an oversubscribed host, spinning ranks would take the cores the
// others need to wake up and make progress. Ops shorter than kShortestSleepNs always spin (a
// sleep that short would time the scheduler's wake-up, not the op).
void wait_until(Ns deadline, bool spin) {
  if (!spin) {
    timespec ts{static_cast<time_t>(deadline / 1'000'000'000),
                static_cast<long>(deadline % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
    }
    return;
  }
  while (monotonic_ns() < deadline) {
  }
}

// What one op does, resolved in prepare() so a step only runs it.
struct OpPlan {
  const fusion::Op* op = nullptr;
  Ns duration = 0;    // compute / delay, scaled
  int event = -1;     // record / wait
  // Collectives.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int esize = 0;
  int count = 0;
  int root = -1;       // communicator index of root / peer
  int in_buf = -1, out_buf = -1;
  int64_t in_off = 0, out_off = 0;  // elements
  bool in_place = false;            // allreduce / reduce with in == out
  std::vector<std::byte> stage;     // copy of `in` when it overlaps `out`
  std::vector<std::array<int, 4>> sends, recvs;  // {peer index, offset, count, tag}
  std::string what;                 // describe() for messages
};

class MpiPrepared : public PreparedReplay {
 public:
  MpiPrepared(const fusion::Schedule& s, const ReplayOptions& o) : s_(s), opt_(o) {
    rank_ = world_rank();
    const int n = world_size();
    if (n != static_cast<int>(s.ranks.size()))
      throw Error(ErrorCode::Usage,
                  "schedule '" + s.name + "' has " + std::to_string(s.ranks.size()) +
                      " ranks but the job has " + std::to_string(n) + " MPI processes: run it as "
                      "mpirun -np " + std::to_string(s.ranks.size()) + " braid ...");
    matching_ = checked_matching(s);
    rs_ = &s_.ranks[rank_];
    check_ = o.data == DataMode::Check;
    make_buffers();
    make_comms();
    plan_ops();
    decide_compute_mode();
    // Test hooks: this rank exits (or hangs) halfway through its first stream.
    if (const char* k = std::getenv("BRAID_REPLAY_TEST_KILL_RANK")) kill_ = std::atoi(k) == rank_;
    if (const char* k = std::getenv("BRAID_REPLAY_TEST_HANG_RANK")) hang_ = std::atoi(k) == rank_;
    busy_since_ = std::make_unique<std::atomic<Ns>[]>(rs_->streams.size());
    busy_op_ = std::make_unique<std::atomic<int>[]>(rs_->streams.size());
    times_.resize(rs_->streams.size());
    for (size_t st = 0; st < rs_->streams.size(); ++st) {
      busy_since_[st] = -1;
      busy_op_[st] = -1;
      threads_.emplace_back([this, st] { stream_main(static_cast<int>(st)); });
    }
  }

  ~MpiPrepared() override {
    {
      std::lock_guard<std::mutex> l(ctl_mu_);
      stop_ = true;
    }
    ctl_cv_.notify_all();
    for (auto& t : threads_) t.join();
    for (auto& [id, c] : comms_)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }

  StepRecord run_step(bool measure) override {
    if (check_) init_buffers();
    std::fill(recorded_.begin(), recorded_.end(), 0);
    for (auto& t : times_) t.clear();
    if (spin_) {
      MPI_Barrier(MPI_COMM_WORLD);
    } else {
      // Oversubscribed: ranks done with the step early wait here as in a collective, napping
      // after the yield window, so they leave the cores to the ranks still running it.
      std::vector<MPI_Request> barrier(1);
      MPI_Ibarrier(MPI_COMM_WORLD, barrier.data());
      complete(barrier);
    }
    {
      std::lock_guard<std::mutex> l(ctl_mu_);
      t0_ = monotonic_ns();
      done_ = 0;
      ++generation_;
    }
    ctl_cv_.notify_all();
    watch();
    StepRecord rec;
    rec.ranks.resize(s_.ranks.size());
    auto& mine = rec.ranks[rank_];
    for (const auto& t : times_) mine.insert(mine.end(), t.begin(), t.end());
    std::sort(mine.begin(), mine.end(),
              [](const OpTime& a, const OpTime& b) { return a.start < b.start; });
    if (measure) measured_.push_back(rec);
    return rec;
  }

  ReplayResult collect() override {
    const std::string head = "mpi replay: " + std::to_string(world_size()) + " processes, ";
    return gather_steps(measured_, "mpi",
                        {compute_note(head, spin_ ? "spinning" : "sleeping (ops under 50 us spin)",
                                      opt_.compute_scale, check_ ? "int64 check" : "timing")});
  }

  std::vector<fusion::RankBuffers> buffers() const override {
    return own_buffers(s_, rank_, check_, [&](size_t b, std::vector<int64_t>& values) {
      // A size-0 buffer has no storage to copy (memcpy with its null pointer is undefined).
      if (!values.empty())
        std::memcpy(values.data(), buf_[b].data(), values.size() * sizeof(int64_t));
    });
  }

 private:
  // --- preparation -------------------------------------------------------------------------

  int esize_of(const std::string& dtype) const { return check_ ? 8 : element_size(dtype); }

  void make_buffers() {
    int64_t total = 0;
    for (size_t b = 0; b < rs_->buffers.size(); ++b) {
      const fusion::Buffer& buf = rs_->buffers[b];
      buffer_index_[buf.name] = static_cast<int>(b);
      total += buf.size * esize_of(buf.dtype);
    }
    if (total > opt_.max_buffer_bytes)
      throw Error(ErrorCode::Unsupported,
                  "rank " + std::to_string(rank_) + " of schedule '" + s_.name + "' needs " +
                      std::to_string(total >> 20) + " MiB of buffers, more than the limit of " +
                      std::to_string(opt_.max_buffer_bytes >> 20) +
                      " MiB: raise --max-buffer-mb, or replay a smaller schedule (smaller synth "
                      "shapes; one step of a trace with `braid lift --step`)");
    buf_.resize(rs_->buffers.size());
    for (size_t b = 0; b < rs_->buffers.size(); ++b)
      buf_[b].assign(static_cast<size_t>(rs_->buffers[b].size * esize_of(rs_->buffers[b].dtype)),
                     std::byte{0});
    if (check_) init_buffers();
  }

  void init_buffers() {
    for (size_t b = 0; b < rs_->buffers.size(); ++b) {
      auto* p = reinterpret_cast<int64_t*>(buf_[b].data());
      const int32_t vr = fusion::value_rank(s_, rank_, rs_->buffers[b].replicated);
      fusion::fill_initial_values(vr, rs_->buffers[b].name, p, rs_->buffers[b].size);
    }
  }

  void make_comms() {
    MPI_Group world;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int tag = 0;
    for (const fusion::Comm& c : s_.comms) {
      ++tag;
      MPI_Comm comm = MPI_COMM_NULL;
      if (c.index_of(rank_) >= 0) {
        MPI_Group g;
        MPI_Group_incl(world, static_cast<int>(c.ranks.size()), c.ranks.data(), &g);
        MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &comm);
        MPI_Group_free(&g);
      }
      comms_[c.id] = comm;
    }
    MPI_Group_free(&world);
  }

  std::byte* ptr(int buf, int64_t off, int esize) {
    return buf_[buf].data() + off * esize;
  }

  void plan_ops() {
    std::unordered_map<std::string, int> events;
    auto event_index = [&](const std::string& e) {
      return events.emplace(e, static_cast<int>(events.size())).first->second;
    };
    plans_.resize(rs_->streams.size());
    for (size_t st = 0; st < rs_->streams.size(); ++st) {
      const auto& ops = rs_->streams[st].ops;
      plans_[st].resize(ops.size());
      for (size_t i = 0; i < ops.size(); ++i) {
        OpPlan& p = plans_[st][i];
        const fusion::Op& op = ops[i];
        p.op = &op;
        if (const auto* c = op.compute())
          p.duration = static_cast<Ns>(static_cast<double>(c->duration_ns) * opt_.compute_scale);
        else if (const auto* d = op.delay())
          p.duration = static_cast<Ns>(static_cast<double>(d->duration_ns) * opt_.compute_scale);
        else if (const auto* e = op.record())
          p.event = event_index(e->event);
        else if (const auto* w = op.wait())
          p.event = event_index(w->event);
        else if (const auto* c = op.collective())
          plan_collective(p, *c, {rank_, static_cast<int32_t>(st), static_cast<int32_t>(i)});
      }
    }
    recorded_.assign(events.size(), 0);
  }

  void plan_collective(OpPlan& p, const fusion::Collective& c, fusion::OpRef ref) {
    p.what = fusion::describe(s_, ref);
    const fusion::Comm* comm = s_.find_comm(c.comm);
    p.comm = comms_.at(c.comm);
    p.esize = esize_of(c.dtype);
    p.type = mpi_type(p.esize);
    p.count = to_int(c.count, p.what);
    if (c.op == CollOp::Broadcast || c.op == CollOp::Reduce) p.root = comm->index_of(c.root);
    if (c.op == CollOp::Send || c.op == CollOp::Recv) p.root = comm->index_of(c.peer);
    if (!c.in.empty()) {
      p.in_buf = buffer_index_.at(c.in.buffer);
      p.in_off = c.in.offset;
    }
    if (!c.out.empty()) {
      p.out_buf = buffer_index_.at(c.out.buffer);
      p.out_off = c.out.offset;
    }
    const bool overlap = !c.in.empty() && !c.out.empty() && c.in.overlaps(c.out);
    if (overlap && c.in == c.out && (c.op == CollOp::AllReduce || c.op == CollOp::Reduce))
      p.in_place = true;
    else if (overlap)
      p.stage.resize(static_cast<size_t>(c.in.count * p.esize));
    if (c.op == CollOp::ManyToMany) {
      std::map<int32_t, int> nth_send, nth_recv;  // chunk j to / from a peer pairs by j
      for (const fusion::PeerChunk& k : c.sends)
        p.sends.push_back({comm->index_of(k.peer), to_int(k.offset, p.what),
                           to_int(k.count, p.what), 1 + nth_send[k.peer]++});
      for (const fusion::PeerChunk& k : c.recvs)
        p.recvs.push_back({comm->index_of(k.peer), to_int(k.offset, p.what),
                           to_int(k.count, p.what), 1 + nth_recv[k.peer]++});
    }
  }

  void decide_compute_mode() {
    if (opt_.compute == ComputeMode::Spin || opt_.compute == ComputeMode::Sleep) {
      spin_ = opt_.compute == ComputeMode::Spin;
      return;
    }
    // Spin only when every compute stream of every process on this host has a core.
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int streams = 0;
    for (const auto& st : rs_->streams)
      for (const auto& op : st.ops)
        if (op.compute() || op.delay()) {
          ++streams;
          break;
        }
    int host_streams = 0;
    MPI_Allreduce(&streams, &host_streams, 1, MPI_INT, MPI_SUM, local);
    MPI_Comm_free(&local);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    spin_ = host_streams <= static_cast<int>(cores);
  }

  // --- execution ---------------------------------------------------------------------------

  void stream_main(int st) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // precise sleeps (ComputeMode::Sleep)
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> l(ctl_mu_);
        ctl_cv_.wait(l, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      run_stream(st);
      {
        std::lock_guard<std::mutex> l(ctl_mu_);
        ++done_;
      }
      done_cv_.notify_all();
    }
  }

  void run_stream(int st) {
    auto& plans = plans_[st];
    auto& times = times_[st];
    for (size_t i = 0; i < plans.size(); ++i) {
      if (kill_ && st == 0 && i == plans.size() / 2) {
        std::fprintf(stderr,
                     "braid: rank %d: BRAID_REPLAY_TEST_KILL_RANK=%d: exiting mid-replay (test)\n",
                     rank_, rank_);
        std::fflush(stderr);
        _exit(3);
      }
      if (hang_ && st == 0 && i == plans.size() / 2)
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      OpPlan& p = plans[i];
      const Ns start = monotonic_ns();
      switch (p.op->kind()) {
        case fusion::OpKind::Compute:
          if (check_ && !p.op->compute()->opaque) compute_values(*p.op->compute());
          wait_until(start + p.duration, spin_ || p.duration < kShortestSleepNs);
          break;
        case fusion::OpKind::Delay:
          wait_until(start + p.duration, spin_ || p.duration < kShortestSleepNs);
          break;
        case fusion::OpKind::Record: {
          {
            std::lock_guard<std::mutex> l(ev_mu_);
            recorded_[p.event] = 1;
          }
          ev_cv_.notify_all();
          break;
        }
        case fusion::OpKind::Wait: {
          std::unique_lock<std::mutex> l(ev_mu_);
          ev_cv_.wait(l, [&] { return recorded_[p.event] != 0; });
          break;
        }
        case fusion::OpKind::Collective:
          busy_op_[st] = static_cast<int>(i);
          busy_since_[st] = start;
          collective(p, *p.op->collective());
          break;
      }
      busy_since_[st] = -1;
      times.push_back({p.op->id, st, start - t0_, monotonic_ns() - t0_});
    }
  }

  void compute_values(const fusion::Compute& c) {
    auto view = [&](const fusion::Slice& sl) {
      return reinterpret_cast<int64_t*>(buf_[buffer_index_.at(sl.buffer)].data()) + sl.offset;
    };
    std::vector<std::span<const int64_t>> in;
    for (const fusion::Slice& sl : c.reads)
      in.emplace_back(view(sl), static_cast<size_t>(sl.count));
    const std::vector<std::vector<int64_t>> out = fusion::compute_outputs(s_, rank_, c, in);
    for (size_t k = 0; k < c.writes.size(); ++k)
      std::copy(out[k].begin(), out[k].end(), view(c.writes[k]));
  }

  void collective(OpPlan& p, const fusion::Collective& c) {
    std::byte* in = p.in_buf >= 0 ? ptr(p.in_buf, p.in_off, p.esize) : nullptr;
    std::byte* out = p.out_buf >= 0 ? ptr(p.out_buf, p.out_off, p.esize) : nullptr;
    if (!p.stage.empty()) {
      std::memcpy(p.stage.data(), in, p.stage.size());
      in = p.stage.data();
    }
    const void* send = p.in_place ? MPI_IN_PLACE : in;
    std::vector<MPI_Request> reqs(1, MPI_REQUEST_NULL);
    MPI_Request* rq = reqs.data();
    switch (c.op) {
      case CollOp::AllReduce:
        MPI_Iallreduce(send, out, p.count, p.type, MPI_SUM, p.comm, rq);
        break;
      case CollOp::AllGather:
        MPI_Iallgather(in, p.count, p.type, out, p.count, p.type, p.comm, rq);
        break;
      case CollOp::ReduceScatter:
        MPI_Ireduce_scatter_block(in, out, p.count, p.type, MPI_SUM, p.comm, rq);
        break;
      case CollOp::AllToAll:
        MPI_Ialltoall(in, p.count, p.type, out, p.count, p.type, p.comm, rq);
        break;
      case CollOp::Broadcast:
        if (in && in != out) std::memmove(out, in, static_cast<size_t>(p.count) * p.esize);
        MPI_Ibcast(out, p.count, p.type, p.root, p.comm, rq);
        break;
      case CollOp::Reduce:
        MPI_Ireduce(out ? send : in, out, p.count, p.type, MPI_SUM, p.root, p.comm, rq);
        break;
      case CollOp::Send:
        MPI_Isend(in, p.count, p.type, p.root, 0, p.comm, rq);
        break;
      case CollOp::Recv:
        MPI_Irecv(out, p.count, p.type, p.root, 0, p.comm, rq);
        break;
      case CollOp::ManyToMany: {
        reqs.clear();
        reqs.reserve(p.sends.size() + p.recvs.size());
        for (const auto& k : p.recvs) {
          reqs.emplace_back();
          MPI_Irecv(out + static_cast<int64_t>(k[1]) * p.esize, k[2], p.type, k[0], k[3], p.comm,
                    &reqs.back());
        }
        for (const auto& k : p.sends) {
          reqs.emplace_back();
          MPI_Isend(in + static_cast<int64_t>(k[1]) * p.esize, k[2], p.type, k[0], k[3], p.comm,
                    &reqs.back());
        }
        break;
      }
      default:
        throw Error(ErrorCode::Unsupported, p.what + ": no MPI mapping for this op");
    }
    complete(reqs);
  }

  // Waits for the requests in MPI, which polls its progress engine and, with
  // mpi_yield_when_idle (set in MpiSession), yields the core between polls. (Polling with
  // MPI_Testall and a sleep in between, as this backend did before, made every round of a
  // collective wait for a sleeping rank's wake-up: 50-150 µs each on a 2-core VM, several
  // times the collective, and varying with the host's load; docs/replay.md.)
  //
  // On an oversubscribed host (sleep mode) a rank that waits long, for a pipeline stage that is
  // still busy or a peer computing, must not keep yielding: every yielding rank takes time
  // slices from the ranks that move data, and on 2 cores the pp-sp preset's TP collectives took
  // 4-8x their calibrated time while the other stage's 4 ranks waited for their receive. So
  // the wait yields for kYieldWindowNs, which covers the rounds of a collective whose members
  // are all present, then polls with naps growing to kLongestNapNs.
  void complete(std::vector<MPI_Request>& reqs) {
    const int n = static_cast<int>(reqs.size());
    if (spin_) {
      MPI_Waitall(n, reqs.data(), MPI_STATUSES_IGNORE);
      return;
    }
    int flag = 0;
    const Ns start = monotonic_ns();
    for (;;) {
      MPI_Testall(n, reqs.data(), &flag, MPI_STATUSES_IGNORE);
      if (flag) return;
      if (monotonic_ns() - start > kYieldWindowNs) break;
      sched_yield();
    }
    Ns nap = kFirstNapNs;
    for (;;) {
      timespec ts{0, static_cast<long>(nap)};
      nanosleep(&ts, nullptr);
      MPI_Testall(n, reqs.data(), &flag, MPI_STATUSES_IGNORE);
      if (flag) return;
      nap = std::min<Ns>(nap * 2, kLongestNapNs);
    }
  }
  static constexpr Ns kFirstNapNs = 20'000, kLongestNapNs = 200'000;

  // Waits for every stream of this step; ends the job when one op waits too long.
  void watch() {
    std::unique_lock<std::mutex> l(ctl_mu_);
    const int streams = static_cast<int>(rs_->streams.size());
    while (done_ < streams) {
      done_cv_.wait_for(l, std::chrono::milliseconds(100));
      const Ns now = monotonic_ns();
      for (int st = 0; st < streams; ++st) {
        const Ns since = busy_since_[st];
        if (since < 0 || now - since <= opt_.timeout_ns) continue;
        const int i = busy_op_[st];
        const OpPlan& p = plans_[st][i];
        std::string what = fusion::describe(s_, {rank_, st, i});
        std::string peers;
        if (const auto* c = p.op->collective())
          if (const fusion::Comm* comm = s_.find_comm(c->comm))
            for (int32_t m : comm->ranks)
              if (m != rank_) peers += (peers.empty() ? "" : ", ") + std::to_string(m);
        std::fprintf(stderr,
                     "braid: error: rank %d: %s has waited %.1f s (limit --timeout %.0f s)%s; a "
                     "rank died or hangs: ending the job\n",
                     rank_, what.c_str(), static_cast<double>(now - since) * 1e-9,
                     static_cast<double>(opt_.timeout_ns) * 1e-9,
                     peers.empty() ? "" : (" for its peers (ranks " + peers + ")").c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 4);
        _exit(4);
      }
    }
  }

  fusion::Schedule s_;
  ReplayOptions opt_;
  int rank_ = 0;
  const fusion::RankSchedule* rs_ = nullptr;
  fusion::Matching matching_;
  bool check_ = false, spin_ = true, kill_ = false, hang_ = false;
  std::unordered_map<std::string, int> buffer_index_;
  std::vector<std::vector<std::byte>> buf_;
  std::map<std::string, MPI_Comm> comms_;
  std::vector<std::vector<OpPlan>> plans_;

  std::mutex ev_mu_;
  std::condition_variable ev_cv_;
  std::vector<char> recorded_;

  std::mutex ctl_mu_;
  std::condition_variable ctl_cv_, done_cv_;
  uint64_t generation_ = 0;
  int done_ = 0;
  bool stop_ = false;
  Ns t0_ = 0;
  std::vector<std::thread> threads_;
  std::unique_ptr<std::atomic<Ns>[]> busy_since_;
  std::unique_ptr<std::atomic<int>[]> busy_op_;
  std::vector<std::vector<OpTime>> times_;
  std::vector<StepRecord> measured_;
};

}  // namespace

void init_mpi() { ensure_mpi(); }

std::vector<fusion::RankBuffers> own_buffers(
    const fusion::Schedule& s, int rank, bool check,
    const std::function<void(size_t b, std::vector<int64_t>& values)>& read) {
  std::vector<fusion::RankBuffers> v(s.ranks.size());
  if (!check) return v;
  const fusion::RankSchedule& rs = s.ranks[rank];
  for (size_t b = 0; b < rs.buffers.size(); ++b) {
    auto& values = v[rank][rs.buffers[b].name];
    values.resize(static_cast<size_t>(rs.buffers[b].size));
    read(b, values);
  }
  return v;
}

std::string compute_note(const std::string& head, const char* how, double scale, const char* data) {
  char note[256];
  std::snprintf(note, sizeof note, "%scompute %s for %.3g x the recorded duration, %s data",
                head.c_str(), how, scale, data);
  return note;
}

ReplayResult gather_steps(const std::vector<StepRecord>& measured, const std::string& backend,
                          std::vector<std::string> notes, int32_t device,
                          const std::string& device_name) {
  ReplayResult res;
  res.backend = backend;
  res.kind = RunKind::Replayed;
  const int n = world_size(), rank = world_rank();
  // Op times: per step, a count then {op id, stream, start, end} per op.
  std::vector<int64_t> mine;
  for (const StepRecord& st : measured) {
    const auto& ops = st.ranks[rank];
    mine.push_back(static_cast<int64_t>(ops.size()));
    for (const OpTime& t : ops) mine.insert(mine.end(), {t.op_id, t.stream, t.start, t.end});
  }
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(n), displs(n);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int i = 0; i < n; ++i) {
    displs[i] = total;
    total += lens[i];
  }
  std::vector<int64_t> all(rank == 0 ? total : 0);
  MPI_Gatherv(mine.data(), len, MPI_INT64_T, all.data(), lens.data(), displs.data(), MPI_INT64_T,
              0, MPI_COMM_WORLD);
  // Hosts, pids and devices.
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int hl = 0;
  MPI_Get_processor_name(host, &hl);
  std::vector<char> hosts(rank == 0 ? static_cast<size_t>(n) * MPI_MAX_PROCESSOR_NAME : 0);
  MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME,
             MPI_CHAR, 0, MPI_COMM_WORLD);
  int64_t facts[2] = {getpid(), device};
  std::vector<int64_t> all_facts(2 * static_cast<size_t>(n));
  MPI_Gather(facts, 2, MPI_INT64_T, all_facts.data(), 2, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (rank != 0) return res;

  res.steps.resize(measured.size());
  for (auto& st : res.steps) st.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    size_t at = static_cast<size_t>(displs[r]);
    for (size_t k = 0; k < measured.size(); ++k) {
      const int64_t cnt = all[at++];
      auto& ops = res.steps[k].ranks[r];
      for (int64_t i = 0; i < cnt; ++i, at += 4)
        ops.push_back({all[at], static_cast<int32_t>(all[at + 1]), all[at + 2], all[at + 3]});
    }
    RankInfo info;
    info.rank = r;
    info.world_size = n;
    info.host = std::string(&hosts[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    info.pid = all_facts[2 * r];
    info.device = static_cast<int32_t>(all_facts[2 * r + 1]);
    info.device_name = device_name;
    info.backend = backend;
    res.ranks.push_back(info);
  }
  res.notes = std::move(notes);
  return res;
}

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

MpiExecutor::MpiExecutor() { ensure_mpi(); }

std::unique_ptr<PreparedReplay> MpiExecutor::prepare(const fusion::Schedule& s,
                                                     const ReplayOptions& o) {
  return std::make_unique<MpiPrepared>(s, o);
}

int MpiExecutor::process_index() const { return world_rank(); }
int MpiExecutor::process_count() const { return world_size(); }
int MpiExecutor::host_cores() const {
  ensure_mpi();
  return MpiSession::pinned_cores;
}
std::vector<int32_t> MpiExecutor::local_ranks(const fusion::Schedule& s) const {
  return {world_rank()};
}
void MpiExecutor::barrier() { MPI_Barrier(MPI_COMM_WORLD); }

std::vector<std::string> MpiExecutor::gather_lines(const std::vector<std::string>& lines) {
  std::string mine;
  for (const std::string& l : lines) mine += l + '\n';
  const int n = world_size();
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(n), displs(n);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int i = 0; i < n; ++i) {
    displs[i] = total;
    total += lens[i];
  }
  std::string all(world_rank() == 0 ? static_cast<size_t>(total) : 0, '\0');
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < all.size()) {
    size_t nl = all.find('\n', at);
    out.push_back(all.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

int64_t MpiExecutor::sum_all(int64_t v) {
  int64_t total = 0;
  MPI_Allreduce(&v, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

void MpiExecutor::abort_job(int code) {
  if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace braid::replay

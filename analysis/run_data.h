// One run of a `.braid` file in memory, per rank, in the shape the analyses need: kernels and
// memcpys per stream in start order, collectives in start order, steps, and the host API calls
// that show cross-stream dependencies (event record / wait, synchronizations).
//
// Times stay in each rank's own clock; clock alignment (clock.h) produces offsets that map
// them onto the job axis, and the analyses apply them where they compare ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace/model.h"
#include "trace/reader.h"

namespace braid::analysis {

// A host call that orders GPU work across streams or against the host.
enum class SyncKind : uint8_t {
  EventRecord,        // cudaEventRecord
  StreamWaitEvent,    // cudaStreamWaitEvent
  StreamSynchronize,  // cudaStreamSynchronize
  EventSynchronize,   // cudaEventSynchronize
  DeviceSynchronize,  // cudaDeviceSynchronize
};
std::string_view to_string(SyncKind k);

struct SyncCall {
  SyncKind kind = SyncKind::EventRecord;
  ApiCall call;
};

// Compute a CPU job ran on the host (its aten ops, from an execution trace): never loaded from
// a file, added by the lift (fusion/lift_et.h) so that a host-only job's compute sits on the host
// pseudo-streams of its timeline beside the host collectives.
struct HostCompute {
  int64_t stream = -1;  // -1: the thread that issues the collectives; -2, -3, ...: other threads
  Ns start = 0, end = 0;
  int64_t step = -1;
  int32_t ref = -1;  // the lift's reference to what it computes
};

// Host time of the runtime/driver call that launched each GPU activity, by correlation id: a
// sorted array, 16 bytes a launch (an unordered_map took about 64). add() while loading, then
// finish(); find() reads a finished index.
class LaunchIndex {
 public:
  void add(int64_t correlation, Ns at) { v_.push_back({correlation, at}); }
  void finish();                       // sorts; of equal ids the first added is kept
  Ns find(int64_t correlation) const;  // -1 when unknown
  bool empty() const { return v_.empty(); }
  size_t size() const { return v_.size(); }
  void clear() { std::vector<std::pair<int64_t, Ns>>().swap(v_); }

 private:
  std::vector<std::pair<int64_t, Ns>> v_;
};

struct RankTrace {
  RankInfo info;
  std::vector<StreamInfo> streams;   // GPU streams only
  std::vector<Kernel> kernels;       // sorted by (stream, start)
  std::vector<Memcpy> memcpys;       // sorted by (stream, start)
  std::vector<Collective> collectives;  // sorted by start
  std::vector<SyncCall> syncs;       // sorted by start
  std::vector<Step> steps;           // sorted by step
  std::vector<HostCompute> host_compute;  // empty unless the lift added it
  LaunchIndex launches;                   // the launching calls' host times, by correlation id

  // Set by index_steps() when the steps, in their order, have increasing start times and
  // windows that do not overlap: step_at() is then a binary search (else a scan of every step).
  bool steps_ordered = false;
  void index_steps();

  Ns launch_of(int64_t correlation) const;  // -1 when unknown

  // Which step GPU work belongs to: the step whose host window holds the call that launched it
  // (found by correlation id), so work the GPU runs after the host moved on stays with the step
  // that issued it. Work whose launch the rank's trace lacks was launched outside the trace
  // (before it started): in no step. Only when the trace has no launch calls or the work no
  // correlation id does the window holding its own start decide. -1: in no step.
  int64_t step_at(Ns host_time) const;
  int64_t work_step(int64_t correlation, Ns start) const;
  int64_t kernel_step(const Kernel& k) const;
  int64_t memcpy_step(const Memcpy& m) const;
  // A collective: by its host enqueue, else (host collectives) its start, else its kernel's launch.
  int64_t collective_step(const Collective& c) const;
};

struct RunData {
  int64_t run_id = -1;
  const TraceReader* reader = nullptr;  // for names; must outlive the RunData
  std::vector<std::string> strings;     // the names by id when there is no reader (load_job)
  std::map<int32_t, RankTrace> ranks;   // by global rank
  std::vector<Communicator> comms;

  const std::string& str(StrId id) const;
  std::vector<int32_t> rank_ids() const;
  const RankTrace* rank(int32_t r) const;
};

// Called while a run loads with the number of rows read so far (every 4096 rows); returning
// false stops the load, which then throws braid::Error (the GUI cancels a load this way).
using LoadTick = std::function<bool(int64_t rows)>;

// Loads `run` from `reader`. Throws braid::Error(NotFound) when the run does not exist, and
// (Unsupported) before it reads a row when the run would not fit: load_bytes() more than
// memory_left() (a one-line error naming the file, the rows and both sizes, instead of the OOM
// killer or std::bad_alloc half way).
RunData load_run(const TraceReader& reader, int64_t run, const LoadTick& tick = nullptr);

// What loading `run` holds, estimated from its row counts: every row at its in-memory size,
// twice (vector growth, the launch index and the analysis's own tables over the rows).
int64_t load_bytes(const TraceReader& reader, int64_t run);

// Bytes this process may still allocate: the least of MemAvailable (/proc/meminfo), the
// address-space limit (`ulimit -v`) less what is mapped, and BRAID_MEMORY_LIMIT_MB when set
// (a budget on a shared host).
int64_t memory_left();

// A run analyzed one rank (or one window of every rank) at a time, so that what it holds does
// not grow with the file (analysis/stream.h). load_skeleton() reads every rank's info, GPU
// streams, steps and collectives, and the launches of its collectives (what matching, clock
// alignment and each collective's step need: a rank of RunData as load_job gives a rank another
// process holds); fill_rank() adds a rank's kernels, copies, synchronization calls and launches,
// the rank then as load_run() gives it; fill_window() adds only its GPU work that overlaps
// [t0, t1) of each of `streams` and the launch calls that start in [host0, host1) on `threads`;
// strip_rank() takes them away again.
RunData load_skeleton(const TraceReader& reader, int64_t run, const LoadTick& tick = nullptr);
// `run` with each rank's info and GPU streams, nothing else yet (load_skeleton's start).
RunData run_frame(const TraceReader& reader, int64_t run);
// Adds one rank's collectives, in the order load_skeleton() gives them (a load that reads the
// ranks one at a time from the start, as braid-view does).
void fill_collectives(const TraceReader& reader, int64_t run, RankTrace& t);
// What fill_rank saw of the rank, for its windows: the streams of its GPU work, the threads of
// its launch calls (runtime or driver calls with a correlation id), the longest of those calls.
struct RankShape {
  std::vector<int64_t> streams, threads;
  Ns longest_launch = 0;
};
// The run's synchronization calls by name id (sync_names reads every API call's name once).
using SyncNames = std::map<int64_t, SyncKind>;
SyncNames sync_names(const TraceReader& reader, int64_t run);
// The same from the file's names (every string that names a synchronization call), without
// reading the API calls: the same answer for any API call's name.
SyncNames sync_names(const std::vector<std::string>& strings);
void fill_rank(const TraceReader& reader, int64_t run, const SyncNames& names, RankTrace& t,
               RankShape* shape = nullptr);
struct RankWindow {
  struct Stream {
    int64_t id = 0;
    Ns t0 = 0;  // this stream's work from t0 to the window's t1
  };
  std::vector<Stream> streams;
  std::vector<int64_t> threads;
  Ns t0 = 0, t1 = 0;  // t0: the earliest of the streams'
  Ns host0 = 0, host1 = 0;
};
void fill_window(const TraceReader& reader, int64_t run, const SyncNames& names,
                 const RankWindow& w, RankTrace& t);
void strip_rank(RankTrace& t);

// The run `braid analyze` works on by default: the single run of the file, else the first
// captured or imported run (replayed and simulated runs come later in the file).
int64_t default_run(const TraceReader& reader);

}  // namespace braid::analysis

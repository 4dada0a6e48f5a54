// Turns parsed CUPTI activity and NCCL events into `.braid` rows, on the agent's writer thread.
//
// A collective row needs pieces that arrive separately and in any order: the NCCL call (host
// side, from the interposer), CUPTI's external-correlation record (our call or group id -> the
// launch's correlation id), the kernel (correlation id -> stream and GPU times) and, where NCCL's
// profiler plugin runs, the algorithm, protocol and channels. Calls wait in `pending_` until
// their kernel is seen; end_cycle() emits what is complete, and at the end (or after a while)
// the rest with host times only, counted in diagnostics.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/activity.h"
#include "capture/clock_fit.h"
#include "capture/nccl_event.h"
#include "capture/nvtx_log.h"
#include "capture/sink.h"
#include "trace/diagnostics.h"

namespace braid::capture {

class Collector final : public ActivityHandler {
 public:
  // `nccl_external_kind`: the CUPTI external-correlation kind the interposer pushes its ids as.
  Collector(Sink& sink, const ClockFit& clock, int32_t rank, uint32_t nccl_external_kind);

  // ActivityHandler (device times are mapped through the clock fit)
  void on_kernel(const KernelActivity& k) override;
  void on_mem(const MemActivity& m) override;
  void on_api(const ApiActivity& a) override;
  void on_sync(const SyncActivity& s) override;
  void on_marker(const MarkerActivity& m) override;
  void on_external_correlation(const ExternalCorrelationActivity& e) override;
  void on_device(const DeviceActivity& d) override;
  void on_unhandled(uint32_t cupti_kind) override;
  // An NVTX event the agent's own handlers logged (host clock): a push is matched to the next pop
  // of its thread and domain, a start to the end of its range id.
  void on_nvtx(const NvtxEvent& e);

  // Capture-window edges, in CUPTI's (device) clock, as the agent switches the window (each
  // window is stored in `capture_windows`, a window still open ending at the last cycle); `opener`
  // names the NVTX range whose start opened it ("" for other openings). Once any edge is known,
  // API records and NVTX ranges (whose CUPTI kinds stay on for the run) are kept only inside the
  // window: a range when its start is, or when it is the opener spanning the opening (its start
  // record precedes the opening callback). Before the first edge everything is kept.
  // `store`: the window is one the user asked for (not the whole run), stored as it goes.
  // The stored row covers every row the window kept, not only its edges: the range that opened
  // it starts before the opening, and a record mapped onto the host clock by a later fit than
  // the opening's can land before it (the row's start then moves: Sink::replace_window).
  void window_edge(bool open, int64_t device_ts, const std::string& opener, bool store = true);

  // The job's own CUPTI client took CUPTI from braid (`begins`) or braid took it back, at `ts` (the
  // edges' clock): braid has no CUDA records in between. The window open when the gap begins
  // closes there, and is stored from then on (a whole-run window too: the run has a hole); at the
  // gap's end a stored window opens when `reopen` (the window braid was asked for is open then).
  void cupti_gap(bool begins, int64_t ts, bool reopen);

  void on_nccl_call(const NcclCall& c);
  void on_graph_link(const NcclGraphLink& l);
  void on_nccl_detail(const NcclCallDetail& d);
  void on_nccl_proxy_op(const NcclProxyOp& p);
  void on_comm(const CommRecord& c);
  // A thread's name as the thread itself read it (the agent names a thread on its first NCCL call
  // or NVTX callback, so a thread that has ended by the time its records are written keeps its
  // name); replaces a name read from /proc.
  void name_thread(int64_t tid, const std::string& name);

  // Process identity. set_rank moves rows already written under the old rank.
  void set_rank_info(const RankInfo& r);
  int32_t rank() const { return rank_; }

  // Adds to (add) or sets (set) a diagnostics counter.
  // Diagnostics counters (trace/diagnostics.h gives each code's severity).
  void count(diag::Code code, int64_t n, const std::string& detail = "");
  void count(const Diagnostic& d);  // a diagnostic posted whole (its code, severity, count)
  void set_count(diag::Code code, int64_t n, const std::string& detail);

  // Emits the collectives whose kernels were seen; with `final`, all of them. Writes the
  // counters and small tables to the sink.
  void end_cycle(bool final);

  size_t pending_calls() const { return pending_.size(); }
  int64_t collectives_written() const { return collectives_; }

 private:
  struct KernelSpan {
    int64_t start = 0, end = 0, stream = 0;
    uint32_t correlation = 0;
    StrId name = 0;
    int age = 0;
  };
  struct Pending {
    NcclCall call;
    StrId comm = 0;
    int age = 0;
  };
  struct KernelName {
    StrId id;
    Category category;
    std::string raw;
  };
  const KernelName& kernel_name(const char* raw);
  void link_kernel(uint64_t ext, const KernelSpan& k);
  void emit(const Pending& p, const KernelSpan* k);
  void write_proxy_op(const NcclProxyOp& p);
  void note_stream(int64_t stream);
  // A host thread seen for the first time (in an API record, an NVTX range or an NCCL call):
  // named from /proc/self/task/<tid>/comm while it still runs (the writer thread sees its
  // records within a drain period), so the GUI shows "pt_main_thread" instead of a number.
  void note_thread(int64_t tid);
  bool in_window(int64_t device_ts) const;
  // A record of a graph launch: linked to the replayed calls of its node, or kept until their
  // links arrive.
  void graph_record(uint32_t correlation, uint64_t node, const KernelSpan& k);
  // A record with no start or ending before it (an incomplete one from a forced flush): counted.
  bool incomplete(int64_t start, int64_t end);
  Ns host(int64_t device_ts) const { return clock_.to_host(device_ts); }

  Sink& sink_;
  const ClockFit& clock_;
  int32_t rank_;
  uint32_t ext_kind_;
  RankInfo info_;
  bool info_dirty_ = true;
  int64_t collectives_ = 0;

  std::unordered_map<uint32_t, uint64_t> corr_to_ext_;
  std::unordered_map<uint32_t, KernelSpan> unlinked_;  // kernels whose external id is unknown yet
  std::unordered_map<uint64_t, KernelSpan> ext_kernels_;
  std::map<int64_t, Pending> pending_;  // by call id
  std::unordered_map<int64_t, NcclCallDetail> details_;
  std::unordered_map<int64_t, std::vector<NcclProxyOp>> early_proxies_;  // by call id
  std::unordered_map<int64_t, std::pair<StrId, int64_t>> call_keys_;  // call id -> (comm, seq)
  std::unordered_map<uint32_t, uint32_t> api_tid_;                    // correlation -> thread
  struct GraphKey {
    uint32_t correlation;
    uint64_t node;
    bool operator==(const GraphKey&) const = default;
  };
  struct GraphKeyHash {
    size_t operator()(const GraphKey& k) const {
      return k.node * 0x9e3779b97f4a7c15ull ^ k.correlation;
    }
  };
  std::unordered_map<GraphKey, std::vector<uint64_t>, GraphKeyHash> graph_links_;  // -> ext ids
  std::unordered_map<GraphKey, std::vector<KernelSpan>, GraphKeyHash> graph_unlinked_;
  struct Window {
    int64_t open, close;  // device clock; close INT64_MAX while open
    std::string opener;
    bool stored = true;  // written to `capture_windows`
    // `open` and `close` on the host clock, each mapped once: a refit of the clock moves
    // neither (the row's key must not move with it).
    Ns host_open = 0, host_close = 0;
    // The earliest start and latest end (host clock) of the rows the window kept.
    Ns first = INT64_MAX, last = INT64_MIN;
    Ns row_start = 0;    // the start of the row stored now: its key (run, rank, start)
    bool dirty = false;  // its span grew since the row was last written
  };
  // A row of `[start, end]` (host clock) was stored for the record at `device_ts` (for the range
  // that opened a window, that opening): the latest window opened at or before it covers it (the
  // first window, for a record from before any opening). Only the latest window grows: an earlier
  // one's records arrived before the next opening (its closing flushed CUPTI), and in attach mode
  // its capture is done.
  void kept(int64_t device_ts, Ns start, Ns end);
  // Writes the window's row: from the earlier of its opening and its first kept row to the later
  // of its closing (now, while open) and its last kept row.
  void store_window(Window& w);
  bool windowed_ = false;
  std::vector<Window> windows_;
  struct OpenMarker {
    int64_t device_start;
    int64_t start;
    StrId name, domain;
    uint64_t tid;
    std::string text, domain_text;
  };
  std::unordered_map<uint32_t, OpenMarker> markers_;
  // The agent's NVTX events: open pushes per (thread, domain), open start/end ranges by NVTX id,
  // each given a marker id of its own (above CUPTI's).
  std::map<std::pair<int64_t, std::string>, std::vector<uint32_t>> nvtx_pushed_;
  std::unordered_map<uint64_t, uint32_t> nvtx_started_;
  uint32_t next_nvtx_id_ = 1u << 31;
  std::unordered_map<uint32_t, OpenMarker> outside_markers_;  // started outside the window
  std::unordered_map<const char*, KernelName> kernel_names_;
  std::set<int64_t> streams_;
  std::set<int64_t> threads_;
  std::map<uint32_t, std::string> device_names_;
  std::set<std::string> comms_written_;
  struct Counter {
    Severity sev;
    int64_t n;
    std::string detail;
    bool dirty;
  };
  std::map<std::string, Counter> counters_;
};

// The largest a map of in-flight correlations may grow to before its oldest half is dropped.
inline constexpr size_t kMaxInFlight = 1 << 18;

}  // namespace braid::capture

#include "capture/collector.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "capture/config.h"
#include "trace/categories.h"

namespace braid::capture {
namespace {

// Calls wait this many writer cycles for their kernel before being written host-side only.
constexpr int kMaxPendingCycles = 40;

template <typename M>
void bound(M& m) {
  if (m.size() > kMaxInFlight) m.clear();  // only under a flood of unmatched records
}

void counts_for(const NcclCall& c, int nranks, int64_t& in, int64_t& out) {
  int64_t n = c.count, r = std::max(1, nranks);
  switch (c.op) {
    case CollOp::AllGather: in = n; out = n * r; break;
    case CollOp::ReduceScatter: in = n * r; out = n; break;
    case CollOp::AllToAll: in = n * r; out = n * r; break;
    case CollOp::Gather: in = n; out = n * r; break;
    case CollOp::Scatter: in = n * r; out = n; break;
    default: in = n; out = n; break;
  }
}

}  // namespace

Collector::Collector(Sink& sink, const ClockFit& clock, int32_t rank, uint32_t nccl_external_kind)
    : sink_(sink), clock_(clock), rank_(rank), ext_kind_(nccl_external_kind) {
  info_.rank = rank;
}

void Collector::note_stream(int64_t stream) {
  if (streams_.insert(stream).second)
    sink_.add_stream({rank_, stream, true, "stream " + std::to_string(stream)});
}

void Collector::note_thread(int64_t tid) {
  if (tid <= 0 || !threads_.insert(tid).second) return;
  std::string path = "/proc/self/task/" + std::to_string(tid) + "/comm";
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return;  // gone already, or not a thread of this process: the GUI shows its id
  char name[64] = {};
  size_t n = std::fread(name, 1, sizeof name - 1, f);
  std::fclose(f);
  while (n > 0 && (name[n - 1] == '\n' || name[n - 1] == '\0')) --n;
  if (n > 0) sink_.add_stream({rank_, tid, false, std::string(name, n)});
}

void Collector::name_thread(int64_t tid, const std::string& name) {
  if (tid <= 0 || name.empty()) return;
  threads_.insert(tid);
  sink_.add_stream({rank_, tid, false, name});
}

void Collector::window_edge(bool open, int64_t device_ts, const std::string& opener, bool store) {
  windowed_ = true;
  if (open) {
    if (windows_.empty() || windows_.back().close != INT64_MAX) {
      Window w;
      w.open = device_ts;
      w.close = INT64_MAX;
      w.opener = opener;
      w.stored = store;
      w.host_open = w.row_start = host(device_ts);
      windows_.push_back(w);
      // Stored at once (ending where it starts), extended every cycle while it is open.
      if (store) sink_.add(CaptureWindow{rank_, w.host_open, w.host_open});
    }
  } else if (!windows_.empty() && windows_.back().close == INT64_MAX) {
    Window& w = windows_.back();
    w.close = device_ts;
    w.host_close = std::max(w.host_open, host(device_ts));
    if (w.stored) store_window(w);
  }
}

void Collector::cupti_gap(bool begins, int64_t ts, bool reopen) {
  windowed_ = true;
  if (!begins) {
    if (reopen) window_edge(true, ts, "", true);
    return;
  }
  if (windows_.empty() || windows_.back().close != INT64_MAX) return;
  Window& w = windows_.back();
  if (!w.stored) {  // the whole run's window: stored now that the run has a hole
    w.stored = true;
    w.row_start = w.host_open;
    sink_.add(CaptureWindow{rank_, w.host_open, w.host_open});
  }
  window_edge(false, ts, "", true);
}

void Collector::kept(int64_t device_ts, Ns start, Ns end) {
  if (windows_.empty()) return;
  auto it = std::find_if(windows_.rbegin(), windows_.rend(),
                         [&](const Window& w) { return w.open <= device_ts; });
  const Window* owner = it == windows_.rend() ? &windows_.front() : &*it;
  Window& w = windows_.back();
  if (owner != &w) return;  // unstored ones too: a gap stores the whole run's window
  if (start < w.first) w.first = start, w.dirty = true;
  if (end > w.last) w.last = end, w.dirty = true;
}

void Collector::store_window(Window& w) {
  CaptureWindow row{rank_, std::min(w.host_open, w.first), 0};
  const Ns closed = w.close == INT64_MAX ? host_now_ns() : w.host_close;
  row.end = std::max({row.start, closed, w.last});
  if (row.start != w.row_start)
    sink_.replace_window(w.row_start, row);
  else
    sink_.add(row);
  w.row_start = row.start;
  w.dirty = false;
}

bool Collector::in_window(int64_t ts) const {
  if (!windowed_) return true;
  for (auto it = windows_.rbegin(); it != windows_.rend(); ++it)
    if (ts >= it->open && ts <= it->close) return true;
  return false;
}

bool Collector::incomplete(int64_t start, int64_t end) {
  if (start > 0 && end >= start) return false;
  count(diag::Code::capture_incomplete_records, 1,
        "activity records without a start, or ending before it (incomplete when CUPTI was made "
        "to hand them over): not stored");
  return true;
}

void Collector::on_kernel(const KernelActivity& a) {
  if (incomplete(a.start, a.end)) return;
  KernelSpan k;
  k.start = host(a.start);
  k.end = host(a.end);
  k.stream = a.stream;
  k.correlation = a.correlation;
  const KernelName& kn = kernel_name(a.name);
  k.name = kn.id;
  Kernel row;
  row.rank = rank_;
  row.stream = a.stream;
  row.start = k.start;
  row.end = k.end;
  row.name = k.name;
  row.category = kn.category;
  row.correlation = a.correlation;
  auto it = corr_to_ext_.find(a.correlation);
  if (a.graph_node != 0) {
    graph_record(a.correlation, a.graph_node, k);
  } else if (it != corr_to_ext_.end()) {
    row.external_id = static_cast<int64_t>(it->second);
    link_kernel(it->second, k);
  } else if (is_comm(row.category)) {
    bound(unlinked_);
    unlinked_[a.correlation] = k;
  }
  note_stream(a.stream);
  kept(a.start, k.start, k.end);
  if (info_.device < 0) {  // the process's GPU is the one its kernels run on
    info_.device = static_cast<int32_t>(a.device);
    if (auto n = device_names_.find(a.device); n != device_names_.end()) info_.device_name = n->second;
    info_dirty_ = true;
  }
  sink_.add(row);
}

const Collector::KernelName& Collector::kernel_name(const char* raw) {
  // CUPTI hands the same pointer for every launch of a function: demangle and classify once.
  auto it = kernel_names_.find(raw);
  // The pointer is the key; its text is checked in case the memory now holds another name.
  if (it != kernel_names_.end() && it->second.raw == (raw ? raw : "")) return it->second;
  std::string name = raw ? raw : "";
  std::string raw_text = name;
  if (name.rfind("_Z", 0) == 0) {
    int status = 0;
    char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    if (status == 0 && d) name = d;
    std::free(d);
  }
  KernelName kn{sink_.intern(name), classify_kernel(name), std::move(raw_text)};
  if (kernel_names_.size() > kMaxInFlight) kernel_names_.clear();
  return kernel_names_.insert_or_assign(raw, std::move(kn)).first->second;
}

void Collector::link_kernel(uint64_t ext, const KernelSpan& k) {
  auto [it, fresh] = ext_kernels_.try_emplace(ext, k);
  if (!fresh) {  // a group launched several kernels: the collective spans them
    it->second.start = std::min(it->second.start, k.start);
    it->second.end = std::max(it->second.end, k.end);
    it->second.age = 0;
  }
}

void Collector::graph_record(uint32_t correlation, uint64_t node, const KernelSpan& k) {
  GraphKey key{correlation, node};
  auto it = graph_links_.find(key);
  if (it != graph_links_.end()) {
    for (uint64_t ext : it->second) link_kernel(ext, k);
    return;
  }
  bound(graph_unlinked_);
  graph_unlinked_[key].push_back(k);
}

void Collector::on_graph_link(const NcclGraphLink& l) {
  GraphKey key{l.correlation, l.node};
  bound(graph_links_);
  graph_links_[key].push_back(l.external_id);
  if (auto it = graph_unlinked_.find(key); it != graph_unlinked_.end())
    for (const KernelSpan& k : it->second) link_kernel(l.external_id, k);
}

void Collector::on_external_correlation(const ExternalCorrelationActivity& e) {
  if (e.kind != ext_kind_) return;
  bound(corr_to_ext_);
  corr_to_ext_[e.correlation] = e.external_id;
  auto it = unlinked_.find(e.correlation);
  if (it != unlinked_.end()) {
    link_kernel(e.external_id, it->second);
    unlinked_.erase(it);
  }
}

void Collector::on_mem(const MemActivity& a) {
  if (incomplete(a.start, a.end)) return;
  Memcpy m;
  m.rank = rank_;
  m.stream = a.stream;
  m.start = host(a.start);
  m.end = host(a.end);
  m.kind = a.kind;
  m.bytes = a.bytes;
  m.name = sink_.intern(a.kind == MemKind::Memset ? "Memset"
                                                  : "Memcpy " + std::string(to_string(a.kind)));
  m.correlation = a.correlation;
  note_stream(a.stream);
  // NCCL on one rank copies instead of launching a kernel: the copy carries the collective.
  KernelSpan span{m.start, m.end, m.stream, a.correlation, m.name, 0};
  if (a.graph_node != 0)
    graph_record(a.correlation, a.graph_node, span);
  else if (auto it = corr_to_ext_.find(a.correlation); it != corr_to_ext_.end())
    link_kernel(it->second, span);
  kept(a.start, m.start, m.end);
  sink_.add(m);
}

void Collector::on_api(const ApiActivity& a) {
  if (!in_window(a.start)) return;  // API records stay on for the run; rows are the window's
  if (incomplete(a.start, a.end)) return;
  ApiCall c;
  c.rank = rank_;
  c.tid = a.tid;
  c.start = host(a.start);
  c.end = host(a.end);
  c.name = sink_.intern(a.name ? a.name : "unknown API");
  c.kind = a.kind;
  c.correlation = a.correlation;
  auto it = corr_to_ext_.find(a.correlation);
  if (it != corr_to_ext_.end()) c.external_id = static_cast<int64_t>(it->second);
  bound(api_tid_);
  api_tid_[a.correlation] = a.tid;
  note_thread(c.tid);
  kept(a.start, c.start, c.end);
  sink_.add(c);
}

void Collector::on_sync(const SyncActivity& s) {
  if (incomplete(s.start, s.end)) return;
  ApiCall c;
  c.rank = rank_;
  auto it = api_tid_.find(s.correlation);
  c.tid = it == api_tid_.end() ? 0 : it->second;
  c.start = host(s.start);
  c.end = host(s.end);
  c.name = sink_.intern(std::string("sync:") + s.what);
  c.kind = ApiKind::Other;
  c.correlation = s.correlation;
  kept(s.start, c.start, c.end);
  sink_.add(c);
}

void Collector::on_marker(const MarkerActivity& m) {
  if (m.phase == MarkerActivity::Start || m.phase == MarkerActivity::Instant) {
    bool inside = in_window(m.timestamp);
    if (m.phase == MarkerActivity::Instant && !inside) return;
    std::string text = m.name ? m.name : "";
    const Ns start = m.host_clock ? m.timestamp : host(m.timestamp);
    OpenMarker o{m.timestamp, start, 0, 0, m.tid, text, m.domain ? m.domain : ""};
    if (!inside) {  // kept aside: it may be the range that opened the window
      bound(outside_markers_);
      outside_markers_[m.id] = std::move(o);
      return;
    }
    o.name = sink_.intern(text);
    o.domain = sink_.intern(o.domain_text);
    note_thread(static_cast<int64_t>(o.tid));
    if (m.phase == MarkerActivity::Instant) {
      kept(m.timestamp, o.start, o.start);
      sink_.add(Range{rank_, static_cast<int64_t>(o.tid), false, o.start, o.start, o.name,
                      o.domain, 0});
      return;
    }
    bound(markers_);
    markers_[m.id] = std::move(o);
    return;
  }
  auto it = markers_.find(m.id);
  if (it == markers_.end()) {
    auto out = outside_markers_.find(m.id);
    if (out != outside_markers_.end()) {
      // The range whose start opened a window spans its opening; any other began outside.
      OpenMarker o = std::move(out->second);
      outside_markers_.erase(out);
      auto opened = std::find_if(windows_.begin(), windows_.end(), [&](const Window& w) {
        return !w.opener.empty() && w.opener == o.text && o.device_start <= w.open &&
               m.timestamp >= w.open;
      });
      if (opened == windows_.end()) return;
      o.device_start = opened->open;  // kept by the window it opened
      o.name = sink_.intern(o.text);
      o.domain = sink_.intern(o.domain_text);
      note_thread(static_cast<int64_t>(o.tid));
      it = markers_.emplace(m.id, std::move(o)).first;
    } else {
      count(diag::Code::capture_unmatched_marker_end, 1,
            "an NVTX range ended whose start was before CUPTI started");
      return;
    }
  }
  const OpenMarker& o = it->second;
  Ns end = m.host_clock ? m.timestamp : host(m.timestamp);
  kept(o.device_start, o.start, end);
  sink_.add(Range{rank_, static_cast<int64_t>(o.tid), false, o.start, end, o.name, o.domain, 0});
  if (auto step = step_from_range_name(o.text)) sink_.add(Step{rank_, *step, o.start, end});
  markers_.erase(it);
}

void Collector::on_nvtx(const NvtxEvent& e) {
  MarkerActivity m;
  m.timestamp = e.ts;
  m.host_clock = true;
  m.tid = static_cast<uint64_t>(e.tid);
  const std::string name(e.name), domain(e.domain);
  m.name = name.c_str();
  m.domain = domain.c_str();
  auto unmatched = [&] {
    count(diag::Code::capture_unmatched_marker_end, 1,
          "an NVTX range ended whose start was before the capture started");
  };
  switch (e.kind) {
    case NvtxEvent::Push:
      m.phase = MarkerActivity::Start;
      m.id = next_nvtx_id_++;
      nvtx_pushed_[{e.tid, domain}].push_back(m.id);
      break;
    case NvtxEvent::Pop: {
      auto it = nvtx_pushed_.find({e.tid, domain});
      if (it == nvtx_pushed_.end() || it->second.empty()) return unmatched();
      m.phase = MarkerActivity::End;
      m.id = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) nvtx_pushed_.erase(it);
      break;
    }
    case NvtxEvent::Start:
      m.phase = MarkerActivity::Start;
      m.id = next_nvtx_id_++;
      bound(nvtx_started_);
      nvtx_started_[e.id] = m.id;
      break;
    case NvtxEvent::End: {
      auto it = nvtx_started_.find(e.id);
      if (it == nvtx_started_.end()) return unmatched();
      m.phase = MarkerActivity::End;
      m.id = it->second;
      nvtx_started_.erase(it);
      break;
    }
    case NvtxEvent::Mark:
      m.phase = MarkerActivity::Instant;
      m.id = next_nvtx_id_++;
      break;
  }
  if (next_nvtx_id_ == 0) next_nvtx_id_ = 1u << 31;  // wrapped
  on_marker(m);
}

void Collector::on_device(const DeviceActivity& d) {
  if (!d.name) return;
  device_names_[d.id] = d.name;
  if (info_.device == static_cast<int32_t>(d.id)) {
    info_.device_name = d.name;
    info_dirty_ = true;
  }
}

void Collector::on_unhandled(uint32_t kind) {
  count(diag::Code::capture_unhandled_activity_kind, 1,
        "CUPTI records of a kind braid does not store (last kind " + std::to_string(kind) + ")");
}

void Collector::on_nccl_call(const NcclCall& c) {
  if (!c.in_window) return;
  Pending p;
  p.call = c;
  p.comm = sink_.intern(c.comm ? c.comm->identity : "nccl:unknown");
  NcclCallRow row;
  row.rank = rank_;
  row.comm = p.comm;
  row.seq = c.seq;
  row.call_id = c.call_id;
  row.group_id = c.group_id;
  row.op = c.op;
  row.redop = sink_.intern(c.redop);
  row.sendbuff = c.sendbuff;
  row.recvbuff = c.recvbuff;
  row.count = c.count;
  row.dtype = sink_.intern(c.dtype);
  row.peer_or_root = c.peer_or_root;
  row.stream_handle = c.stream_handle;
  row.tid = c.tid;
  note_thread(c.tid);
  row.enqueue = c.enqueue;
  row.ret = c.ret;
  row.result = c.result;
  if (c.comm) {
    row.comm_rank = c.comm->rank;
    row.comm_size = c.comm->nranks;
  }
  sink_.add(row);
  if (c.comm) on_comm(*c.comm);
  call_keys_[c.call_id] = {p.comm, c.seq};
  if (auto it = early_proxies_.find(c.call_id); it != early_proxies_.end()) {
    for (auto& op : it->second) write_proxy_op(op);
    early_proxies_.erase(it);
  }
  if (c.graph == kGraphCaptured) {  // launches nothing now: its collectives are the replays
    count(diag::Code::capture_nccl_graph_captured, 1,
          "NCCL calls made during CUDA stream capture (nccl_calls rows with seq -1): they ran "
          "nothing then; each graph launch adds a row and a collective per captured call");
    return;
  }
  pending_.emplace(c.call_id, p);
}

void Collector::on_nccl_detail(const NcclCallDetail& d) {
  auto [it, fresh] = details_.try_emplace(d.call_id, d);
  if (!fresh) {
    if (!d.algo.empty()) it->second.algo = d.algo;
    if (!d.proto.empty()) it->second.proto = d.proto;
    if (d.channels >= 0) it->second.channels = d.channels;
  }
}

void Collector::on_nccl_proxy_op(const NcclProxyOp& p) {
  auto it = call_keys_.find(p.call_id);
  if (it == call_keys_.end() && p.call_id != 0) {
    // Reported before its call's record reached the writer: kept until it does.
    bound(early_proxies_);
    early_proxies_[p.call_id].push_back(p);
    return;
  }
  write_proxy_op(p);
}

void Collector::write_proxy_op(const NcclProxyOp& p) {
  ProxyOpRow r;
  r.rank = rank_;
  r.call_id = p.call_id;
  if (auto it = call_keys_.find(p.call_id); it != call_keys_.end()) {
    r.comm = it->second.first;
    r.seq = it->second.second;
  }
  r.channel = p.channel;
  r.peer = p.peer;
  r.is_send = p.is_send;
  r.steps = p.steps;
  r.chunk_size = p.chunk_size;
  r.tid = p.tid;
  r.start = p.start;
  r.end = p.end;
  sink_.add(r);
}

void Collector::on_comm(const CommRecord& c) {
  if (c.nranks < 0) return;
  std::string key = c.identity + "#" + std::to_string(c.nranks);
  if (!comms_written_.insert(key).second) return;
  Communicator row;
  row.comm = c.identity;
  row.nranks = c.nranks;
  row.label = c.parent.empty() ? c.how : c.how + " of " + c.parent;
  row.backend = "nccl";
  sink_.add_communicator(row);
}

void Collector::set_rank_info(const RankInfo& r) {
  if (r.rank != rank_) {
    sink_.renumber_rank(rank_, r.rank);
    // Streams are re-announced under the new rank by the sink's renumbering.
    rank_ = r.rank;
  }
  int32_t device = info_.device;
  std::string device_name = info_.device_name;
  info_ = r;
  if (info_.device < 0) info_.device = device;
  if (info_.device_name.empty()) info_.device_name = device_name;
  info_dirty_ = true;
}

void Collector::count(diag::Code code, int64_t n, const std::string& detail) {
  count(diag::make(code, n, detail));
}

void Collector::count(const Diagnostic& d) {
  auto& c = counters_[d.code];
  c.sev = d.severity;
  c.n += d.count;
  if (c.detail.empty() || !d.detail.empty()) c.detail = d.detail;
  c.dirty = true;
}

void Collector::set_count(diag::Code code, int64_t n, const std::string& detail) {
  const Severity sev = diag::info(code).severity;
  auto& c = counters_[std::string(diag::info(code).code)];
  if (c.n == n && c.detail == detail && c.sev == sev && !c.dirty) return;
  c = {sev, n, detail, true};
}

void Collector::emit(const Pending& p, const KernelSpan* k) {
  const NcclCall& c = p.call;
  Collective row;
  row.rank = rank_;
  row.comm = p.comm;
  row.seq = c.seq;
  row.op = c.op;
  row.dtype = sink_.intern(c.dtype);
  counts_for(c, c.comm ? c.comm->nranks.load() : 1, row.in_count, row.out_count);
  row.bytes = c.dtype_bytes > 0 ? std::max(row.in_count, row.out_count) * c.dtype_bytes : -1;
  row.peer_or_root = c.peer_or_root;
  row.enqueue = c.enqueue;
  row.group_size = c.group_size;
  if (k) {
    row.stream = k->stream;
    row.start = k->start;
    row.end = k->end;
    row.name = k->name;
    row.kernel_ref = k->correlation;
  } else {
    row.stream = -1;
    row.start = c.enqueue;
    row.end = c.ret;
    row.name = sink_.intern(std::string("nccl") + std::string(to_string(c.op)));
    kept(c.enqueue, row.start, row.end);  // the window edges' clock: the host's
  }
  if (auto it = details_.find(c.call_id); it != details_.end()) {
    row.algo = sink_.intern(it->second.algo);
    row.proto = sink_.intern(it->second.proto);
    row.channels = it->second.channels;
    details_.erase(it);
  }
  sink_.add(row);
  ++collectives_;
}

namespace {
// NCCL does no GPU work for a collective that moves nothing: in place on a one-rank communicator
// (NCCL 2.28 copies out-of-place ones inside the call), or of zero elements.
bool no_gpu_work(const NcclCall& c) {
  if (c.count == 0) return true;
  return c.comm && c.comm->nranks == 1 && c.sendbuff != 0 && c.sendbuff == c.recvbuff;
}
}  // namespace

void Collector::end_cycle(bool final) {
  int64_t without_kernel = 0, without_work = 0;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    // The call's own id (pushed around the call: a one-rank collective copies inside it, grouped
    // or not), else its group's (the group's kernels launch at ncclGroupEnd).
    auto k = ext_kernels_.find(p.call.external_id);
    if (k == ext_kernels_.end() && p.call.group_id != 0)
      k = ext_kernels_.find(static_cast<uint64_t>(p.call.group_id));
    if (k != ext_kernels_.end() && (final || k->second.age > 0 || p.age > 0)) {
      emit(p, &k->second);
    } else if (k == ext_kernels_.end() && no_gpu_work(p.call)) {
      emit(p, nullptr);
      ++without_work;
    } else if (final || ++p.age > kMaxPendingCycles) {
      emit(p, nullptr);
      ++without_kernel;
    } else {
      ++it;
      continue;
    }
    it = pending_.erase(it);
  }
  if (without_work)
    count(diag::Code::capture_collective_no_gpu_work, without_work,
          "NCCL calls that do no GPU work (in place on a one-rank communicator, or zero "
          "elements): times are the host call's");
  if (without_kernel)
    count(diag::Code::capture_collective_without_kernel, without_kernel,
          "NCCL calls whose GPU kernel or copy was not seen (outside the window, CUPTI off, or "
          "dropped records): times are the host call's");
  // A window still open ends now, for as long as it stays open (a capture killed inside its
  // window keeps the part written); a closed one is rewritten when rows kept for it arrived late.
  if (!windows_.empty() && windows_.back().stored &&
      (windows_.back().close == INT64_MAX || windows_.back().dirty))
    store_window(windows_.back());
  for (auto it = ext_kernels_.begin(); it != ext_kernels_.end();) {
    if (final || ++it->second.age > kMaxPendingCycles * 2) it = ext_kernels_.erase(it);
    else ++it;
  }
  if (final) {
    for (auto& [id, ops] : early_proxies_)  // their calls were outside the window
      for (auto& op : ops) write_proxy_op(op);
    early_proxies_.clear();
    if (!markers_.empty())
      count(diag::Code::capture_unclosed_range, static_cast<int64_t>(markers_.size()),
            "NVTX ranges still open when the capture ended (not stored)");
    markers_.clear();
  }
  if (call_keys_.size() > kMaxInFlight) call_keys_.clear();
  if (final) {
    graph_links_.clear();
    graph_unlinked_.clear();
  }
  if (details_.size() > kMaxInFlight) details_.clear();
  if (info_dirty_) {
    sink_.set_rank_info(info_);
    info_dirty_ = false;
  }
  for (auto& [code, c] : counters_) {
    if (!c.dirty) continue;
    c.dirty = false;
    Diagnostic d;
    d.rank = rank_;
    d.severity = c.sev;
    d.code = code;
    d.count = c.n;
    d.detail = c.detail;
    sink_.set_diagnostic(d);
  }
}

}  // namespace braid::capture

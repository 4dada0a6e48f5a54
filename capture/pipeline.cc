#include "capture/pipeline.h"

#include <chrono>
#include <cstdio>
#include <ctime>

#include "capture/nvtx_log.h"

namespace braid::capture {
Pipeline::Pipeline(SinkFactory make_sink, int32_t rank, uint32_t nccl_external_kind,
                   PipelineHooks hooks, PipelineOptions opts, BufferPool* pool)
    : make_sink_(std::move(make_sink)),
      rank_(rank),
      ext_kind_(nccl_external_kind),
      hooks_(std::move(hooks)),
      opts_(opts),
      pool_(pool) {
  calibrate();
  queue_.reserve(4096);
  thread_ = std::thread([this] { run(); });
}

Pipeline::Pipeline(std::unique_ptr<Sink> sink, int32_t rank, uint32_t nccl_external_kind,
                   PipelineHooks hooks, PipelineOptions opts, BufferPool* pool)
    : Pipeline([s = std::make_shared<std::unique_ptr<Sink>>(std::move(sink))] { return std::move(*s); },
               rank, nccl_external_kind, std::move(hooks), opts, pool) {}

Pipeline::~Pipeline() { stop(); }

void Pipeline::push(Item item) {
  std::lock_guard lk(mu_);
  if (stopped_ || queue_.size() >= opts_.max_queued) {
    ++dropped_;
    if (auto* b = std::get_if<Buffer>(&item); b && pool_) pool_->release(b->data);
    return;
  }
  queue_.push_back(std::move(item));
}

void Pipeline::post(NcclCall c) { push(std::move(c)); }
void Pipeline::post(NcclGraphLink l) { push(l); }
void Pipeline::post(NcclCallDetail d) { push(std::move(d)); }
void Pipeline::post(NcclProxyOp p) { push(std::move(p)); }
void Pipeline::post(NcclCommEvent e) { push(std::move(e)); }
void Pipeline::post(RankInfo r) { push(std::move(r)); }
void Pipeline::post(Diagnostic d) { push(std::move(d)); }
void Pipeline::post_buffer(uint8_t* buf, size_t valid) { push(Buffer{buf, valid}); }
void Pipeline::post_control(Control fn) {
  // Never dropped for a full queue: a lost close would leave a capture window open.
  std::lock_guard lk(mu_);
  if (stopped_) return;
  queue_.push_back(std::move(fn));
  ++flush_requests_;
  cv_.notify_all();
}

int64_t Pipeline::dropped() const {
  std::lock_guard lk(const_cast<std::mutex&>(mu_));
  return dropped_;
}

void Pipeline::set_hooks(PipelineHooks hooks) {
  std::lock_guard hl(hooks_mu_);
  hooks_ = std::move(hooks);
}

PipelineHooks Pipeline::hooks() {
  std::lock_guard hl(hooks_mu_);
  return hooks_;
}

void Pipeline::request_flush(bool forced) {
  std::lock_guard lk(mu_);
  ++flush_requests_;
  forced_ = forced_ || forced;
  cv_.notify_all();
}

void Pipeline::calibrate() {
  auto device_clock = hooks().device_clock;
  if (!device_clock) return;
  clock_.add(ClockFit::sample(device_clock, host_now_ns));
  clock_.refit();
}

void Pipeline::drain(bool final) {
  PipelineHooks h = hooks();
  // CUPTI's flush calls back into post_buffer(): no lock of ours is held across it.
  if (h.request_flush) h.request_flush(final);
  std::vector<Item> items = std::move(spare_);
  items.clear();
  // NVTX events written up to here are read after the queue taken below: a window edge posted
  // before an event is always handed to the collector before that event.
  NvtxLog::freeze();
  {
    std::lock_guard lk(mu_);
    items.swap(queue_);
  }
  struct KeepCapacity {  // hand the vector back for the next swap, however drain ends
    std::vector<Item>& items;
    std::vector<Item>& spare;
    ~KeepCapacity() {
      items.clear();
      spare = std::move(items);
    }
  } keep{items, spare_};
  if (!sink_ && !sink_failed_) {
    try {
      sink_ = make_sink_();
      collector_ = std::make_unique<Collector>(*sink_, clock_, rank_, ext_kind_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "braid capture: nothing captured in this process: %s\n", e.what());
      sink_failed_ = true;
    }
  }
  if (sink_failed_) {  // nowhere to write: drop, but give the buffers back to CUPTI
    for (auto& item : items)
      if (auto* b = std::get_if<Buffer>(&item); b && pool_) pool_->release(b->data);
    NvtxLog::read([](const NvtxEvent&) {});
    return;
  }
  Collector& col = *collector_;
  for (auto& item : items) {
    if (auto* b = std::get_if<Buffer>(&item)) {
      if (h.parse) h.parse(b->data, b->valid, col);
      if (pool_) pool_->release(b->data);
    } else if (auto* c = std::get_if<NcclCall>(&item)) {
      col.on_nccl_call(*c);
    } else if (auto* l = std::get_if<NcclGraphLink>(&item)) {
      col.on_graph_link(*l);
    } else if (auto* d = std::get_if<NcclCallDetail>(&item)) {
      col.on_nccl_detail(*d);
    } else if (auto* p = std::get_if<NcclProxyOp>(&item)) {
      col.on_nccl_proxy_op(*p);
    } else if (auto* e = std::get_if<NcclCommEvent>(&item)) {
      if (e->comm) col.on_comm(*e->comm);
    } else if (auto* r = std::get_if<RankInfo>(&item)) {
      col.set_rank_info(*r);
    } else if (auto* d = std::get_if<Diagnostic>(&item)) {
      col.count(*d);
    } else if (auto* f = std::get_if<Control>(&item)) {
      if (*f) (*f)(col);
    }
  }
  NvtxLog::read([&col](const NvtxEvent& e) { col.on_nvtx(e); });
  if (h.update_counters) h.update_counters(col);
  if (pool_ && pool_->refused() > 0)
    col.set_count(diag::Code::capture_buffer_refused, pool_->refused(),
                  "activity buffers CUPTI asked for beyond the pool's cap (its records were "
                  "dropped; raise BRAID_CAPTURE_MAX_BUFFERS)");
  // NVTX events a thread could not log (its unread log at its cap) count as the queue's.
  int64_t dropped = this->dropped() + NvtxLog::dropped();
  if (dropped)
    col.set_count(diag::Code::capture_queue_overflow, dropped,
                  "events dropped because the writer fell behind");
  auto fits = clock_.fits();
  if (!fits.empty()) {
    double worst = 0;
    for (auto& f : fits) worst = std::max(worst, f.residual_ns);
    char detail[160];
    std::snprintf(detail, sizeof detail,
                  "device-to-host clock fits: %zu, last slope %.9f, worst RMS residual %.0f ns",
                  fits.size(), fits.back().slope, worst);
    col.set_count(diag::Code::capture_clock_fit, static_cast<int64_t>(fits.size()), detail);
  }
  col.end_cycle(final);
  sink_->checkpoint();
}

void Pipeline::run() {
  using clock = std::chrono::steady_clock;
  auto next_cal = clock::now() + std::chrono::milliseconds(opts_.recalibrate_ms);
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait_for(lk, std::chrono::milliseconds(opts_.flush_ms),
                 [&] { return stopping_ || flush_requests_ > flushes_done_; });
    if (stopping_) return;
    uint64_t target = flush_requests_;
    bool forced = forced_;
    forced_ = false;
    lk.unlock();
    if (auto tick = hooks().on_tick) tick();
    if (clock::now() >= next_cal) {
      calibrate();
      next_cal = clock::now() + std::chrono::milliseconds(opts_.recalibrate_ms);
    }
    try {
      drain(forced);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "braid capture: writing failed: %s\n", e.what());
    }
    lk.lock();
    flushes_done_ = std::max(flushes_done_, target);
    done_cv_.notify_all();
  }
}

void Pipeline::flush(bool forced) {
  std::unique_lock lk(mu_);
  if (stopped_) return;
  uint64_t target = ++flush_requests_;
  forced_ = forced_ || forced;
  cv_.notify_all();
  done_cv_.wait(lk, [&] { return flushes_done_ >= target || stopping_; });
}

void Pipeline::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopped_ || stopping_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  try {
    calibrate();
    drain(true);
    if (sink_) sink_->close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid capture: finishing the output failed: %s\n", e.what());
  }
  std::lock_guard lk(mu_);
  stopped_ = true;
  done_cv_.notify_all();
}

}  // namespace braid::capture

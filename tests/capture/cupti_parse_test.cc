// The agent's CUPTI buffer parser on synthetic buffers: records of every kind the agent enables,
// built from CUPTI's own struct types and laid out back to back as CUPTI fills its buffers, read
// with cuptiActivityGetNextRecord exactly as in a live capture (no GPU needed).
#include <cupti.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "capture/collector.h"
#include "capture/cupti_parse.h"
#include "capture/file_sink.h"
#include "trace/reader.h"
#include "trace/test_util.h"

namespace braid::capture {
namespace {

class BufferBuilder {
 public:
  BufferBuilder() : bytes_(1 << 16, 0) {}
  template <typename T>
  void add(const T& rec) {
    static_assert(sizeof(T) % 8 == 0, "CUPTI records are 8-byte multiples");
    std::memcpy(bytes_.data() + used_, &rec, sizeof rec);
    used_ += sizeof rec;
  }
  uint8_t* data() { return bytes_.data(); }
  size_t size() const { return used_; }

 private:
  alignas(8) std::vector<uint8_t> bytes_;
  size_t used_ = 0;
};

struct Recorder : ActivityHandler {
  std::vector<KernelActivity> kernels;
  std::vector<MemActivity> mems;
  std::vector<ApiActivity> apis;
  std::vector<SyncActivity> syncs;
  std::vector<MarkerActivity> markers;
  std::vector<std::string> marker_names;
  std::vector<ExternalCorrelationActivity> exts;
  std::vector<DeviceActivity> devices;
  std::vector<std::string> kernel_names, api_names;
  std::vector<uint32_t> unhandled;
  void on_kernel(const KernelActivity& k) override {
    kernels.push_back(k);
    kernel_names.emplace_back(k.name ? k.name : "");
  }
  void on_mem(const MemActivity& m) override { mems.push_back(m); }
  void on_api(const ApiActivity& a) override {
    apis.push_back(a);
    api_names.emplace_back(a.name ? a.name : "");
  }
  void on_sync(const SyncActivity& s) override { syncs.push_back(s); }
  void on_marker(const MarkerActivity& m) override {
    markers.push_back(m);
    marker_names.emplace_back(m.name ? m.name : "");
  }
  void on_external_correlation(const ExternalCorrelationActivity& e) override { exts.push_back(e); }
  void on_device(const DeviceActivity& d) override { devices.push_back(d); }
  void on_unhandled(uint32_t k) override { unhandled.push_back(k); }
};

// One record of each kind, with distinct values.
BufferBuilder sample_buffer() {
  BufferBuilder b;
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 1000;
  k.end = 1500;
  k.deviceId = 1;
  k.contextId = 2;
  k.streamId = 13;
  k.correlationId = 41;
  k.name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
  b.add(k);
  CUpti_ActivityMemcpy6 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.bytes = 4096;
  m.start = 2000;
  m.end = 2100;
  m.streamId = 14;
  m.correlationId = 42;
  b.add(m);
  CUpti_ActivityMemcpyPtoP4 p{};
  p.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
  p.bytes = 8192;
  p.start = 2200;
  p.end = 2300;
  p.streamId = 15;
  p.correlationId = 43;
  b.add(p);
  CUpti_ActivityMemset4 s{};
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 512;
  s.start = 2400;
  s.end = 2410;
  s.streamId = 13;
  s.correlationId = 44;
  b.add(s);
  CUpti_ActivityAPI rt{};
  rt.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  rt.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  rt.start = 900;
  rt.end = 950;
  rt.processId = 100;
  rt.threadId = 101;
  rt.correlationId = 41;
  b.add(rt);
  CUpti_ActivityAPI drv{};
  drv.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  drv.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  drv.start = 910;
  drv.end = 940;
  drv.threadId = 101;
  drv.correlationId = 45;
  b.add(drv);
  CUpti_ActivitySynchronization2 sy{};
  sy.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sy.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE;
  sy.start = 3000;
  sy.end = 3500;
  sy.streamId = 13;
  sy.correlationId = 46;
  b.add(sy);
  CUpti_ActivityMarker2 ms{};
  ms.kind = CUPTI_ACTIVITY_KIND_MARKER;
  ms.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
  ms.timestamp = 800;
  ms.id = 7;
  ms.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  ms.objectId.pt.threadId = 101;
  ms.name = "step 3";
  ms.domain = "app";
  b.add(ms);
  CUpti_ActivityMarkerData2 md{};
  md.kind = CUPTI_ACTIVITY_KIND_MARKER_DATA;
  md.id = 7;
  b.add(md);
  CUpti_ActivityMarker2 me{};
  me.kind = CUPTI_ACTIVITY_KIND_MARKER;
  me.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
  me.timestamp = 4000;
  me.id = 7;
  me.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  me.objectId.pt.threadId = 101;
  b.add(me);
  CUpti_ActivityExternalCorrelation ex{};
  ex.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  ex.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
  ex.externalId = 9001;
  ex.correlationId = 41;
  b.add(ex);
  CUpti_ActivityDevice5 dv{};
  dv.kind = CUPTI_ACTIVITY_KIND_DEVICE;
  dv.id = 1;
  dv.name = "NVIDIA H100 80GB HBM3";
  b.add(dv);
  CUpti_ActivityOverhead3 ov{};
  ov.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  b.add(ov);
  return b;
}

TEST(CuptiParse, EveryRecordKindTheAgentEnables) {
  BufferBuilder b = sample_buffer();
  Recorder r;
  ParseStats st = parse_activity_buffer(b.data(), b.size(), r);
  EXPECT_EQ(st.records, 13);
  EXPECT_FALSE(st.truncated);
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.kernels[0].start, 1000);
  EXPECT_EQ(r.kernels[0].end, 1500);
  EXPECT_EQ(r.kernels[0].device, 1u);
  EXPECT_EQ(r.kernels[0].stream, 13u);
  EXPECT_EQ(r.kernels[0].correlation, 41u);
  EXPECT_EQ(r.kernel_names[0].rfind("ncclDevKernel_AllReduce", 0), 0u);
  ASSERT_EQ(r.mems.size(), 3u);
  EXPECT_EQ(r.mems[0].kind, MemKind::DtoH);
  EXPECT_EQ(r.mems[0].bytes, 4096);
  EXPECT_EQ(r.mems[0].stream, 14u);
  EXPECT_EQ(r.mems[1].kind, MemKind::PtoP);
  EXPECT_EQ(r.mems[1].bytes, 8192);
  EXPECT_EQ(r.mems[2].kind, MemKind::Memset);
  EXPECT_EQ(r.mems[2].correlation, 44u);
  ASSERT_EQ(r.apis.size(), 2u);
  EXPECT_EQ(r.apis[0].kind, ApiKind::Runtime);
  EXPECT_EQ(r.api_names[0], "cudaLaunchKernel_v7000");
  EXPECT_EQ(r.apis[0].tid, 101u);
  EXPECT_EQ(r.apis[1].kind, ApiKind::Driver);
  EXPECT_EQ(r.api_names[1], "cuLaunchKernel");
  ASSERT_EQ(r.syncs.size(), 1u);
  EXPECT_STREQ(r.syncs[0].what, "event");
  EXPECT_EQ(r.syncs[0].end - r.syncs[0].start, 500);
  ASSERT_EQ(r.markers.size(), 2u);
  EXPECT_EQ(r.markers[0].phase, MarkerActivity::Start);
  EXPECT_EQ(r.marker_names[0], "step 3");
  EXPECT_EQ(r.markers[0].tid, 101u);
  EXPECT_EQ(r.markers[1].phase, MarkerActivity::End);
  EXPECT_EQ(r.markers[1].id, 7u);
  ASSERT_EQ(r.exts.size(), 1u);
  EXPECT_EQ(r.exts[0].kind, static_cast<uint32_t>(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2));
  EXPECT_EQ(r.exts[0].external_id, 9001u);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_STREQ(r.devices[0].name, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(r.unhandled.size(), 1u);  // the overhead record
  EXPECT_EQ(r.unhandled[0], static_cast<uint32_t>(CUPTI_ACTIVITY_KIND_OVERHEAD));
}

TEST(CuptiParse, EmptyAndTruncatedBuffers) {
  Recorder r;
  EXPECT_EQ(parse_activity_buffer(nullptr, 0, r).records, 0);
  BufferBuilder b = sample_buffer();
  // Cut inside the second record: the first is read, the rest is not misread.
  ParseStats st = parse_activity_buffer(b.data(), sizeof(CUpti_ActivityKernel10) + 16, r);
  EXPECT_EQ(r.kernels.size(), 1u);
  EXPECT_TRUE(r.mems.empty());
  EXPECT_LE(st.records, 1);
}

TEST(CuptiParse, BufferToBraidRows) {
  // The whole writer path for one buffer: parse -> collector -> file, as the agent does it.
  test::TempDir tmp;
  std::string path = tmp.file("p.braid");
  {
    FileSink sink(path, {"synthetic", "cupti", ""});
    ClockFit clock;  // uncalibrated: device times kept as they are
    Collector col(sink, clock, 2, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    BufferBuilder b = sample_buffer();
    parse_activity_buffer(b.data(), b.size(), col);
    col.end_cycle(true);
    sink.close();
  }
  TraceReader r(path);
  std::vector<Kernel> ks;
  r.kernels(1, [&](const Kernel& k) {
    ks.push_back(k);
    return true;
  });
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].rank, 2);
  EXPECT_EQ(ks[0].category, Category::CommAllReduce);
  EXPECT_EQ(ks[0].external_id, 0);  // its external correlation came after it in the buffer
  int64_t memcpys = 0, apis = 0;
  r.memcpys(1, [&](const Memcpy&) { return ++memcpys > 0; });
  r.api_calls(1, [&](const ApiCall&) { return ++apis > 0; });
  EXPECT_EQ(memcpys, 3);
  EXPECT_EQ(apis, 3);  // two API records and one synchronization
  auto steps = r.steps(1);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].step, 3);
  EXPECT_EQ(steps[0].start, 800);
  EXPECT_EQ(steps[0].end, 4000);
  auto ranks = r.ranks(1);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].device, 1);
  EXPECT_EQ(ranks[0].device_name, "NVIDIA H100 80GB HBM3");
}

// A window is one row however often the clock is refitted while it is open: its start, the row's
// key, is mapped once when it opens. (A refit that takes over before the opening used to move the
// start at the next cycle and store a second window; attach_test saw two windows for one
// trigger on a loaded host.)
TEST(CuptiParse, AWindowStaysOneRowWhenTheClockIsRefittedWhileItIsOpen) {
  test::TempDir tmp;
  std::string path = tmp.file("w.braid");
  {
    FileSink sink(path, {"synthetic", "cupti", ""});
    ClockFit clock(4);
    clock.add({1000, 1'000'000'000});
    clock.add({2000, 1'000'001'000});
    ASSERT_TRUE(clock.refit());  // host = device + 999'999'000
    Collector col(sink, clock, 0, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    col.window_edge(true, 2500, "", true);  // after the latest sample
    col.end_cycle(false);
    clock.add({3000, 1'000'002'500});
    ASSERT_TRUE(clock.refit());  // a new line, taking over from device time 2000
    ASSERT_NE(clock.to_host(2500), 1'000'001'500);
    col.end_cycle(false);
    col.window_edge(false, 3500, "", true);
    col.end_cycle(true);
    sink.close();
  }
  TraceReader r(path);
  auto windows = r.capture_windows(1);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].start, 1'000'001'500);
  EXPECT_GT(windows[0].end, 1'000'002'500);  // the closing edge, on the fit of its time
  EXPECT_LT(windows[0].end, 1'000'004'000);
}

}  // namespace
}  // namespace braid::capture

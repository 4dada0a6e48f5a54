// The GL-free core of braid-view: loading, time axis, level of detail, layout, hit-testing,
// statistics, compare alignment, search, and what it reads beyond the events.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>

#include "analysis/clock.h"
#include "analysis/matching.h"
#include "analysis/metrics.h"
#include "analysis/run_data.h"
#include "analysis/store.h"
#include "app/view/core/colors.h"
#include "app/view/core/extras.h"
#include "app/view/core/layout.h"
#include "app/view/core/loader.h"
#include "app/view/core/lod.h"
#include "app/view/core/search.h"
#include "app/view/core/stats.h"
#include "app/view/core/time_axis.h"
#include "fusion/schedule_store.h"
#include "trace/error.h"
#include "trace/sqlite_util.h"
#include "trace/store_update.h"
#include "trace/test_util.h"
#include "view/known_trace.h"

namespace braid::view {
namespace {

using test::kBase;
constexpr Ns us(double v) { return static_cast<Ns>(v * 1000); }

class ViewKnownTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("known.braid");
    test::write_known_trace(path_, true);
    d_ = load_view_run(path_, 1);
  }
  int lane(int32_t rank, int64_t stream, bool gpu = true) const {
    for (size_t i = 0; i < d_->lanes.size(); ++i)
      if (d_->lanes[i].rank == rank && d_->lanes[i].stream == stream && d_->lanes[i].gpu == gpu)
        return static_cast<int>(i);
    return -1;
  }
  test::TempDir dir_;
  std::string path_;
  std::shared_ptr<ViewRun> d_;
};

TEST_F(ViewKnownTrace, LanesHoldEventsOnTheJobAxisWithClockOffsetsApplied) {
  EXPECT_EQ(d_->groups.size(), 2u);
  EXPECT_EQ(d_->lanes.size(), 8u);  // 2 ranks x (steps, stream 7, stream 20, thread 100)
  EXPECT_EQ(d_->start, kBase);
  EXPECT_EQ(d_->end, kBase + us(100));
  EXPECT_EQ(d_->gpu_start, kBase);  // the memcpy [0, 8) us
  EXPECT_EQ(d_->gpu_end, kBase + us(100));
  // 5 GPU events per rank (gemm, add, allreduce, attention, memcpy) + 2 CPU calls; the steps
  // lane shows the steps table and is not counted among the events.
  EXPECT_EQ(d_->event_count, 14);
  for (const RankGroup& g : d_->groups) {
    const Lane& steps = d_->lanes[g.lanes.front()];  // each rank's first lane
    EXPECT_EQ(steps.stream, kStepsLane);
    EXPECT_EQ(steps.label, "steps");
    ASSERT_EQ(steps.rows.size(), 1u);
    ASSERT_EQ(steps.rows[0].size(), 1u);
    const Event st = steps.rows[0][0];
    EXPECT_EQ(st.kind(), EventKind::Step);
    EXPECT_EQ(d_->str(st.name), "step 0");
    EXPECT_EQ(st.start, kBase);  // [0, 100) us on the job axis (rank 1's offset applied)
    EXPECT_EQ(st.end, kBase + us(100));
  }
  for (int32_t rank : {0, 1}) {
    const Lane& l = d_->lanes[lane(rank, 7)];
    ASSERT_EQ(l.rows.size(), 1u);
    const Row& row = l.rows[0];
    ASSERT_EQ(row.size(), 3u);
    const Event ev[] = {row[0], row[1], row[2]};
    EXPECT_EQ(ev[0].start, kBase + us(10));  // rank 1's raw times are 1 us earlier
    EXPECT_EQ(ev[0].end, kBase + us(40));
    EXPECT_EQ(ev[0].category, static_cast<uint8_t>(Category::Gemm));
    EXPECT_EQ(d_->str(ev[0].name), "gemm_kernel_A");
    EXPECT_EQ(ev[2].start, kBase + us(rank == 0 ? 55 : 60));
    // The collective rides on its kernel instead of being a second event.
    ASSERT_GE(ev[2].coll, 0);
    EXPECT_EQ(d_->colls[ev[2].coll].c.rank, rank);
    const std::optional<EventRef> at = d_->place(ev[2].coll);
    ASSERT_TRUE(at.has_value());
    EXPECT_EQ(at->lane, lane(rank, 7));
    EXPECT_EQ(at->row, 0);
    EXPECT_EQ(at->index, 2);
  }
  // Nested CPU calls go to two rows, the enclosing one on top.
  const Lane& cpu = d_->lanes[lane(0, 100, false)];
  EXPECT_FALSE(cpu.gpu);
  ASSERT_EQ(cpu.rows.size(), 2u);
  EXPECT_EQ(d_->str(cpu.rows[0][0].name), "aten::mm");
  EXPECT_EQ(d_->str(cpu.rows[1][0].name), "cudaLaunchKernel");
  // The steps, then GPU lanes, then host lanes within each rank.
  EXPECT_TRUE(d_->lanes[d_->groups[0].lanes[1]].gpu);
  EXPECT_FALSE(d_->lanes[d_->groups[0].lanes.back()].gpu);
}

TEST_F(ViewKnownTrace, CollectivesMatchAcrossRanksWithWaitTransferAndBusBandwidth) {
  ASSERT_EQ(d_->colls.size(), 2u);
  ASSERT_EQ(d_->matches.size(), 1u);
  EXPECT_EQ(d_->matches[0].members.size(), 2u);
  EXPECT_EQ(d_->matches[0].latest_start, kBase + us(60));
  int32_t r0 = d_->colls[0].c.rank == 0 ? 0 : 1;
  CollTiming t = coll_timing(*d_, r0);
  EXPECT_EQ(t.duration, us(35));
  EXPECT_EQ(t.wait, us(5));  // rank 1 arrived 5 us later
  EXPECT_EQ(t.transfer, us(30));
  EXPECT_EQ(t.late_rank, 1);
  EXPECT_EQ(t.nranks, 2);
  // docs/analysis.md: algbw = bytes / transfer (last arrival to last end).
  double algbw = static_cast<double>(test::kAllReduceBytes) / static_cast<double>(us(30));
  EXPECT_DOUBLE_EQ(t.algbw_gbs, algbw);
  EXPECT_DOUBLE_EQ(t.busbw_gbs, algbw * 2.0 * 1 / 2);  // allreduce: 2(n-1)/n = 1 for n = 2
  CollTiming t1 = coll_timing(*d_, 1 - r0);
  EXPECT_EQ(t1.wait, 0);
  EXPECT_EQ(t1.transfer, us(30));
  // The exposed part: nothing computes while the allreduce runs on either rank.
  EXPECT_EQ(t.exposed, us(35));
  EXPECT_EQ(t1.exposed, us(30));
}

TEST_F(ViewKnownTrace, MissingRunAndFileAreNamed) {
  try {
    load_view_run(path_, 7);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(e.what()).find("no run 7 (runs: 1, 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_view_run(dir_.file("absent.braid"), 1), Error);
}

// Name ids have 24 bits: a file with more names is refused in one line, before they are read.
TEST_F(ViewKnownTrace, AFileWithMoreNamesThanTheViewHoldsIsRefusedBeforeTheyAreRead) {
  {
    StoreUpdate up(path_);
    sql::exec(up.db(), ("INSERT INTO strings(id, text) VALUES (" + std::to_string(kMaxEventNames) +
                        ", 'one name too many')")
                           .c_str());
    up.commit();
  }
  try {
    load_view_run(path_, 1);
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_EQ(std::string(e.what()),
              path_ + ": 16777217 names; braid-view holds at most 16777216 (24-bit name ids)");
  }
}

TEST_F(ViewKnownTrace, BackgroundLoadReportsProgressAndResult) {
  BackgroundLoad bl(path_, 2, [](const ViewRun& d) { EXPECT_EQ(d.run.run_id, 2); });
  while (!bl.finished()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(bl.result()) << bl.error();
  EXPECT_DOUBLE_EQ(bl.fraction(), 1.0);
  EXPECT_EQ(bl.result()->start, test::kRun2Base);
  BackgroundLoad bad(path_, 9);
  while (!bad.finished()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(bad.result());
  EXPECT_NE(bad.error().find("no run 9"), std::string::npos);
}

// Issue 21: a capture's windows (`capture_windows`) are what the window opens on, on the job
// axis (rank 1's clock offset applied), from the first opening to the last closing; a window
// stored as it opened (a capture killed before its first cycle) ends with the events; a file
// without windows opens on its GPU work. A thread or stream the `streams` table names but
// without events gets no lane.
TEST(ViewCaptureWindow, OpensOnTheCaptureWindowsWhenTheFileHasThem) {
  test::TempDir dir;
  auto write = [&](const std::string& name, const std::vector<CaptureWindow>& windows) {
    std::string path = dir.file(name);
    TraceWriter w(path, TraceWriter::Mode::Overwrite);
    test::write_known_run(w, RunKind::Captured, kBase, 90, "captured");
    w.add_stream(1, {0, 555, false, "pt_nccl_watchdog"});  // named, no events of its own
    for (const CaptureWindow& cw : windows) w.add(1, cw);
    w.commit();
    return load_view_run(path, 1);
  };
  // Rank 0 [20, 60) us, rank 1 [30, 70) us on its own clock (1 us behind the job axis).
  auto d = write("windows.braid",
                 {{0, kBase + us(20), kBase + us(60)},
                  {1, kBase + us(30) - test::kRank1Offset, kBase + us(70) - test::kRank1Offset}});
  ASSERT_TRUE(d->has_window());
  EXPECT_EQ(d->window_start, kBase + us(20));
  EXPECT_EQ(d->window_end, kBase + us(70));
  EXPECT_EQ(d->open_start(), kBase + us(20));
  EXPECT_EQ(d->open_end(), kBase + us(70));
  for (const Lane& l : d->lanes) EXPECT_NE(l.stream, 555) << l.label;

  auto opened = write("opened.braid", {{0, kBase + us(20), kBase + us(20)}});
  ASSERT_TRUE(opened->has_window());
  EXPECT_EQ(opened->open_start(), kBase + us(20));
  EXPECT_EQ(opened->open_end(), opened->end);

  auto none = write("none.braid", {});
  EXPECT_FALSE(none->has_window());
  EXPECT_EQ(none->open_start(), none->gpu_start);
  EXPECT_EQ(none->open_end(), none->gpu_end);
}

TEST(ViewTimeAxis, KeepsNanosecondsAtEpochScaleAndZoomsAtThePoint) {
  TimeAxis a;
  a.set_origin(kBase);
  a.set_width(1000);
  a.set_window(kBase + 100, kBase + 1100);  // 1 ns per pixel
  EXPECT_DOUBLE_EQ(a.ns_per_px(), 1.0);
  EXPECT_FLOAT_EQ(a.x_of(kBase + 101), 1.f);
  EXPECT_EQ(a.t_of(1.f), kBase + 101);
  EXPECT_EQ(a.t0(), kBase + 100);
  EXPECT_EQ(a.t1(), kBase + 1100);
  Ns under = a.t_of(250.f);
  a.zoom_at(250.f, 0.5);
  EXPECT_EQ(a.t_of(250.f), under);
  EXPECT_DOUBLE_EQ(a.ns_per_px(), 0.5);
  a.pan_px(100);  // content moves right: 50 ns earlier at the left edge
  EXPECT_EQ(a.t_of(350.f), under);
  // A width change keeps the visible window.
  a.set_window(kBase, kBase + 1000);
  a.set_width(500);
  EXPECT_EQ(a.t0(), kBase);
  EXPECT_EQ(a.t1(), kBase + 1000);
  a.fit(kBase, kBase + 1000, 0.1);
  EXPECT_EQ(a.t0(), kBase - 100);
  EXPECT_EQ(a.t1(), kBase + 1100);
  // Zoom is bounded.
  for (int i = 0; i < 200; ++i) a.zoom_at(0, 0.1);
  EXPECT_DOUBLE_EQ(a.ns_per_px(), TimeAxis::kMinNsPerPx);
}

TEST(ViewTimeAxis, RulerTicksAdaptTheirUnitAndSpacing) {
  TimeAxis a;
  a.set_origin(kBase);
  a.set_width(1000);
  a.set_window(kBase, kBase + us(100'000));  // 100 ms over 1000 px
  auto ticks = ruler_ticks(a, 12.f);
  ASSERT_GE(ticks.size(), 2u);
  double step_px = a.x_of(ticks[1].t) - a.x_of(ticks[0].t);
  EXPECT_GE(step_px, 12.f);
  EXPECT_LE(step_px, 12.f * 2.5f);
  std::vector<std::string> labels;
  for (auto& t : ticks)
    if (t.major) labels.push_back(t.label);
  ASSERT_GE(labels.size(), 3u);
  EXPECT_EQ(labels[0], "0 ms");
  EXPECT_EQ(labels[1], "10 ms");
  a.set_window(kBase, kBase + 2000);  // 2 us
  ticks = ruler_ticks(a, 12.f);
  labels.clear();
  for (auto& t : ticks)
    if (t.major) labels.push_back(t.label);
  ASSERT_GE(labels.size(), 2u);
  EXPECT_EQ(labels[0], "0.0 us");
  EXPECT_EQ(labels[1], "0.1 us");
  EXPECT_EQ(format_duration(12), "12 ns");
  EXPECT_EQ(format_duration(3400), "3.400 us");
  EXPECT_EQ(format_duration(1.25e6), "1.250 ms");
  EXPECT_EQ(format_duration(42.5e9), "42.50 s");
}

// A row of `n` events of 10 ns every 15 ns.
Row dense_row(int64_t n) {
  Row r;
  for (int64_t i = 0; i < n; ++i) r.push({i * 15, i * 15 + 10, 1, 1});
  return r;
}

TEST(ViewLod, FoldsSmallEventsIntoCountedBlocksBoundedByWidth) {
  Row row = dense_row(1'000'000);
  TimeAxis a;
  a.set_width(1000);
  a.set_window(0, 15'000'000);  // all of it: 15 us per pixel
  std::vector<DrawItem> items;
  fold_row(row, a, 0, 3.f, items);
  ASSERT_FALSE(items.empty());
  EXPECT_LE(items.size(), 1000u / 3 + 2);
  int64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    total += items[i].count;
    if (i) {
      EXPECT_EQ(items[i].first, items[i - 1].first + items[i - 1].count);
    }
  }
  EXPECT_EQ(total, 1'000'000);  // every event in exactly one block
  // Zoomed in: 1 ns per pixel shows whole events, with exact positions, from the binary search.
  a.set_window(150'000, 151'000);
  items.clear();
  fold_row(row, a, 0, 3.f, items);
  ASSERT_EQ(items.size(), 67u);  // events 10000..10066 overlap [150000, 151000)
  EXPECT_EQ(items[0].first, 10'000);
  EXPECT_EQ(items[0].count, 1);
  EXPECT_FLOAT_EQ(items[0].x0, 0.f);
  EXPECT_FLOAT_EQ(items[0].x1, 10.f);
  EXPECT_EQ(first_visible(row, 150'005), 10'000);
  EXPECT_EQ(first_visible(row, 150'010), 10'001);
  EXPECT_EQ(first_starting_at(row, 150'001), 10'001);
}

TEST(ViewLod, WideEventsAreNeverFoldedIntoBlocks) {
  Row r;
  for (int64_t i = 0; i < 100; ++i) r.push({i * 10, i * 10 + 5, 1, 1});
  r.push({1000, 50'000, 2, 1});  // wide
  for (int64_t i = 0; i < 100; ++i) r.push({50'000 + i * 10, 50'005 + i * 10, 1, 1});
  TimeAxis a;
  a.set_width(1000);
  a.set_window(0, 100'000);  // 100 ns per px
  std::vector<DrawItem> items;
  fold_row(r, a, 0, 3.f, items);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].count, 100);
  EXPECT_EQ(items[1].first, 100);
  EXPECT_EQ(items[1].count, 1);
  EXPECT_FLOAT_EQ(items[1].x0, 10.f);
  EXPECT_FLOAT_EQ(items[1].x1, 500.f);
  EXPECT_EQ(items[2].count, 100);
}

// Events at least a pixel wide are drawn as themselves, a fold never takes in a gap of a pixel
// or more, and a folded block has its dominant category (by time).
TEST(ViewLod, EventsAPixelWideStayThemselvesAndGapsStayVisible) {
  Row r;
  // 100 ns per px: tiny 20-ns events every 30 ns (gaps of 0.1 px: folded together), a 150-ns
  // event (1.5 px: itself), then, after a 150-ns gap (1.5 px), more tiny events.
  Ns t = 0;
  for (int i = 0; i < 10; ++i, t += 30) r.push({t, t + 20, 1, 3});
  r.push({t, t + 150, 2, 1});  // gemm, 1.5 px
  t += 150;
  t += 150;  // the gap
  for (int i = 0; i < 6; ++i, t += 30) r.push({t, t + 20, 1, 3});
  // Three gemms of 0.9 px, 0.1 px apart: folded with them, and most of the block's time.
  for (int i = 0; i < 3; ++i, t += 100) r.push({t, t + 90, 3, 1});
  TimeAxis a;
  a.set_width(1000);
  a.set_window(0, 100'000);
  std::vector<DrawItem> items;
  fold_row(r, a, 0, 1.f, items);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].count, 10);
  EXPECT_EQ(items[0].category, 3);  // elementwise
  EXPECT_EQ(items[1].count, 1);     // the 1.5-px gemm as itself
  EXPECT_EQ(items[1].first, 10);
  EXPECT_EQ(items[1].category, 1);
  EXPECT_EQ(items[2].first, 11);  // the gap after it was not taken in
  EXPECT_EQ(items[2].count, 9);
  EXPECT_GE(items[2].x0 - items[1].x1, 1.f);
  EXPECT_EQ(items[2].category, 1);  // 3 x 90 ns of gemm outweigh 6 x 20 ns of elementwise
}

TEST_F(ViewKnownTrace, LayoutCollapsesRanksAndHitTestFindsTheEventUnderThePoint) {
  LayoutOptions opt;
  RunLayout l = layout_run(*d_, {}, opt);
  ASSERT_EQ(l.groups.size(), 2u);
  ASSERT_EQ(l.lanes.size(), 8u);
  // rank 0: header, steps (1 row), stream 7 (1 row), stream 20 (1 row), thread 100 (2 rows)
  EXPECT_FLOAT_EQ(l.lanes[1].y0, opt.header_h + opt.row_h + opt.lane_gap);
  EXPECT_FLOAT_EQ(l.lanes[3].y1 - l.lanes[3].y0, 2 * opt.row_h);
  EXPECT_FLOAT_EQ(l.groups[1].y0, opt.header_h + 5 * opt.row_h + 4 * opt.lane_gap);
  RunLayout c = layout_run(*d_, {1, 0}, opt);
  EXPECT_EQ(c.lanes.size(), 4u);
  EXPECT_FLOAT_EQ(c.groups[1].y0, opt.header_h);
  EXPECT_LT(c.height, l.height);

  TimeAxis a;
  a.set_origin(d_->start);
  a.set_width(1000);
  a.set_window(kBase, kBase + us(100));  // 100 ns per pixel
  // The gemm on rank 0 stream 7: [10, 40) us -> x [100, 400).
  float y = l.lanes[1].y0 + opt.row_h / 2;
  auto h = hit_test(*d_, l, a, 0, 250.f, y, opt);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->lane, l.lanes[1].lane);
  EXPECT_EQ(h->index, 0);
  EXPECT_EQ(h->count, 1);
  EXPECT_FALSE(hit_test(*d_, l, a, 0, 425.f, y, opt));  // the gap between gemm and add
  // The nested launch on the CPU lane's second row.
  auto cpu = hit_test(*d_, l, a, 0, 100.f, l.lanes[3].y0 + opt.row_h * 1.5f, opt);
  ASSERT_TRUE(cpu);
  EXPECT_EQ(d_->str(d_->event(cpu->lane, cpu->row, cpu->index).name), "cudaLaunchKernel");
}

TEST_F(ViewKnownTrace, RangeStatsAndRunMetricsHaveTheKnownValues) {
  RangeStats r = range_stats(*d_, kBase + us(30), kBase + us(60));
  // gemm [30,40) x2 ranks = 20 us; add [45,50) x2 = 10 us; allreduce rank 0 [55,60) = 5 us.
  EXPECT_EQ(r.by_category["gemm"].time, us(20));
  EXPECT_EQ(r.by_category["gemm"].count, 2);
  EXPECT_EQ(r.by_category["elementwise"].time, us(10));
  EXPECT_EQ(r.by_category["comm.allreduce"].time, us(5));
  EXPECT_EQ(r.by_category["cpu"].time, us(18));  // aten::mm [30, 39) on both ranks
  EXPECT_EQ(r.collectives, 1);
  EXPECT_EQ(r.collective_bytes, test::kAllReduceBytes);
  EXPECT_EQ(r.gpu_busy[0], us(10 + 5 + 5));
  EXPECT_EQ(r.gpu_busy[1], us(10 + 5));

  // analysis/metrics.h's definitions: the memcpy is memory, not computation; the step holds
  // the GPU work its host window launched (only the gemm: the trace has the launch call of
  // correlation 1 and no other).
  RunMetrics m = run_metrics(*d_);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].comm_ns, us(35));
  EXPECT_EQ(m.ranks[0].exposed_comm_ns, us(35));  // nothing overlaps the allreduce
  EXPECT_EQ(m.ranks[1].exposed_comm_ns, us(30));
  EXPECT_EQ(m.ranks[0].compute_ns, us(30 + 5 + 8));
  EXPECT_EQ(m.ranks[0].memory_ns, us(8));
  EXPECT_EQ(m.ranks[0].span(), us(100));
  EXPECT_EQ(m.ranks[0].idle_ns, us(100 - 35 - 43 - 8));
  EXPECT_TRUE(m.steps_from_trace);
  EXPECT_EQ(m.steps, 1);
  EXPECT_EQ(m.step_time, us(30));
  EXPECT_EQ(m.exposed_comm_per_rank, us(32.5));
  EXPECT_EQ(m.per_op["allreduce"].count, 2);
  EXPECT_EQ(m.per_op["allreduce"].time, us(65));
  EXPECT_EQ(step_origin(*d_), kBase);
}

TEST_F(ViewKnownTrace, CompareDiffsTheTwoRunsOnTheirStepOrigins) {
  auto b = load_view_run(path_, 2);
  EXPECT_EQ(step_origin(*b), test::kRun2Base);
  auto rows = diff_runs(run_metrics(*d_), run_metrics(*b));
  auto find = [&](const std::string& n) {
    for (auto& r : rows)
      if (r.name == n) return r;
    ADD_FAILURE() << n;
    return DiffRow{};
  };
  DiffRow ex = find("exposed communication / rank");
  EXPECT_EQ(ex.a, us(32.5));
  EXPECT_EQ(ex.b, us(12.5));  // allreduce ends at 70 us: 15 and 10 us
  EXPECT_EQ(ex.delta(), -us(20));
  DiffRow t = find("allreduce time");
  EXPECT_EQ(t.a, us(65));
  EXPECT_EQ(t.b, us(25));
  EXPECT_EQ(find("step time").a, us(30));
  EXPECT_EQ(find("allreduce count").b, 2);
}

TEST_F(ViewKnownTrace, SearchFindsNamesCaseInsensitivelyInTimeOrder) {
  SearchResult r = search_events(*d_, "GEMM_kernel");
  ASSERT_EQ(r.total, 2);
  ASSERT_EQ(r.hits.size(), 2u);
  EXPECT_EQ(d_->str(d_->event(r.hits[0].lane, r.hits[0].row, r.hits[0].index).name),
            "gemm_kernel_A");
  EXPECT_EQ(search_events(*d_, "aten::").total, 2);
  EXPECT_EQ(search_events(*d_, "no such name").total, 0);
  EXPECT_EQ(search_events(*d_, "a", 3).hits.size(), 3u);
}

// Issue 33: a row stores an event in 16 bytes and gives it back whole: times on an epoch-scale
// axis exact, an end past the 32-bit duration (4.29 s) from the row's own table, the collective
// an event carries by its index, the 24-bit name and the category.
TEST(ViewEvent, ARowStoresAnEventIn16BytesAndGivesItBackWhole) {
  static_assert(sizeof(PackedEvent) == 16);
  constexpr Ns t0 = 1'700'000'000'123'456'789;  // an epoch-scale job axis
  constexpr Ns kMax = UINT32_MAX;               // the first duration a row keeps apart
  const uint8_t allreduce = static_cast<uint8_t>(Category::CommAllReduce);
  const std::vector<Event> in = {
      {t0, t0 + 5, kMaxEventNames - 1, allreduce, 7},
      {t0 + 5, t0 + 5 + 10'000'000'000, 3, kCategoryStep},  // a 10 s step
      {t0 + 10'000'000'005, t0 + 10'000'000'005 + kMax - 1, 4, kCategoryCpu, 123'456},
      {t0 + 20'000'000'000, t0 + 20'000'000'000 + kMax, 5, kCategoryAnnotation, 9},
      {t0 + 30'000'000'000, t0 + 30'000'000'000, 6, memcpy_category(MemKind::DtoH), 0},
      {t0 + 30'000'000'001, t0 + 30'000'000'002, 2, allreduce}};
  Row row;
  for (const Event& e : in) row.push(e);
  row.shrink_to_fit();
  ASSERT_EQ(row.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const Event out = row[i];
    EXPECT_EQ(std::tie(out.start, out.end, out.coll), std::tie(in[i].start, in[i].end, in[i].coll))
        << i;
    EXPECT_EQ(out.name, in[i].name) << i;
    EXPECT_EQ(out.category, in[i].category) << i;
    EXPECT_EQ(row.end(i), in[i].end) << i;
    EXPECT_EQ(row.coll(i), in[i].coll) << i;
  }
  // Ends are searched as starts are, the long ones included.
  EXPECT_EQ(first_visible(row, t0 + 6), 1);
  EXPECT_EQ(first_visible(row, in[1].end - 1), 1);
  EXPECT_EQ(first_visible(row, in[1].end), 2);
  EXPECT_EQ(first_visible(row, in[3].end - 1), 3);
  EXPECT_EQ(first_visible(row, in[5].end), 6);
}

// The searches of a row (through every 32nd event's start, then one stride) find what a linear
// search finds: from any event, at any time, rows of every length around the stride, events of
// no length sharing a start.
TEST(ViewEvent, ARowsSearchesFindWhatALinearSearchFinds) {
  std::mt19937_64 rng(7);
  for (size_t n : {0, 1, 31, 32, 33, 63, 64, 65, 1000, 5000}) {
    Row row;
    std::vector<Event> in;
    Ns t = 1'000'000'000'000;
    for (size_t i = 0; i < n; ++i) {
      const Ns dur = static_cast<Ns>(rng() % 3), gap = static_cast<Ns>(rng() % 3);
      in.push_back({t, t + dur, 1, 1});
      row.push(in.back());
      t += dur + gap;
    }
    for (int trial = 0; trial < 400; ++trial) {
      const size_t from = rng() % (n + 1);
      const Ns q = in.empty()
                       ? 0
                       : in.front().start - 1 + static_cast<Ns>(rng() % (t - in.front().start + 3));
      size_t want = from;
      while (want < n && in[want].start < q) ++want;
      ASSERT_EQ(row.first_start_from(from, q), want) << n << " from " << from << " at " << q;
      size_t visible = 0;
      while (visible < n && in[visible].end <= q) ++visible;
      ASSERT_EQ(first_visible(row, q), static_cast<int64_t>(visible)) << n << " at " << q;
    }
  }
}

// Issue 33: an event's kind is in its category (a copy's kind too), its name id in 24 bits.
TEST(ViewEvent, KindCopyKindAndNameLiveInTheCategoryAndName) {
  const Event k{5, 9, kMaxEventNames - 1, static_cast<uint8_t>(Category::CommAllReduce), 7};
  EXPECT_EQ(k.name, kMaxEventNames - 1);
  EXPECT_EQ(k.category, static_cast<uint8_t>(Category::CommAllReduce));
  EXPECT_EQ(k.kind(), EventKind::Kernel);
  EXPECT_EQ(k.coll, 7);
  for (MemKind m :
       {MemKind::HtoD, MemKind::DtoH, MemKind::PtoP, MemKind::Memset, MemKind::Unknown}) {
    const Event c{0, 1, 3, memcpy_category(m)};
    EXPECT_EQ(c.kind(), EventKind::Memcpy);
    EXPECT_EQ(c.mem_kind(), m);
    EXPECT_EQ(category_name(c.category), "memory");  // drawn and counted as memory
    EXPECT_EQ(category_color(c.category), category_color(static_cast<uint8_t>(Category::Memory)));
  }
  EXPECT_EQ(Event(0, 1, 3, kCategoryCpu).kind(), EventKind::CpuCall);
  EXPECT_EQ(Event(0, 1, 3, kCategoryAnnotation).kind(), EventKind::Annotation);
  EXPECT_EQ(Event(0, 1, 3, kCategoryStep).kind(), EventKind::Step);
  EXPECT_EQ(Event(0, 1, 3, static_cast<uint8_t>(Category::Memory)).kind(), EventKind::Kernel);
}

TEST(ViewColors, CategoriesHaveDistinctColours) {
  std::vector<uint8_t> cats{
      0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 17, kCategoryCpu, kCategoryAnnotation};
  for (size_t i = 0; i < cats.size(); ++i)
    for (size_t j = i + 1; j < cats.size(); ++j)
      EXPECT_FALSE(category_color(cats[i]) == category_color(cats[j]))
          << int(cats[i]) << " " << int(cats[j]);
  EXPECT_EQ(category_name(1), "gemm");
  EXPECT_EQ(category_name(kCategoryCpu), "cpu");
}

// A parent schedule with two allreduces on pg0 per rank, a child where one fused allreduce
// replaces both, a baseline run with two allreduces and a replayed run of the child with one.
TEST(ViewExtras, OpportunitiesAndFusedOpsArePlacedOnTheirRuns) {
  test::TempDir dir;
  std::string path = dir.file("fused.braid");
  {
    TraceWriter w(path, TraceWriter::Mode::Overwrite);
    int64_t base = w.begin_run(RunKind::Imported, "t", "test");
    int64_t fused = w.begin_run(RunKind::Replayed, "t", "sim", "", 2);
    StrId pg = w.intern("pg0"), k = w.intern("nccl");
    for (int32_t rank = 0; rank < 2; ++rank) {
      RankInfo ri;
      ri.rank = rank;
      w.add_rank(base, ri);
      w.add_rank(fused, ri);
      auto coll = [&](Ns s, Ns e) {
        Collective c;
        c.rank = rank;
        c.comm = pg;
        c.op = CollOp::AllReduce;
        c.bytes = 1024;
        c.stream = -1;
        c.start = s;
        c.end = e;
        c.name = k;
        return c;
      };
      w.add(base, coll(1000, 2000));
      w.add(base, coll(3000, 4000));
      w.add(base, coll(11000, 12000));  // the baseline's second step
      w.add(base, coll(13000, 14000));
      w.add(base, coll(21000, 22000));  // and its third
      w.add(base, coll(23000, 24000));
      w.add(fused, coll(1000, 2500));
      w.add(fused, coll(5000, 6500));  // a second step of the replay
    }
    w.commit();
  }
  fusion::Schedule parent;
  for (int32_t rank = 0; rank < 2; ++rank) {
    parent.add_rank(rank);
    int s = parent.add_stream(rank, "comm");
    for (int i = 0; i < 2; ++i) {
      fusion::Collective c;
      c.op = CollOp::AllReduce;
      c.comm = "pg0";
      c.dtype = "float32";
      c.count = 256;
      parent.append(rank, s, c);
    }
  }
  parent.comms.push_back({"pg0", {0, 1}});
  fusion::Schedule child;
  child.comms = parent.comms;
  for (int32_t rank = 0; rank < 2; ++rank) {
    child.add_rank(rank);
    int s = child.add_stream(rank, "comm");
    fusion::Collective c;
    c.op = CollOp::AllReduce;
    c.comm = "pg0";
    c.dtype = "float32";
    c.count = 512;
    int64_t id = child.append(rank, s, c);
    auto ref = child.find_op(id);
    child.op(*ref).replaces = {parent.ranks[rank].streams[0].ops[0].id,
                               parent.ranks[rank].streams[0].ops[1].id};
  }
  int64_t pid = fusion::store_schedule(path, parent);
  ASSERT_EQ(pid, 1);
  ASSERT_EQ(fusion::store_schedule(path, child, pid, "[\"coalesce\"]"), 2);
  {
    StoreUpdate up(path);
    fusion::StoredOpportunity o;
    o.schedule_id = pid;
    o.pass = "coalesce";
    o.ranks = {0, 1};
    o.ops = {parent.ranks[0].streams[0].ops[1].id};  // the second allreduce of rank 0
    o.predicted_saving_ns = 700;
    fusion::insert_opportunities(up.db(), {o});
    sql::exec(up.db(), "CREATE TABLE comm_labels(run_id INTEGER, comm TEXT, dim TEXT)");
    sql::exec(up.db(),
              "INSERT INTO comm_labels VALUES (1, 'pg0', 'DP'), (2, 'pg0', 'DP'), (9, 'x', 'TP')");
    up.commit();
  }
  auto a = load_view_run(path, 1);
  auto b = load_view_run(path, 2);
  Extras x = load_extras(*a);
  EXPECT_TRUE(x.error.empty()) << x.error;
  EXPECT_TRUE(x.has_schedules);
  ASSERT_EQ(x.opportunities.size(), 1u);
  EXPECT_EQ(x.opportunities[0].colls.size(), 2u);  // both ranks' instance of that allreduce
  EXPECT_EQ(x.opportunities[0].t0, 3000);
  EXPECT_EQ(x.opportunities[0].t1, 4000);
  // Every non-core table with a run_id is listed (schema 1.1 also has the empty analysis_*
  // tables); this run's rows only.
  const AnalysisTable* labels = nullptr;
  for (const AnalysisTable& t : x.analysis)
    if (t.name == "comm_labels") labels = &t;
  ASSERT_TRUE(labels);
  EXPECT_EQ(labels->columns, (std::vector<std::string>{"comm", "dim"}));
  ASSERT_EQ(labels->rows.size(), 1u);
  EXPECT_EQ(labels->rows[0][1], "DP");
  EXPECT_FALSE(x.analyzed);  // no analysis_* rows yet
  EXPECT_TRUE(x.critical_path.empty());
  EXPECT_TRUE(x.comm_dim.empty());
  {
    StoreUpdate up(path);
    analysis::ensure_tables(up.db());  // their owner creates them with its first rows
    sql::exec(up.db(),
              "INSERT INTO analysis_communicators(run_id, comm, parallel_dim, evidence, nranks)"
              " VALUES (1, 'pg0', 'DP', 'spans every rank', 2)");
    sql::exec(up.db(),
              "INSERT INTO analysis_critical_path(run_id, step, position, kind, rank, stream,"
              " start_ns, end_ns, name, group_id, late_rank) VALUES"
              " (1, 0, 1, 'gap', 0, -1, 2000, 3000, '', -1, -1),"
              " (1, 0, 0, 'collective', 1, -1, 1000, 2000, 'nccl', 0, 1)");
    up.commit();
  }
  x = load_extras(*a);
  EXPECT_TRUE(x.analyzed);
  EXPECT_EQ(x.comm_dim["pg0"], "DP");
  EXPECT_EQ(x.comm_evidence["pg0"], "spans every rank");
  ASSERT_EQ(x.critical_path.size(), 2u);  // in path order
  EXPECT_EQ(x.critical_path[0].kind, "collective");
  EXPECT_EQ(x.critical_path[0].rank, 1);
  EXPECT_EQ(x.critical_path[0].start, 1000);
  EXPECT_EQ(x.critical_path[1].kind, "gap");
  EXPECT_TRUE(load_extras(*b).critical_path.empty());  // run 2 has none

  // Step by step: B's k-th fused allreduce stands for A's k-th pair only (B ran two steps, A
  // three: A's third pair is linked to nothing).
  auto links = fused_links(*a, *b);
  ASSERT_EQ(links.size(), 2u);  // one fused op per rank
  for (const FusedLink& l : links) {
    EXPECT_EQ(l.replaces.size(), 2u);
    ASSERT_EQ(l.steps.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      const FusedLink::Step& st = l.steps[k];
      ASSERT_EQ(st.fused.size(), 2u);  // the fused allreduce on both ranks
      for (int32_t c : st.fused) {
        EXPECT_EQ(b->colls[c].c.end - b->colls[c].c.start, 1500);
        EXPECT_EQ(b->colls[c].c.start, k == 0 ? 1000 : 5000);
      }
      ASSERT_EQ(st.replaced.size(), 4u);  // two allreduces x two ranks of A's step k
      for (int32_t c : st.replaced) {
        Ns t = a->colls[c].c.start;
        EXPECT_TRUE(k == 0 ? (t == 1000 || t == 3000) : (t == 11000 || t == 13000))
            << k << " " << t;
      }
    }
  }
  auto ops = summarize_links(links);
  ASSERT_EQ(ops.size(), 1u);  // one fused collective, on both ranks
  EXPECT_EQ(ops[0].what, "allreduce on 'pg0' #1");
  EXPECT_EQ(ops[0].replaces, 2u);
  EXPECT_EQ(ops[0].ranks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ops[0].steps, 2u);
  EXPECT_TRUE(fused_links(*b, *a).empty());  // run 1 has no schedule
}

}  // namespace
}  // namespace braid::view

namespace braid::view {
namespace {

// A real trace (HTA's NCCL parser sample: rank 0 of 2, 21 NCCL kernels): every stored event is
// in exactly one row, rows are sorted and non-overlapping, every collective rides on its kernel,
// and folding at any zoom accounts for every event.
TEST(ViewRealTrace, EveryEventOnceInSortedNonOverlappingRows) {
  test::TempDir dir;
  std::string path = dir.file("nccl.braid");
  test::import_files({test::traces("hta/tests/data/nccl_parser_config/nccl_data.json.gz")}, path);
  auto d = load_view_run(path, 1);
  TraceReader r(path);
  int64_t stored = 0;
  for (const char* t : {"kernels", "memcpys", "api_calls", "nvtx_ranges"})
    stored += sql::scalar(r.db(), std::string("SELECT COUNT(*) FROM ") + t);
  int64_t host_colls = sql::scalar(r.db(), "SELECT COUNT(*) FROM collectives WHERE stream < 0");
  EXPECT_EQ(d->event_count, stored + host_colls);
  int64_t in_rows = 0, carrying = 0;
  for (const Lane& l : d->lanes)
    for (const Row& row : l.rows) {
      if (l.stream == kStepsLane) continue;  // the steps table, shown as a lane
      in_rows += static_cast<int64_t>(row.size());
      for (size_t i = 0; i < row.size(); ++i) {
        EXPECT_LE(row.start(i), row.end(i));
        if (i) {
          EXPECT_GE(row.start(i), row.end(i - 1));
        }
        if (row.coll(i) >= 0) ++carrying;
      }
    }
  EXPECT_EQ(in_rows, d->event_count);
  EXPECT_EQ(carrying, static_cast<int64_t>(d->colls.size()));
  EXPECT_EQ(sql::scalar(r.db(), "SELECT COUNT(*) FROM collectives"),
            static_cast<int64_t>(d->colls.size()));
  EXPECT_EQ(d->colls.size(), 21u);
  TimeAxis a;
  a.set_origin(d->start);
  a.set_width(1500);
  for (Ns span : {d->end - d->start, Ns{1'000'000}, Ns{10'000}}) {
    a.set_window(d->start, d->start + span);
    for (const Lane& l : d->lanes)
      for (const Row& row : l.rows) {
        std::vector<DrawItem> items;
        fold_row(row, a, 0, 3.f, items);
        int64_t n = 0;
        for (const DrawItem& it : items) n += it.count;
        // Everything overlapping the window, each once.
        int64_t want = first_starting_at(row, d->start + span) - first_visible(row, d->start);
        EXPECT_EQ(n, want);
      }
  }
}

// Issue 33: a run streams in a rank at a time. The load hands over the collectives, matches and
// steps first (no lanes), then one ViewRun more per rank whose lanes are those of the complete
// run so far (same events, same rows), the last one complete; its metrics are the whole
// analysis's (analysis::compute_metrics over analysis::load_run, as `braid analyze` computes
// them), though no more than one rank's rows were held at a time. On real traces: HTA's two
// GPU ranks and the recorded 4-rank gloo job (host-side collectives).
TEST(ViewRealTrace, StreamsInRankByRankAndEndsAsTheWholeAnalysis) {
  const std::vector<std::vector<std::string>> inputs = {
      {test::traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz"),
       test::traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz")},
      {std::string(BRAID_TEST_DATA_DIR) + "/gloo_straggler/rank-0.json.gz",
       std::string(BRAID_TEST_DATA_DIR) + "/gloo_straggler/rank-1.json.gz",
       std::string(BRAID_TEST_DATA_DIR) + "/gloo_straggler/rank-2.json.gz",
       std::string(BRAID_TEST_DATA_DIR) + "/gloo_straggler/rank-3.json.gz"}};
  for (const auto& files : inputs) {
    SCOPED_TRACE(files.front());
    test::TempDir dir;
    const std::string path = dir.file("t.braid");
    test::import_files(files, path);
    std::vector<std::shared_ptr<ViewRun>> handed, previews;
    LoadProgress progress;
    const auto d = load_view_run(path, 1, &progress, [&](std::shared_ptr<ViewRun> v) {
      if (v->preview) {
        EXPECT_EQ(handed.size(), 1u);  // after the steps, before the first rank
      }
      (v->preview ? previews : handed).push_back(v);
    });
    const size_t nranks = files.size();
    ASSERT_EQ(handed.size(), nranks + 2);  // the collectives, each rank, the complete run
    // While the first rank is read whole: its GPU streams' first events (up to 20,000 kernels
    // and 20,000 copies a stream), each an event of the complete run's lane, from its first on.
    const RankGroup& first = d->groups.front();
    bool gpu_work = false;
    for (int li : first.lanes) gpu_work = gpu_work || d->lanes[li].gpu;
    ASSERT_EQ(previews.size(), gpu_work ? 1u : 0u);
    for (const auto& p : previews) {
      EXPECT_FALSE(p->complete);
      EXPECT_EQ(p->ranks_loaded, 0);
      ASSERT_EQ(p->groups.size(), 1u);
      EXPECT_EQ(p->groups[0].info.rank, first.info.rank);
      EXPECT_GT(p->end, p->start);
      for (const Lane& l : p->lanes) {
        EXPECT_TRUE(l.gpu);
        EXPECT_EQ(l.rank, first.info.rank);
        const int whole = d->lane_of(l.rank, l.stream, true);
        ASSERT_GE(whole, 0);
        std::set<std::tuple<Ns, Ns, uint32_t>> in_whole;
        Ns whole_first = INT64_MAX, preview_first = INT64_MAX;
        for (const Row& row : d->lanes[whole].rows)
          for (size_t i = 0; i < row.size(); ++i) {
            const Event e = row[i];
            in_whole.insert({e.start, e.end, e.name});
            if (e.kind() == EventKind::Kernel || e.kind() == EventKind::Memcpy)
              whole_first = std::min(whole_first, e.start);
          }
        EXPECT_LE(l.event_count, 40'000);
        EXPECT_GT(l.event_count, 0);
        for (const Row& row : l.rows)
          for (size_t i = 0; i < row.size(); ++i) {
            const Event e = row[i];
            EXPECT_TRUE(in_whole.count({e.start, e.end, e.name})) << l.label << " " << i;
            preview_first = std::min(preview_first, e.start);
          }
        EXPECT_EQ(preview_first, whole_first) << l.label;
      }
    }
    EXPECT_EQ(handed.back(), d);
    EXPECT_TRUE(d->complete);
    EXPECT_DOUBLE_EQ(progress.fraction(), 1.0);
    // First what every rank shares (steps), before anything that grows with the events.
    EXPECT_TRUE(handed.front()->lanes.empty());
    EXPECT_TRUE(handed.front()->colls.empty());
    EXPECT_GT(d->colls.size(), 0u);
    EXPECT_EQ(handed.front()->steps.size(), d->steps.size());
    EXPECT_FALSE(d->matches.empty());
    for (size_t i = 0; i + 1 < handed.size(); ++i) {
      const ViewRun& v = *handed[i];
      EXPECT_FALSE(v.complete);
      EXPECT_EQ(v.ranks_loaded, static_cast<int>(i));
      EXPECT_EQ(v.groups.size(), i);
      EXPECT_TRUE(v.metrics.ranks.empty() && v.metrics.collectives.empty());  // at the end
      ASSERT_LE(v.lanes.size(), d->lanes.size());
      for (size_t l = 0; l < v.lanes.size(); ++l) {
        ASSERT_EQ(v.lanes[l].rows.size(), d->lanes[l].rows.size());
        EXPECT_EQ(v.lanes[l].rank, d->lanes[l].rank);
        for (size_t r = 0; r < v.lanes[l].rows.size(); ++r)
          EXPECT_EQ(&v.lanes[l].rows[r], &d->lanes[l].rows[r]);  // shared
      }
      for (size_t g = 0; g < v.groups.size(); ++g) EXPECT_EQ(v.groups[g].lanes, d->groups[g].lanes);
      if (i > 0) {
        EXPECT_GT(v.lanes.size(), handed[i - 1]->lanes.size());
      }
      // The collectives of the ranks in, the same as the complete run's, not matched yet.
      ASSERT_LE(v.colls.size(), d->colls.size());
      for (size_t ci = 0; ci < v.colls.size(); ++ci) {
        const CollRec a = v.colls[ci], b = d->colls[ci];
        EXPECT_EQ(std::tie(a.c.rank, a.c.seq, a.c.start, a.c.end),
                  std::tie(b.c.rank, b.c.seq, b.c.start, b.c.end));
        EXPECT_EQ(a.match, -1);
      }
      int64_t carrying = 0;
      for (const Lane& l : v.lanes)
        for (const Row& row : l.rows)
          for (size_t k = 0; k < row.size(); ++k) {
            ASSERT_LT(row.coll(k), static_cast<int32_t>(v.colls.size()));
            carrying += row.coll(k) >= 0;
          }
      EXPECT_EQ(carrying, static_cast<int64_t>(v.colls.size()));
    }
    for (const Match& m : d->matches)
      for (int32_t ci : m.members) EXPECT_EQ(&d->matches[d->colls[ci].match], &m);
    // Every collective is placed on the event that draws it.
    for (size_t ci = 0; ci < d->colls.size(); ++ci) {
      const auto at = d->place(static_cast<int32_t>(ci));
      ASSERT_TRUE(at.has_value()) << ci;
      EXPECT_EQ(d->event(at->lane, at->row, at->index).coll, static_cast<int32_t>(ci));
    }

    // The metrics, field by field, against the whole analysis.
    TraceReader reader(path);
    const analysis::RunData whole = analysis::load_run(reader, 1);
    const analysis::Metrics want = analysis::compute_metrics(
        whole, analysis::match_trace_collectives(whole), analysis::stored_clocks(whole));
    const analysis::Metrics& got = d->metrics;
    ASSERT_EQ(got.ranks.size(), want.ranks.size());
    for (size_t i = 0; i < want.ranks.size(); ++i) {
      const auto &a = got.ranks[i], &b = want.ranks[i];
      EXPECT_EQ(std::tie(a.rank, a.step, a.start, a.end, a.busy_ns, a.idle_ns, a.compute_ns,
                         a.comm_ns, a.memory_ns, a.non_compute_ns, a.overlap_ns, a.exposed_comm_ns,
                         a.kernels, a.collectives),
                std::tie(b.rank, b.step, b.start, b.end, b.busy_ns, b.idle_ns, b.compute_ns,
                         b.comm_ns, b.memory_ns, b.non_compute_ns, b.overlap_ns, b.exposed_comm_ns,
                         b.kernels, b.collectives))
          << i;
    }
    ASSERT_EQ(got.collectives.size(), want.collectives.size());
    for (size_t i = 0; i < want.collectives.size(); ++i) {
      const auto &a = got.collectives[i], &b = want.collectives[i];
      EXPECT_EQ(std::tie(a.group, a.seq, a.step, a.first_arrival, a.last_arrival, a.end, a.wait_ns,
                         a.transfer_ns, a.exposed_ns, a.late_rank),
                std::tie(b.group, b.seq, b.step, b.first_arrival, b.last_arrival, b.end, b.wait_ns,
                         b.transfer_ns, b.exposed_ns, b.late_rank))
          << i;
      EXPECT_TRUE(a.members.empty());  // kept per collective instead (CollTable::exposed)
    }
    // Each member's wait and exposure, as the view gives them (coll_timing), are the analysis's.
    size_t members = 0;
    for (const Match& m : d->matches) {
      if (m.metrics < 0) continue;
      const analysis::CollectiveMetrics& b = want.collectives[static_cast<size_t>(m.metrics)];
      ASSERT_EQ(m.members.size(), b.members.size());
      for (size_t j = 0; j < m.members.size(); ++j, ++members) {
        const CollTiming t = coll_timing(*d, m.members[j]);
        EXPECT_EQ(d->colls[m.members[j]].c.rank, b.members[j].rank);
        EXPECT_EQ(t.wait, b.members[j].wait_ns);
        EXPECT_EQ(t.exposed, b.members[j].exposed_ns);
      }
    }
    EXPECT_GT(members, 0u);
    ASSERT_EQ(got.kernels.size(), want.kernels.size());
    for (size_t i = 0; i < want.kernels.size(); ++i)
      EXPECT_EQ(std::tie(got.kernels[i].rank, got.kernels[i].name, got.kernels[i].total_ns),
                std::tie(want.kernels[i].rank, want.kernels[i].name, want.kernels[i].total_ns));
    EXPECT_EQ(got.category_ns, want.category_ns);
  }
}

}  // namespace
}  // namespace braid::view

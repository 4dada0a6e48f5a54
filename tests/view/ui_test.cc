// Frames built headless (an ImGui context, no GL backend): what is drawn where, hover, click
// selection, wheel zoom at the cursor, drag to pan, keys, collapsing a rank, compare mode.
#include <gtest/gtest.h>
#include <simdjson.h>

#include "app/view/app.h"
#include "app/view/core/colors.h"
#include "trace/test_util.h"
#include "trace/writer.h"
#include "view/headless.h"
#include "view/known_trace.h"

namespace braid::view {
namespace {

using test::kBase;
constexpr Ns us(double v) { return static_cast<Ns>(v * 1000); }

class ViewHeadless : public ::testing::Test {
 protected:
  void SetUp() override {
    test::create_headless_imgui(1400, 800);
    path_ = dir_.file("known.braid");
    test::write_known_trace(path_, true);
  }
  void TearDown() override { ImGui::DestroyContext(); }

  void frame() {
    ImGui::NewFrame();
    build_frame(app_);
    ImGui::Render();
    ImGuiIO& io = ImGui::GetIO();
    io.MouseWheel = 0;
    for (bool& k : io.KeysDown) k = false;
  }
  void open(int64_t a, int64_t b = -1) { open_file(path_, a, b); }
  // Opens runs a (and b) of `path`, waits for them and settles two frames.
  void open_file(const std::string& path, int64_t a, int64_t b = -1) {
    app_open(app_, path, a, b);
    app_wait(app_);
    frame();
    frame();
  }
  // A copy: the geometry is rebuilt by every frame.
  std::optional<FrameGeometry::LaneGeom> lane(int slot, int32_t rank, int64_t stream) {
    for (auto& s : app_.geom.sections)
      if (s.slot == slot)
        for (auto& l : s.lanes)
          if (l.rank == rank && l.stream == stream) return l;
    return std::nullopt;
  }
  float x_of(Ns t) const { return app_.geom.axis_x0 + app_.axis.x_of(t); }
  void move(float x, float y) { ImGui::GetIO().MousePos = ImVec2(x, y); }

  test::TempDir dir_;
  std::string path_;
  App app_;
};

TEST_F(ViewHeadless, FitShowsTheWholeRunWithEveryLane) {
  open(1);
  ASSERT_TRUE(app_.all_ready());
  EXPECT_EQ(app_.geom.sections.size(), 1u);
  EXPECT_EQ(app_.geom.sections[0].lanes.size(), 8u);
  // fit: the run's span with 2% margins.
  EXPECT_EQ(app_.geom.t0, kBase - us(2));
  EXPECT_EQ(app_.geom.t1, kBase + us(102));
  EXPECT_GT(app_.geom.axis_x1 - app_.geom.axis_x0, 500.f);
  EXPECT_GT(lane(0, 1, 7)->y0, lane(0, 0, 7)->y1);  // rank 1 below rank 0
}

// Issue 33: a run streams in a rank at a time. One without steps has no span until its first
// rank is in (epoch-scale times, far from the empty first ViewRun's 0): the view fits it once it
// has one and follows it to the whole run.
TEST_F(ViewHeadless, AStreamedRunWithoutStepsOpensOnItsWholeSpan) {
  const std::string path = dir_.file("nosteps.braid");
  const Ns base = 1'700'000'000'000'000'000;
  {
    TraceWriter w(path, TraceWriter::Mode::Overwrite);
    const int64_t run = w.begin_run(RunKind::Captured, "test", "no steps");
    const StrId k = w.intern("gemm_kernel");
    for (int32_t r = 0; r < 4; ++r) {
      RankInfo ri;
      ri.rank = r;
      w.add_rank(run, ri);
      for (int i = 0; i < 50; ++i)
        w.add(run, Kernel{r, 7, base + r * us(300) + i * us(10),
                          base + r * us(300) + i * us(10) + us(8), k, Category::Gemm, i, 0});
    }
    w.commit();
  }
  open_file(path, 1);
  ASSERT_TRUE(app_.all_ready());
  ASSERT_TRUE(app_.run(0)->complete);
  const Ns first = base, last = base + 3 * us(300) + 49 * us(10) + us(8);
  const Ns margin = (last - first) / 50;  // fit: 2% each side
  EXPECT_NEAR(static_cast<double>(app_.geom.t0), static_cast<double>(first - margin), 2.0);
  EXPECT_NEAR(static_cast<double>(app_.geom.t1), static_cast<double>(last + margin), 2.0);
  EXPECT_EQ(app_.geom.sections[0].lanes.size(), 4u);
}

TEST_F(ViewHeadless, HoverClickWheelDragAndKeys) {
  open(1);
  const auto l = lane(0, 0, 7);
  ASSERT_TRUE(l.has_value());
  float y = l->y0 + 8;
  move(x_of(kBase + us(25)), y);  // middle of the gemm
  frame();
  ASSERT_TRUE(app_.hovered);
  const ViewRun& d = *app_.slots[0].data;
  EXPECT_EQ(
      d.str(d.event(app_.hovered->hit.lane, app_.hovered->hit.row, app_.hovered->hit.index).name),
      "gemm_kernel_A");
  // Click (press and release without moving) selects it.
  ImGui::GetIO().MouseDown[0] = true;
  frame();
  ImGui::GetIO().MouseDown[0] = false;
  frame();
  ASSERT_TRUE(app_.selected);
  EXPECT_EQ(app_.selected->hit.index, 0);
  EXPECT_EQ(app_.tab, SideTab::Details);

  // The wheel zooms in with the time under the cursor fixed.
  float mx = x_of(kBase + us(25));
  Ns under = app_.axis.t_of(mx - app_.geom.axis_x0);
  double npp = app_.axis.ns_per_px();
  ImGui::GetIO().MouseWheel = 1;
  frame();
  EXPECT_NEAR(app_.axis.ns_per_px(), npp * 0.8, npp * 1e-9);
  EXPECT_NEAR(static_cast<double>(app_.axis.t_of(mx - app_.geom.axis_x0) - under), 0.0,
              app_.axis.ns_per_px());

  // Dragging 100 px to the right moves the view 100 px earlier.
  Ns t0 = app_.axis.t0();
  npp = app_.axis.ns_per_px();
  ImGui::GetIO().MouseDown[0] = true;
  frame();
  move(mx + 100, y);
  frame();
  ImGui::GetIO().MouseDown[0] = false;
  frame();
  EXPECT_NEAR(static_cast<double>(t0 - app_.axis.t0()), 100 * npp, 2 * npp);

  // Keys: W zooms in, S out, D pans right, F fits.
  npp = app_.axis.ns_per_px();
  ImGui::GetIO().KeysDown['W'] = true;
  frame();
  EXPECT_NEAR(app_.axis.ns_per_px(), npp * 0.8, npp * 1e-9);
  ImGui::GetIO().KeysDown['S'] = true;
  frame();
  EXPECT_NEAR(app_.axis.ns_per_px(), npp, npp * 1e-9);
  t0 = app_.axis.t0();
  ImGui::GetIO().KeysDown['D'] = true;
  frame();
  EXPECT_GT(app_.axis.t0(), t0);
  ImGui::GetIO().KeysDown['F'] = true;
  frame();
  EXPECT_EQ(app_.axis.t0(), kBase - us(2));
}

TEST_F(ViewHeadless, ShiftDragSelectsARangeWithItsStatistics) {
  open(1);
  const auto l = lane(0, 0, 7);
  float y = l->y0 + 8;
  ImGuiIO& io = ImGui::GetIO();
  io.KeyShift = true;
  move(x_of(kBase + us(30)), y);
  frame();
  io.MouseDown[0] = true;
  frame();
  move(x_of(kBase + us(60)), y);
  frame();
  io.MouseDown[0] = false;
  frame();
  io.KeyShift = false;
  ASSERT_TRUE(app_.range_active);
  ASSERT_TRUE(app_.range_stats[0]);
  EXPECT_EQ(app_.tab, SideTab::Range);
  // Pixel-exact ends: the gemm's part in the range is 10 us per rank, within a pixel.
  double px = app_.axis.ns_per_px();
  EXPECT_NEAR(static_cast<double>(app_.range_stats[0]->by_category["gemm"].time), us(20), 4 * px);
  EXPECT_EQ(app_.range_stats[0]->collectives, 1);
}

TEST_F(ViewHeadless, ClickingARankHeaderCollapsesIt) {
  open(1);
  const auto& g = app_.slots[0].layout.groups[0];
  float header_y = app_.geom.sections[0].y0 + 20 + g.y0 + 5;  // below the section's title bar
  move(app_.geom.label_x0 + 10, header_y);
  frame();
  ImGui::GetIO().MouseDown[0] = true;
  frame();
  ImGui::GetIO().MouseDown[0] = false;
  frame();
  frame();
  EXPECT_EQ(app_.slots[0].collapsed[0], 1);
  EXPECT_FALSE(lane(0, 0, 7));
  EXPECT_TRUE(lane(0, 1, 7));
}

TEST_F(ViewHeadless, CompareStacksBothRunsOnTheirStepOrigins) {
  open(1, 2);
  ASSERT_TRUE(app_.all_ready());
  ASSERT_EQ(app_.geom.sections.size(), 2u);
  EXPECT_EQ(app_.geom.sections[0].run_id, 1);
  EXPECT_EQ(app_.geom.sections[1].run_id, 2);
  EXPECT_EQ(app_.slots[0].shift, kBase);
  EXPECT_EQ(app_.slots[1].shift, test::kRun2Base);
  EXPECT_GT(app_.geom.sections[1].y0, app_.geom.sections[0].y1);
  // Aligned: both runs' gemm starts at the same x.
  EXPECT_EQ(app_.geom.t0, -us(2));
  EXPECT_EQ(app_.tab, SideTab::Compare);
  ASSERT_FALSE(app_.diff.empty());
  EXPECT_EQ(app_.diff[0].name, "step time");
  // Hovering B's allreduce at 65 us (aligned) finds B's event; at 80 us there is none in B.
  const auto lb = lane(1, 0, 7);
  ASSERT_TRUE(lb.has_value());
  float yb = lb->y0 + 8;  // geom is rebuilt by every frame
  move(x_of(us(65)), yb);
  frame();
  ASSERT_TRUE(app_.hovered);
  EXPECT_EQ(app_.hovered->slot, 1);
  move(x_of(us(80)), yb);
  frame();
  EXPECT_FALSE(app_.hovered);
}

TEST_F(ViewHeadless, SearchJumpsToTheFirstMatch) {
  open(1);
  std::snprintf(app_.search_text, sizeof app_.search_text, "vector_add");
  // Enter in the search box is ImGui input; the search itself is what it calls.
  app_.search_result = search_events(*app_.slots[0].data, app_.search_text);
  ASSERT_EQ(app_.search_result.total, 2);
  select_event(app_, 0, app_.search_result.hits[0], true);
  frame();
  EXPECT_LE(app_.axis.t0(), kBase + us(45));
  EXPECT_GE(app_.axis.t1(), kBase + us(50));
  EXPECT_LT(app_.axis.t1() - app_.axis.t0(), us(10));
}

// A capture shaped like issue 21's PyTorch job on an H100: 3.5 s of start-up with only CPU
// work, then 40 steps of 6 ms (52 kernels each: 11 GEMMs of 0.35 ms, elementwise kernels of
// 40 us, back to back, then 0.5 ms idle), a thread named by the capture. It opens on the GPU
// work; zoomed to the steps at 1600x900 every GEMM is drawn as itself, no folded block takes in
// the idle gap between two steps, the folded elementwise kernels are coloured as elementwise,
// the steps have their own row, and a click on a step zooms to it.
TEST_F(ViewHeadless, ACaptureOpensOnItsGpuWorkWithStepsGemmsAndGapsVisible) {
  ImGui::GetIO().DisplaySize = ImVec2(1600, 900);
  std::string f = dir_.file("capture.braid");
  constexpr Ns kMs = 1'000'000, kT0 = 1'700'000'000'000'000'000LL;
  constexpr Ns kFirstStep = kT0 + 3'500 * kMs, kStep = 6 * kMs;
  {
    TraceWriter w(f, TraceWriter::Mode::Overwrite);
    int64_t run = w.begin_run(RunKind::Captured, "braid record", "test");
    RankInfo ri;
    ri.rank = 0;
    w.add_rank(run, ri);
    w.add_stream(run, {0, 7, true, "stream 7"});
    w.add_stream(run, {0, 4242, false, "pt_main_thread"});
    StrId gemm = w.intern("sm90_xmma_gemm_bf16"), ew = w.intern("vectorized_elementwise_kernel"),
          init = w.intern("import torch"), launch = w.intern("cudaLaunchKernel");
    w.add(run, ApiCall{0, 4242, kT0, kT0 + 3'400 * kMs, init, ApiKind::Python, 0, 0});
    int64_t corr = 1;
    for (int s = 0; s < 40; ++s) {
      Ns t = kFirstStep + s * kStep;
      w.add_step(run, Step{0, s, t, t + kStep});
      for (int k = 0; k < 52; ++k) {
        bool is_gemm = k % 5 == 0 && k < 55;  // k = 0, 5, ..., 50: 11 GEMMs
        Ns d = is_gemm ? 350'000 : 40'000;
        w.add(run, ApiCall{0, 4242, t, t + 1000, launch, ApiKind::Runtime, corr, 0});
        w.add(run, Kernel{0, 7, t, t + d, is_gemm ? gemm : ew,
                          is_gemm ? Category::Gemm : Category::Elementwise, corr++, 0});
        t += d;
      }
    }
    w.add(run, ApiCall{0, 4242, kFirstStep + 40 * kStep, kT0 + 4'700 * kMs, init, ApiKind::Python,
                       0, 0});
    w.commit();
  }
  open_file(f, 1);
  ASSERT_TRUE(app_.all_ready());
  const ViewRun& d = *app_.slots[0].data;
  EXPECT_EQ(d.end - d.start, 4'700 * kMs);  // the whole process
  // Opened on the GPU work: the 40 steps (and fit's margins), not the 4.7 s.
  EXPECT_LT(app_.geom.t1 - app_.geom.t0, 260 * kMs);
  EXPECT_LE(app_.geom.t0, kFirstStep);
  EXPECT_GE(app_.geom.t1, kFirstStep + 40 * kStep - 500'000);
  auto thread = lane(0, 0, 4242);
  ASSERT_TRUE(thread);
  const Lane* cpu = nullptr;
  for (const Lane& l : d.lanes)
    if (!l.gpu && l.stream == 4242) cpu = &l;
  ASSERT_TRUE(cpu);
  EXPECT_EQ(cpu->label, "pt_main_thread");
  // Stream 7 as drawn: every GEMM its own item, no item across a step's idle end.
  const Lane* s7 = nullptr;
  for (const Lane& l : d.lanes)
    if (l.gpu && l.stream == 7) s7 = &l;
  ASSERT_TRUE(s7);
  std::vector<DrawItem> items;
  fold_row(s7->rows[0], app_.axis, 0, app_.layout_opt.min_px, items);
  int gemms = 0, folded = 0;
  for (const DrawItem& it : items) {
    const Event e = s7->rows[0][static_cast<size_t>(it.first)];
    if (it.count == 1 && e.category == static_cast<uint8_t>(Category::Gemm)) ++gemms;
    if (it.count > 1) {
      ++folded;
      EXPECT_EQ(it.category, static_cast<uint8_t>(Category::Elementwise));
      const Event last = s7->rows[0][static_cast<size_t>(it.first + it.count - 1)];
      // Inside one step: from the step's start to its busy end (5.59 ms in).
      Ns step0 = kFirstStep + (e.start - kFirstStep) / kStep * kStep;
      EXPECT_LE(last.end, step0 + 11 * 350'000 + 41 * 40'000) << it.first;
    }
  }
  EXPECT_EQ(gemms, 40 * 11);
  EXPECT_GT(folded, 40);
  // The steps' own row: a click on step 3 zooms to it.
  auto steps = lane(0, 0, kStepsLane);
  ASSERT_TRUE(steps);
  Ns mid = kFirstStep + 3 * kStep + kStep / 2;
  move(x_of(mid), steps->y0 + 8);
  frame();
  ASSERT_TRUE(app_.hovered);
  ImGui::GetIO().MouseDown[0] = true;
  frame();
  ImGui::GetIO().MouseDown[0] = false;
  frame();
  ASSERT_TRUE(app_.selected);
  EXPECT_EQ(
      d.str(
          d.event(app_.selected->hit.lane, app_.selected->hit.row, app_.selected->hit.index).name),
      "step 3");
  EXPECT_LE(app_.axis.t0(), kFirstStep + 3 * kStep);
  EXPECT_GE(app_.axis.t1(), kFirstStep + 4 * kStep);
  EXPECT_LT(app_.axis.t1() - app_.axis.t0(), 2 * kStep);
}

// Issue 21: a capture with a window (`capture_windows`) opens on the window, not on the GPU work
// around it; F fits it again.
TEST_F(ViewHeadless, ACaptureWithAWindowOpensOnIt) {
  std::string f = dir_.file("window.braid");
  {
    TraceWriter w(f, TraceWriter::Mode::Overwrite);
    test::write_known_run(w, RunKind::Captured, kBase, 90, "captured");
    w.add(1, CaptureWindow{0, kBase + us(20), kBase + us(60)});
    w.commit();
  }
  open_file(f, 1);
  ASSERT_TRUE(app_.all_ready());
  EXPECT_LE(app_.geom.t0, kBase + us(20));
  EXPECT_GE(app_.geom.t1, kBase + us(60));
  EXPECT_LT(app_.geom.t1 - app_.geom.t0, us(45));  // the 40 us window and fit's margins
  app_.axis.fit(kBase, kBase + us(100));
  fit_all(app_);
  EXPECT_LE(app_.axis.t0(), kBase + us(20));
  EXPECT_LT(app_.axis.t1() - app_.axis.t0(), us(45));
}

// Issue 21: at 1600x900 the Details tab's value column fits its content: every key whole, the
// values in one column right of the widest key, each on one line (no one-word strips), and the
// collective's values shown in full.
TEST_F(ViewHeadless, DetailsValuesFitTheirColumnAt1600x900) {
  ImGui::GetIO().DisplaySize = ImVec2(1600, 900);
  open(1);
  const auto l = lane(0, 0, 7);
  ASSERT_TRUE(l.has_value());
  move(x_of(kBase + us(70)), l->y0 + 8);  // rank 0's allreduce [55, 90) us
  frame();
  ImGui::GetIO().MouseDown[0] = true;
  frame();
  ImGui::GetIO().MouseDown[0] = false;
  frame();
  frame();
  ASSERT_TRUE(app_.selected);
  ASSERT_EQ(app_.tab, SideTab::Details);
  const float line = ImGui::GetTextLineHeight();
  float keys_right = 0, values_left = -1;
  int keys = 0;
  for (const auto& [name, r] : app_.widgets) {
    if (name.rfind("details key ", 0) != 0) continue;
    const std::string key = name.substr(12);
    ++keys;
    EXPECT_NEAR(r.z - r.x, ImGui::CalcTextSize(key.c_str()).x, 1.0f) << key;  // whole
    keys_right = std::max(keys_right, r.z);
    const ImVec4 v = app_.widgets.at("details value " + key);
    if (values_left < 0) values_left = v.x;
    EXPECT_FLOAT_EQ(v.x, values_left) << key;             // one column
    EXPECT_LE(v.w - v.y, line + 1.0f) << key;             // one line
    EXPECT_LE(v.z, ImGui::GetIO().DisplaySize.x) << key;  // inside the window
  }
  EXPECT_GE(keys, 14);  // a collective's rows
  EXPECT_GT(values_left, keys_right);
  // The column is wide (most of the side panel), and long values show in full.
  EXPECT_GT(ImGui::GetIO().DisplaySize.x - values_left, 300.f);
  for (const auto& [key, full] : std::vector<std::pair<std::string, std::string>>{
           {"dtype / count", "float32 / 16777216 in, 16777216 out"},
           {"communicator", "pg0 (default_pg)"},
           {"rank / lane", "0 / stream 7"}}) {
    const ImVec4 v = app_.widgets.at("details value " + key);
    EXPECT_NEAR(v.z - v.x, ImGui::CalcTextSize(full.c_str()).x, 1.0f) << key;
  }
}

// One source of numbers: on a real two-rank trace, the Metrics tab shows per rank exactly what
// `braid analyze` prints (its --json report), and the same ranks arriving last.
TEST_F(ViewHeadless, MetricsTabShowsWhatBraidAnalyzePrintsOnARealTrace) {
  std::string f = dir_.file("hta.braid");
  test::CliResult imp = test::run_braid(
      dir_, "import " + test::traces("hta/tests/data/trace_filter/sampled_rank-0.json.gz") + " " +
                test::traces("hta/tests/data/trace_filter/sampled_rank-1.json.gz") + " -o " + f);
  ASSERT_EQ(imp.code, 0) << imp.err;
  test::CliResult an = test::run_braid(dir_, "analyze " + f + " --json");
  ASSERT_EQ(an.code, 0) << an.err;
  test::CliResult txt = test::run_braid(dir_, "analyze " + f);
  ASSERT_EQ(txt.code, 0) << txt.err;
  simdjson::dom::parser p;
  simdjson::dom::element j = p.parse(an.out);
  app_open(app_, f, int64_t(j["run"]));
  app_wait(app_);
  show_tab(app_, SideTab::Metrics);
  frame();
  frame();
  ASSERT_TRUE(app_.all_ready());
  EXPECT_EQ(app_.tab, SideTab::Metrics);
  const RunMetrics& m = app_.slots[0].metrics;
  size_t whole = 0;
  for (simdjson::dom::element r : j["ranks"].get_array()) {
    if (int64_t(r["step"]) >= 0) continue;
    ++whole;
    auto rank = static_cast<int32_t>(int64_t(r["rank"]));
    const analysis::RankMetrics* g = nullptr;
    for (const auto& x : m.ranks)
      if (x.rank == rank) g = &x;
    ASSERT_NE(g, nullptr) << "rank " << rank;
    EXPECT_EQ(g->compute_ns, int64_t(r["compute_ns"])) << rank;
    EXPECT_EQ(g->comm_ns, int64_t(r["comm_ns"])) << rank;
    EXPECT_EQ(g->exposed_comm_ns, int64_t(r["exposed_comm_ns"])) << rank;
    EXPECT_EQ(g->overlap_ns, int64_t(r["overlap_ns"])) << rank;
    EXPECT_EQ(g->idle_ns, int64_t(r["idle_ns"])) << rank;
    EXPECT_EQ(g->memory_ns, int64_t(r["memory_ns"])) << rank;
    EXPECT_EQ(g->span(), int64_t(r["end_ns"]) - int64_t(r["start_ns"])) << rank;
    // The stacked bar's parts are these numbers and fill the rank's span.
    MetricsBar b = metrics_bar(*g);
    EXPECT_EQ(b.compute + b.overlapped + b.exposed + b.memory + b.idle, g->span()) << rank;
    EXPECT_EQ(b.exposed, g->exposed_comm_ns);
    EXPECT_EQ(b.overlapped, g->overlap_ns);
  }
  EXPECT_EQ(whole, 2u);
  EXPECT_EQ(m.ranks.size(), whole);
  // Who made the others wait, as the text report's "last to arrive" line says.
  for (auto& [rank, v] : analysis::late_ranks(app_.slots[0].data->metrics)) {
    std::string says = "rank " + std::to_string(rank) + " " + std::to_string(v.count) + "x";
    EXPECT_NE(txt.out.find(says), std::string::npos) << says << "\n" << txt.out;
  }
}

}  // namespace
}  // namespace braid::view

// braid-view --screenshot under Xvfb: the PNG has lanes, events and labels where the known
// trace puts them (pixels checked at known times, not just a non-empty file), and compare
// mode shows both runs.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <map>

#include "app/view/core/colors.h"
#include "app/view/png_io.h"
#include "fusion/pass_schedules.h"
#include "fusion/schedule_store.h"
#include "trace/reader.h"
#include "trace/test_util.h"
#include "view/known_trace.h"

namespace braid::view {
namespace {

using test::kBase;
constexpr Ns us(double v) { return static_cast<Ns>(v * 1000); }

struct LaneGeo {
  int slot;
  int rank;
  int64_t stream;
  double y0, y1;
};
struct BarGeo {
  int rank;
  double y0, y1;
  double x[6];  // part boundaries: compute | overlapped | exposed | memory | idle
};
struct LateGeo {
  int rank;
  double x0, x1, y0, y1;
};
struct Geometry {
  double axis_x0, axis_x1, label_x0, label_x1;
  Ns t0, t1;
  std::vector<Ns> shift;         // per section
  std::vector<int64_t> run_ids;  // per section
  std::vector<LaneGeo> lanes;
  std::map<std::string, std::array<double, 4>> widgets;  // x0, y0, x1, y1
  std::vector<BarGeo> bars;                              // the Metrics tab's, when shown
  std::vector<LateGeo> late;
};

bool have_xvfb() { return std::system("command -v xvfb-run >/dev/null 2>&1") == 0; }

// Runs braid-view headless; returns the image and where it drew things.
std::pair<Image, Geometry> screenshot(const test::TempDir& dir, const std::string& braid,
                                      const std::string& extra) {
  std::string png = dir.file("shot.png"), geo = dir.file("shot.json");
  std::string cmd = std::string("xvfb-run -a -s '-screen 0 1600x1000x24' '") + BRAID_VIEW + "' '" +
                    braid + "' --screenshot '" + png + "' --geometry '" + geo +
                    "' --size 1400x800 " + extra + " > " + dir.file("log") + " 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << test::gunzip_file(dir.file("log"));
  Image img = read_png(png);
  // BRAID_VIEW_TEST_KEEP=DIR keeps the screenshots for a look.
  if (const char* keep = std::getenv("BRAID_VIEW_TEST_KEEP"))
    std::filesystem::copy_file(png,
                               std::string(keep) + "/" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                                   ".png",
                               std::filesystem::copy_options::overwrite_existing);
  simdjson::dom::parser p;
  simdjson::dom::element j = p.load(geo);
  Geometry g;
  g.axis_x0 = j["axis_x0"].get_double();
  g.axis_x1 = j["axis_x1"].get_double();
  g.label_x0 = j["label_x0"].get_double();
  g.label_x1 = j["label_x1"].get_double();
  g.t0 = j["t0"].get_int64();
  g.t1 = j["t1"].get_int64();
  for (auto [k, v] : j["widgets"].get_object()) {
    std::array<double, 4> r{};
    size_t i = 0;
    for (auto x : v.get_array()) r[i++] = x.get_double();
    g.widgets[std::string(k)] = r;
  }
  for (auto s : j["sections"].get_array()) {
    g.shift.push_back(s["shift"].get_int64());
    g.run_ids.push_back(s["run_id"].get_int64());
    for (auto l : s["lanes"].get_array())
      g.lanes.push_back({static_cast<int>(int64_t(s["slot"].get_int64())),
                         static_cast<int>(int64_t(l["rank"].get_int64())), l["stream"].get_int64(),
                         l["y0"].get_double(), l["y1"].get_double()});
  }
  for (auto b : j["metric_bars"].get_array()) {
    BarGeo bg{static_cast<int>(int64_t(b["rank"].get_int64())),
              b["y0"].get_double(),
              b["y1"].get_double(),
              {}};
    int k = 0;
    for (auto x : b["x"].get_array()) bg.x[k++] = x.get_double();
    g.bars.push_back(bg);
  }
  for (auto b : j["late_bars"].get_array())
    g.late.push_back({static_cast<int>(int64_t(b["rank"].get_int64())), b["x0"].get_double(),
                      b["x1"].get_double(), b["y0"].get_double(), b["y1"].get_double()});
  return {std::move(img), g};
}

const LaneGeo& lane(const Geometry& g, int slot, int rank, int64_t stream) {
  for (const LaneGeo& l : g.lanes)
    if (l.slot == slot && l.rank == rank && l.stream == stream) return l;
  throw std::runtime_error("lane not drawn");
}

// Pixel x of an axis time, computed independently from the axis window the frame used.
int x_at(const Geometry& g, Ns t) {
  return static_cast<int>(
      std::lround(g.axis_x0 + (g.axis_x1 - g.axis_x0) * static_cast<double>(t - g.t0) /
                                  static_cast<double>(g.t1 - g.t0)));
}

Rgb pixel(const Image& img, int x, int y) {
  const uint8_t* p = img.at(x, y);
  return {p[0], p[1], p[2]};
}

// Labels are drawn over events, so a point test looks at a 5-pixel-wide column of the row
// (y .. y + 12) and wants at least 60% of it in the colour (text covers less than that).
::testing::AssertionResult is_color(const Image& img, int x, int y, Rgb want) {
  int hit = 0, total = 0;
  Rgb seen{};
  for (int yy = y; yy < y + 12; ++yy)
    for (int xx = x - 2; xx <= x + 2; ++xx) {
      Rgb c = pixel(img, xx, yy);
      ++total;
      if (std::abs(c.r - want.r) <= 2 && std::abs(c.g - want.g) <= 2 && std::abs(c.b - want.b) <= 2)
        ++hit;
      else
        seen = c;
    }
  if (hit * 10 >= total * 6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "around (" << x << ", " << y << ") only " << hit << "/" << total << " pixels are "
         << int(want.r) << "," << int(want.g) << "," << int(want.b) << " (e.g. " << int(seen.r)
         << "," << int(seen.g) << "," << int(seen.b) << ")";
}

// Pixels in [x0, x1) x [y0, y1) within 12 of `c` on each channel (text is antialiased).
int count_near(const Image& img, int x0, int x1, int y0, int y1, Rgb c) {
  int n = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      Rgb p = pixel(img, x, y);
      if (std::abs(p.r - c.r) < 12 && std::abs(p.g - c.g) < 12 && std::abs(p.b - c.b) < 12) ++n;
    }
  return n;
}

class ViewScreenshot : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(have_xvfb()) << "xvfb-run is not installed: the screenshot tests need it "
                                "(scripts/setup.sh installs the xvfb and xauth packages)";
  }
  test::TempDir dir_;
};

TEST_F(ViewScreenshot, KnownEventsLanesAndLabelsAreWhereTheTraceSays) {
  std::string braid = dir_.file("known.braid");
  test::write_known_trace(braid);
  auto [img, g] = screenshot(dir_, braid, "");
  ASSERT_EQ(img.width, 1400);
  ASSERT_EQ(img.height, 800);
  EXPECT_EQ(g.t0, kBase - us(2));  // fit with 2% margins
  EXPECT_EQ(g.t1, kBase + us(102));
  ASSERT_EQ(g.lanes.size(), 8u);  // per rank: steps, streams 7 and 20, thread 100
  const LaneGeo& s7 = lane(g, 0, 0, 7);
  const LaneGeo& s7r1 = lane(g, 0, 1, 7);
  const LaneGeo& s20 = lane(g, 0, 0, 20);
  int y = static_cast<int>(s7.y0 + 2), y1 = static_cast<int>(s7r1.y0 + 2),
      y20 = static_cast<int>(s20.y0 + 2);

  // Events in their category colours, right of their labels.
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(35)), y,
                       category_color(static_cast<uint8_t>(Category::Gemm))));
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(35)), y1,
                       category_color(static_cast<uint8_t>(Category::Gemm))));
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(47.5)), y,
                       category_color(static_cast<uint8_t>(Category::Elementwise))));
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(85)), y,
                       category_color(static_cast<uint8_t>(Category::CommAllReduce))));
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(96)), y20,
                       category_color(static_cast<uint8_t>(Category::Attention))));
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(4)), y20,
                       category_color(static_cast<uint8_t>(Category::Memory))));
  // Gaps show the lane's background.
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(42.5)), y, kLaneBackground));
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(5)), y, kLaneBackground));
  // The clock offset is applied: at 57.5 us rank 0 is in its allreduce, rank 1 not yet.
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(57.5)), y,
                       category_color(static_cast<uint8_t>(Category::CommAllReduce))));
  EXPECT_TRUE(is_color(img, x_at(g, kBase + us(57.5)), y1, kLaneBackground));
  // Edges within a pixel: just inside and just outside the gemm [10, 40) us.
  int gx0 = x_at(g, kBase + us(10)), gx1 = x_at(g, kBase + us(40));
  EXPECT_TRUE(is_color(img, gx1 - 3, y, category_color(static_cast<uint8_t>(Category::Gemm))));
  EXPECT_TRUE(is_color(img, gx1 + 3, y, kLaneBackground));
  EXPECT_TRUE(is_color(img, gx0 - 3, y, kLaneBackground));
  EXPECT_TRUE(
      is_color(img, gx0 + 3 + 14 * 7, y, category_color(static_cast<uint8_t>(Category::Gemm))));

  // Labels: dark text inside the gemm ("gemm_kernel_A"), light text in the label column
  // ("stream 7"), and the collective labelled with its op and size.
  int dark = count_near(img, gx0 + 2, gx0 + 100, static_cast<int>(s7.y0), static_cast<int>(s7.y1),
                        {15, 15, 15});
  EXPECT_GT(dark, 40);
  int light = count_near(img, static_cast<int>(g.label_x0), static_cast<int>(g.label_x1),
                         static_cast<int>(s7.y0), static_cast<int>(s7.y1), {200, 200, 205});
  EXPECT_GT(light, 30);
  int ar0 = x_at(g, kBase + us(55));
  int ar_label = count_near(img, ar0 + 2, ar0 + 130, static_cast<int>(s7.y0),
                            static_cast<int>(s7.y1), {15, 15, 15});
  EXPECT_GT(ar_label, 60);  // "allreduce 64.0 MiB"
  // No text where the gemm's label has ended.
  EXPECT_EQ(count_near(img, gx1 - 20, gx1 - 4, static_cast<int>(s7.y0), static_cast<int>(s7.y1),
                       {15, 15, 15}),
            0);
}

TEST_F(ViewScreenshot, CompareModeShowsBothRunsAligned) {
  std::string braid = dir_.file("two.braid");
  test::write_known_trace(braid, true);
  auto [img, g] = screenshot(dir_, braid, "--compare 1 2");
  ASSERT_EQ(g.shift.size(), 2u);
  EXPECT_EQ(g.shift[0], kBase);
  EXPECT_EQ(g.shift[1], test::kRun2Base);
  const LaneGeo& a = lane(g, 0, 0, 7);
  const LaneGeo& b = lane(g, 1, 0, 7);
  EXPECT_GT(b.y0, a.y1);
  int ya = static_cast<int>(a.y0 + 2), yb = static_cast<int>(b.y0 + 2);
  Rgb ar = category_color(static_cast<uint8_t>(Category::CommAllReduce));
  Rgb gemm = category_color(static_cast<uint8_t>(Category::Gemm));
  // Both gemms at the same aligned place; the allreduce ends at 90 us in A, 70 us in B.
  EXPECT_TRUE(is_color(img, x_at(g, us(35)), ya, gemm));
  EXPECT_TRUE(is_color(img, x_at(g, us(35)), yb, gemm));
  EXPECT_TRUE(is_color(img, x_at(g, us(80)), ya, ar));
  EXPECT_TRUE(is_color(img, x_at(g, us(80)), yb, kLaneBackground));
  EXPECT_TRUE(is_color(img, x_at(g, us(65)), yb, ar));
}

// ImGui's dark style: the check mark, and the panels' green "finished" / good-delta text.
constexpr Rgb kCheckMark{66, 150, 250};
constexpr Rgb kGoodText{127, 229, 127};
constexpr Rgb kAssumptionText{229, 204, 114};

int count_in(const Image& img, const std::array<double, 4>& r, Rgb c) {
  return count_near(img, static_cast<int>(r[0]), static_cast<int>(r[2]), static_cast<int>(r[1]),
                    static_cast<int>(r[3]), c);
}

TEST_F(ViewScreenshot, TheExplorerOnAPresetTicksAppliedFindingsAndShowsBothSimulatedSteps) {
  const std::string braid = dir_.file("tp-sp.braid");
  fusion::store_schedule(braid, fusion::testing::preset_at_test_shape("tp-sp"), -1, "[]", true);
  auto [img, g] = screenshot(dir_, braid, "");
  // The simulated baseline (A) above the simulated fused step (B).
  ASSERT_EQ(g.run_ids.size(), 2u);
  const LaneGeo& a = lane(g, 0, 0, 0);
  const LaneGeo& b = lane(g, 1, 0, 0);
  EXPECT_GT(b.y0, a.y1);
  // Every finding is applied here: ticked, its box holds the check mark.
  ASSERT_TRUE(g.widgets.count("finding 0"));
  EXPECT_GT(count_in(img, g.widgets["finding 0"], kCheckMark), 10);
  // The toolbar's B - A step, shorter: in green, right of the Replay button.
  ASSERT_TRUE(g.widgets.count("replay button"));
  const auto& rb = g.widgets["replay button"];
  EXPECT_GT(count_near(img, static_cast<int>(rb[2]), static_cast<int>(rb[2]) + 400,
                       static_cast<int>(rb[1]), static_cast<int>(rb[3]), kGoodText),
            30);
  ASSERT_TRUE(g.widgets.count("save"));
}

TEST_F(ViewScreenshot, TheExplorerShowsAdviceUntickedWithItsAssumption) {
  // pp-ep with stages cut at layer boundaries: compute sits between the P2P and the
  // All-to-All, so every finding is advice.
  const std::string braid = dir_.file("pp-ep.braid");
  const std::string synth = std::string(BRAID_CLI) + " synth --preset pp-ep --no-pp-moe-cut " +
                            "--layers 4 --hidden 16 --seq 8 --heads 4 --ffn 32 --micro-batches 2 " +
                            "-q -o '" + braid + "' > /dev/null";
  ASSERT_EQ(std::system(synth.c_str()), 0);
  auto [img, g] = screenshot(dir_, braid, "");
  ASSERT_TRUE(g.widgets.count("finding 0"));
  const auto& box = g.widgets["finding 0"];
  EXPECT_EQ(count_in(img, box, kCheckMark), 0);
  // Its assumption, in yellow, on its row right of the box.
  EXPECT_GT(count_near(img, static_cast<int>(box[2]), static_cast<int>(box[2]) + 500,
                       static_cast<int>(box[1]), static_cast<int>(box[3]), kAssumptionText),
            30);
}

TEST_F(ViewScreenshot, TheReplayPanelAfterBraidAbOpensItsRuns) {
  const std::string braid = dir_.file("tp-sp.braid");
  fusion::store_schedule(braid, fusion::testing::preset_at_test_shape("tp-sp"), -1, "[]", true);
  const std::string fuse = std::string(BRAID_CLI) + " fuse '" + braid + "' > /dev/null";
  ASSERT_EQ(std::system(fuse.c_str()), 0);
  auto [img, g] = screenshot(dir_, braid, "--replay sim");
  // The runs `braid ab` stored, A and B.
  const auto runs = TraceReader(braid).runs();
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_EQ(g.run_ids.size(), 2u);
  EXPECT_EQ(g.run_ids[0], runs[0].run_id);
  EXPECT_EQ(g.run_ids[1], runs[1].run_id);
  // "finished (exit status 0)" in green in the panel, below the Run button.
  ASSERT_TRUE(g.widgets.count("replay run"));
  const auto& run = g.widgets["replay run"];
  EXPECT_GT(count_near(img, static_cast<int>(run[0]), static_cast<int>(run[0]) + 300,
                       static_cast<int>(run[3]), static_cast<int>(run[3]) + 60, kGoodText),
            30);
}

// The Metrics tab's charts on the known trace (analysis/metrics.h's numbers): each rank's bar
// cut into computation (gemm 30 + add 5 + attention 8 = 43 us), exposed communication (the
// allreduce: 35 us on rank 0, 30 us on rank 1; nothing computes under it), memory (the 8-us
// copy) and idle (the rest of the 100-us span), each part as wide as its share and in its
// colour; rank 1 arrived last at the allreduce, so the late-rank chart has its bar only.
TEST_F(ViewScreenshot, MetricsChartsShowEachRanksTimeAndWhoMadeTheOthersWait) {
  std::string braid = dir_.file("known.braid");
  test::write_known_trace(braid);
  auto [img, g] = screenshot(dir_, braid, "--tab metrics");
  ASSERT_EQ(g.bars.size(), 2u);
  const Rgb colors[5] = {kBarCompute, kBarOverlapped, kBarExposed, kBarMemory, kBarIdle};
  for (const BarGeo& b : g.bars) {
    ASSERT_TRUE(b.rank == 0 || b.rank == 1);
    const double parts_us[5] = {43, 0, b.rank == 0 ? 35.0 : 30.0, 8, b.rank == 0 ? 14.0 : 19.0};
    double w = b.x[5] - b.x[0];
    EXPECT_GT(w, 150);  // the sidebar's width less the labels
    for (int k = 0; k < 5; ++k) {
      EXPECT_NEAR(b.x[k + 1] - b.x[k], w * parts_us[k] / 100.0, 1.0)
          << "rank " << b.rank << " part " << k;
      if (parts_us[k] == 0) continue;
      int x = static_cast<int>((b.x[k] + b.x[k + 1]) / 2), y0 = static_cast<int>(b.y0) + 1,
          y1 = static_cast<int>(b.y1) - 1;
      int n = count_near(img, x - 2, x + 3, y0, y1, colors[k]);
      EXPECT_GE(n, 5 * (y1 - y0) * 9 / 10) << "rank " << b.rank << " part " << k;
    }
  }
  // Both spans are 100 us: the bars are as long as each other.
  EXPECT_NEAR(g.bars[0].x[5] - g.bars[0].x[0], g.bars[1].x[5] - g.bars[1].x[0], 0.5);
  ASSERT_EQ(g.late.size(), 1u);
  const LateGeo& l = g.late[0];
  EXPECT_EQ(l.rank, 1);
  EXPECT_GT(l.x1 - l.x0, 100);  // the only late rank has the longest bar
  int n = count_near(img, static_cast<int>(l.x0) + 1, static_cast<int>(l.x1) - 1,
                     static_cast<int>(l.y0), static_cast<int>(l.y1), kBarLate);
  EXPECT_GE(n, (static_cast<int>(l.x1) - static_cast<int>(l.x0) - 2) *
                   (static_cast<int>(l.y1) - static_cast<int>(l.y0)) * 8 / 10);
}

TEST_F(ViewScreenshot, BadInputGetsOneLineAndNoFile) {
  std::string png = dir_.file("none.png");
  std::string cmd = std::string("'") + BRAID_VIEW + "' '" + dir_.file("absent.braid") +
                    "' --screenshot '" + png + "' 2> " + dir_.file("err");
  int rc = std::system(cmd.c_str());
  EXPECT_NE(rc, 0);
  std::string err = test::gunzip_file(dir_.file("err"));
  EXPECT_NE(err.find("braid-view: error: "), std::string::npos) << err;
  EXPECT_NE(err.find("absent.braid"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(png));
  cmd =
      std::string("'") + BRAID_VIEW + "' x.braid --size 10 --screenshot '" + png + "' 2>/dev/null";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2);
}

}  // namespace
}  // namespace braid::view

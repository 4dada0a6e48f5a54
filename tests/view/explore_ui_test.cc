// The explorer and the replay panel in whole frames built headless (ImGui, no GL): clicking a
// finding's checkbox on a preset re-runs the pipeline and the sim, and the fused run's step is
// what `braid replay --backend sim` gives for the saved choice (the test runs both); save,
// reopen and find the saved schedule; `braid ab` as a child that fails shows its error and
// leaves the file as it was; cancel ends the child; a good one opens its runs in compare mode.
// "Save" and "Lift" run in the background with progress and cancel.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "app/view/app.h"
#include "fusion/pass_schedules.h"
#include "fusion/schedule_store.h"
#include "trace/test_util.h"
#include "view/headless.h"
#include "view/process_group.h"

namespace braid::view {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command; returns its stdout (asserting exit 0).
std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << cmd << "\n" << out;
  return out;
}

// One headless frame of `app`, and a click on one of its widgets (three frames: move, press,
// release), for the fixture and the tests that build their own App.
void frame_of(App& app) {
  ImGui::NewFrame();
  build_frame(app);
  ImGui::Render();
}
void click_in(App& app, const std::string& widget) {
  ASSERT_TRUE(app.widgets.count(widget)) << widget;
  const ImVec4 r = app.widgets[widget];
  ImGuiIO& io = ImGui::GetIO();
  io.MousePos = ImVec2((r.x + r.z) / 2, (r.y + r.w) / 2);
  frame_of(app);
  io.MouseDown[0] = true;
  frame_of(app);
  io.MouseDown[0] = false;
  frame_of(app);
}

class ViewExploreUi : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("BRAID_EXE", BRAID_CLI, 1);
    test::create_headless_imgui(1600, 900);
    path_ = dir_.file("tp-sp.braid");
    fusion::store_schedule(path_, fusion::testing::preset_at_test_shape("tp-sp"), -1, "[]", true);
  }
  void TearDown() override {
    app_.reset();
    ImGui::DestroyContext();
  }
  void frame() { frame_of(*app_); }
  void open() {
    app_ = std::make_unique<App>();
    app_open(*app_, path_, -1);
    settle();
  }
  void settle() {
    app_wait(*app_);
    for (int i = 0; i < 3; ++i) frame();
  }
  void click(const std::string& widget) { click_in(*app_, widget); }
  void wait_child() {
    while (app_->replay.child && !app_->replay.child->finished())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    settle();
  }
  // `braid replay --backend sim` of stored schedule `id`: its "simulated step: N ns".
  Ns replayed_step(int64_t id) {
    const std::string out =
        run(std::string(BRAID_CLI) + " replay '" + path_ + "' --schedule " + std::to_string(id) +
            " --backend sim --profile h100-nvlink --no-store 2>&1");
    long long ns = -1;
    const size_t at = out.find("simulated step: ");
    if (at != std::string::npos) std::sscanf(out.c_str() + at, "simulated step: %lld", &ns);
    return ns;
  }

  test::TempDir dir_;
  std::string path_;
  std::unique_ptr<App> app_;
};

TEST_F(ViewExploreUi, TickingFindingsGivesTheStepBraidReplaySimulatesForTheSavedChoice) {
  open();
  App& app = *app_;
  ASSERT_TRUE(app.explore.explorer.result()) << app.explore.explorer.error() << app.status;
  EXPECT_EQ(app.tab, SideTab::Opportunities);
  // The explorer's simulated runs, A above B.
  const ExploreResult* r = &*app.explore.explorer.result();
  ASSERT_TRUE(app.compare);
  ASSERT_TRUE(app.all_ready());
  EXPECT_EQ(app.slots[0].file, r->scratch);
  EXPECT_EQ(app.slots[1].run_id, r->fused_run);
  const Ns baseline = r->baseline_step_ns(), all = r->fused_step_ns();
  EXPECT_LT(all, baseline);
  // The loaded run B spans the fused step (one simulated step).
  EXPECT_EQ(app.slots[1].data->end - app.slots[1].data->start, all);
  EXPECT_EQ(app.slots[0].data->end - app.slots[0].data->start, baseline);
  ASSERT_FALSE(app.explore.findings.empty());
  ASSERT_TRUE(app.explore.findings[0].ticked);

  // Untick the first applied finding: the pipeline and the sim run again, B's step gets longer.
  const fusion::FindingKey key = app.explore.findings[0].key;
  click("finding 0");
  EXPECT_TRUE(app.explore.explorer.busy());
  settle();
  r = &*app.explore.explorer.result();
  const Ns fewer = r->fused_step_ns();
  EXPECT_GT(fewer, all);
  // Listed again, unticked, as deselected.
  int deselected = 0;
  for (const ExploreFinding& f : app.explore.findings)
    if (f.key == key) {
      EXPECT_FALSE(f.ticked);
      EXPECT_EQ(f.status, ExploreFinding::Status::Deselected);
      ++deselected;
    }
  EXPECT_EQ(deselected, 1);
  EXPECT_EQ(app.slots[1].data->end - app.slots[1].data->start, fewer);
  EXPECT_EQ(app.slots[1].file, r->scratch);

  // Save, then `braid replay --backend sim` of the saved schedule gives the same step, and of
  // the baseline the baseline's.
  click("save");
  settle();  // the save runs in the background
  const int64_t saved = app.explore.saved_id;
  ASSERT_GE(saved, 0) << app.explore.saved;
  EXPECT_EQ(replayed_step(saved), fewer);
  EXPECT_EQ(replayed_step(r->schedule_id), baseline);

  // Tick it again: the first result's step.
  int again = -1;
  for (size_t i = 0; i < app.explore.findings.size(); ++i)
    if (app.explore.findings[i].status == ExploreFinding::Status::Deselected)
      again = static_cast<int>(i);
  ASSERT_GE(again, 0);
  click("finding " + std::to_string(again));
  settle();
  EXPECT_EQ(app.explore.explorer.result()->fused_step_ns(), all);

  // Reopen the file: the saved schedule is there (parent: the explored one), and the replay
  // panel's default pair is it and its parent.
  open();
  bool found = false;
  for (const auto& st : fusion::list_schedules(path_))
    if (st.id == saved) found = st.parent_id == app_->explore.explorer.result()->schedule_id;
  EXPECT_TRUE(found);
  AbRequest ab;
  ab.steps = 2;
  replay_start(*app_, ab);
  wait_child();
  const ReplayPanel& p = app_->replay;
  ASSERT_EQ(p.child->exit_status(), 0) << p.child->log();
  ASSERT_GE(p.outcome.fused_run, 0) << p.child->log();
  EXPECT_NE(p.outcome.speedup.find("speedup"), std::string::npos);
  EXPECT_NE(p.outcome.data_check.find("data check passed"), std::string::npos) << p.child->log();
  // Its runs are open in compare mode, B the replay of the saved schedule.
  EXPECT_TRUE(app_->compare);
  EXPECT_TRUE(app_->slots[0].file.empty());
  EXPECT_EQ(app_->slots[1].run_id, p.outcome.fused_run);
  ASSERT_TRUE(app_->slots[1].ready());
  EXPECT_EQ(app_->slots[1].data->run.schedule_id, saved);
}

TEST_F(ViewExploreUi, AFailingReplayShowsItsErrorAndLeavesTheFileAsItWas) {
  open();
  frame();
  const std::string before = slurp(path_);
  const int64_t a = app_->slots[0].run_id;
  AbRequest ab;
  ab.fused = 99;  // no such schedule
  replay_start(*app_, ab);
  wait_child();
  const ReplayPanel& p = app_->replay;
  EXPECT_NE(p.child->exit_status(), 0);
  EXPECT_NE(p.outcome.first_error.find("error"), std::string::npos) << p.child->log();
  EXPECT_NE(p.outcome.first_error.find("99"), std::string::npos) << p.outcome.first_error;
  EXPECT_EQ(slurp(path_), before);
  // The window still shows what it showed.
  EXPECT_EQ(app_->slots[0].run_id, a);
  EXPECT_FALSE(app_->slots[0].file.empty());
}

// Holds the write lock of a `.braid` file (another writer at work) while it lives.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db_);
  }
  ~FileLock() { release(); }
  void release() {
    if (!db_) return;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
    db_ = nullptr;
  }

 private:
  sqlite3* db_ = nullptr;
};

// Issue 21: "Save" runs off the UI thread. While another writer holds the file's lock (the
// store waits for it up to 10 s), the frames go on, with the save's progress and a cancel
// button; cancelled, it leaves the file as it was; run again, it stores the schedule.
TEST_F(ViewExploreUi, SaveRunsInTheBackgroundAndItsCancelLeavesTheFileAsItWas) {
  open();
  ASSERT_TRUE(app_->explore.explorer.result()) << app_->explore.explorer.error();
  const size_t schedules = fusion::list_schedules(path_).size();
  FileLock lock(path_);
  const auto t0 = std::chrono::steady_clock::now();
  click("save");
  for (int i = 0; i < 5; ++i) frame();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_TRUE(app_->explore.task.busy());
  EXPECT_EQ(app_->explore.saved_id, -1);
  click("task cancel");
  lock.release();
  settle();
  EXPECT_FALSE(app_->explore.task.busy());
  EXPECT_TRUE(app_->explore.task.cancelled()) << app_->explore.task.error();
  EXPECT_EQ(app_->explore.saved_id, -1);
  EXPECT_NE(app_->explore.saved.find("save cancelled"), std::string::npos) << app_->explore.saved;
  EXPECT_EQ(fusion::list_schedules(path_).size(), schedules);

  click("save");
  settle();
  ASSERT_GE(app_->explore.saved_id, 0) << app_->explore.saved;
  EXPECT_EQ(fusion::list_schedules(path_).size(), schedules + 1);
  EXPECT_NE(app_->explore.saved.find("saved as schedule " + std::to_string(app_->explore.saved_id)),
            std::string::npos);
}

TEST_F(ViewExploreUi, CancelEndsTheChild) {
  open();
  click("save");  // a pair to replay
  settle();
  ASSERT_GE(app_->explore.saved_id, 0) << app_->explore.saved;
  const std::string before = slurp(path_);
  show_tab(*app_, SideTab::Replay);
  app_->replay.visible = true;
  frame();
  frame();
  app_->replay.request.steps = 10000000;  // runs for minutes
  click("replay run");
  ASSERT_TRUE(app_->replay.child);
  const pid_t group = app_->replay.child->pid();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  frame();
  ASSERT_FALSE(app_->replay.child->finished()) << app_->replay.child->log();
  click("replay cancel");
  wait_child();
  EXPECT_TRUE(app_->replay.child->cancelled());
  EXPECT_EQ(app_->replay.child->exit_status(), 128 + SIGTERM);
  // Nothing of its process group runs any more.
  for (int i = 0; i < 100 && braid::test::live_in_group(group) > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(braid::test::live_in_group(group), 0);
  EXPECT_EQ(slurp(path_), before);
  EXPECT_EQ(app_->replay.outcome.fused_run, -1);
}

// braid-view FILE --compare ORIGINAL_RUN FUSED_RUN: a real imported 2-rank trace (README's own
// job block) beside the sim replay of its fused schedule, step-aligned.
TEST(ViewOriginalBesideRewrite, AnImportedRunAndTheReplayOfItsFusedScheduleAlignByStep) {
  setenv("BRAID_EXE", BRAID_CLI, 1);
  test::create_headless_imgui(1600, 900);
  test::TempDir dir;
  const std::string job = dir.file("job.braid");
  const std::string assets = std::string(BRAID_TESTS_DATA_ROOT) + "/assets/traces/hta-dlrm";
  const std::string cli = std::string(BRAID_CLI) + " ";
  run(cli + "import " + assets + "/rank-0.json.gz " + assets + "/rank-1.json.gz -o " + job +
      " > /dev/null");
  {
    // A run and no schedule: the Opportunities tab offers Lift (as `braid lift`), then explores.
    App app;
    app_open(app, job, 1);
    app_wait(app);
    show_tab(app, SideTab::Opportunities);
    auto frame = [&] { frame_of(app); };
    for (int i = 0; i < 3; ++i) frame();
    auto click = [&](const std::string& widget) { click_in(app, widget); };
    // Lift runs in the background: cancelled (here while another writer holds the file), it
    // stores nothing.
    {
      FileLock lock(job);
      click("lift");
      EXPECT_TRUE(app.explore.task.busy());
      click("task cancel");
    }
    app_wait(app);
    EXPECT_NE(app.status.find("lift cancelled"), std::string::npos) << app.status;
    EXPECT_TRUE(fusion::list_schedules(job).empty());
    for (int i = 0; i < 3; ++i) frame();
    click("lift");
    app_wait(app);
    EXPECT_NE(app.status.find("lifted run 1 into schedule"), std::string::npos) << app.status;
    app_wait(app);
    ASSERT_TRUE(app.explore.explorer.result()) << app.explore.explorer.error();
    const auto sch = fusion::list_schedules(job);
    ASSERT_EQ(sch.size(), 1u);
    EXPECT_EQ(app.explore.explorer.result()->schedule_id, sch[0].id);
    // A lifted schedule's compute is opaque: tp-sp's findings are advice with their assumption.
    size_t advice = 0;
    for (const ExploreFinding& f : app.explore.findings)
      advice += f.status == ExploreFinding::Status::Advice && !f.assumption.empty();
    EXPECT_GT(advice, 0u);
  }
  // One step (as `braid demo` does): the whole run's buffers exceed the mpi backend's limit.
  run(cli + "lift " + job + " --step 552 > /dev/null");
  run(cli + "fuse " + job + " > /dev/null");
  const std::string ab = run(cli + "ab " + job + " --backend sim --steps 2 --no-data-check --json");
  const AbOutcome o = parse_ab_output(ab);
  ASSERT_GE(o.fused_run, 0) << ab;
  {
    App app;
    app_open(app, job, 1, o.fused_run);
    app_wait(app);
    ASSERT_TRUE(app.all_ready()) << app.status;
    EXPECT_TRUE(app.compare);
    EXPECT_EQ(app.slots[0].data->run.kind, RunKind::Imported);
    EXPECT_EQ(app.slots[1].data->run.kind, RunKind::Simulated);
    // Each counts from its first step.
    EXPECT_EQ(app.slots[0].shift, step_origin(*app.slots[0].data));
    EXPECT_EQ(app.slots[1].shift, step_origin(*app.slots[1].data));
    EXPECT_FALSE(app.slots[0].data->steps.empty());
    EXPECT_FALSE(app.slots[1].data->steps.empty());
    EXPECT_TRUE(app.links_error.empty()) << app.links_error;
    ImGui::NewFrame();
    build_frame(app);
    ImGui::Render();
    EXPECT_EQ(app.geom.sections.size(), 2u);
    // Replay A/B on 2 MPI ranks from the window (mpirun -np 2, the schedule's ranks): its runs
    // open in compare mode with the data-check verdict.
    AbRequest r;
    r.backend = AbBackend::Mpi;
    r.steps = 2;
    replay_start(app, r);
    EXPECT_NE(app.replay.command.find("-np 2 "), std::string::npos) << app.replay.command;
    while (!app.replay.child->finished())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    app_wait(app);
    ASSERT_EQ(app.replay.child->exit_status(), 0) << app.replay.child->log();
    EXPECT_NE(app.replay.outcome.speedup.find("speedup"), std::string::npos);
    EXPECT_FALSE(app.replay.outcome.data_check.empty()) << app.replay.child->log();
    EXPECT_EQ(app.slots[1].run_id, app.replay.outcome.fused_run);
    ASSERT_TRUE(app.all_ready());
    EXPECT_EQ(app.slots[1].data->run.kind, RunKind::Replayed);
  }
  ImGui::DestroyContext();
}

}  // namespace
}  // namespace braid::view

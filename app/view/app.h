// The state of the braid-view window and the frame that draws it. Everything here uses ImGui
// only (no GL, no GLFW): the front end (main.cc) owns the window and the renderer, the tests
// and the frame benchmark build frames with an ImGui context and no backend at all.
#pragma once

#include <imgui.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/view/core/child.h"
#include "app/view/core/explore.h"
#include "app/view/core/extras.h"
#include "app/view/core/layout.h"
#include "app/view/core/loader.h"
#include "app/view/core/search.h"
#include "app/view/core/stats.h"
#include "app/view/core/time_axis.h"

namespace braid::view {

// One run being shown: loading in the background, then its data and what is derived from it.
struct RunSlot {
  int64_t run_id = -1;
  // Where the run is: empty for the open file; the explorer's scratch file for its simulated
  // runs (then `title` names them in the run picker).
  std::string file;
  std::string title;
  std::unique_ptr<BackgroundLoad> load;
  int64_t handed_over = 0;  // the load's ViewRuns taken so far
  // The run as loaded so far (data->complete once the load is done): what frames draw.
  std::shared_ptr<ViewRun> data;
  Extras extras;
  RunMetrics metrics;
  std::vector<uint8_t> collapsed;  // per rank group
  RunLayout layout;
  Ns shift = 0;  // subtracted from its times (compare mode: its step origin)
  std::string error;
  // Filled by the loading thread (BackgroundLoad's derive), moved in by app_poll.
  Extras pending_extras;
  RunMetrics pending_metrics;
  bool ready() const { return data != nullptr; }
};

struct Selection {
  int slot = 0;  // 0: run A, 1: run B
  Hit hit;
};

// Where things were drawn in the last frame (screen pixels), for the screenshot tests.
struct FrameGeometry {
  float axis_x0 = 0, axis_x1 = 0;    // the time axis spans these pixels
  Ns t0 = 0, t1 = 0;                 // and these (axis) times
  float lanes_y0 = 0, lanes_y1 = 0;  // visible lanes region
  struct LaneGeom {
    int slot = 0;
    int32_t rank = 0;
    int64_t stream = 0;
    float y0 = 0, y1 = 0;  // screen y of the lane's rows
    int rows = 0;
  };
  struct SectionGeom {
    int slot = 0;
    int64_t run_id = -1;
    Ns shift = 0;
    float y0 = 0, y1 = 0;
    std::vector<LaneGeom> lanes;  // visible lanes
  };
  std::vector<SectionGeom> sections;
  float label_x0 = 0, label_x1 = 0;  // the lane-label column
  // The Metrics tab's charts, when it is shown: a rank's stacked bar (x: the boundaries of its
  // parts compute | overlapped | exposed | memory | idle, so 6 values) and the late-rank bars.
  struct BarGeom {
    int slot = 0;
    int32_t rank = 0;
    float y0 = 0, y1 = 0;
    float x[6] = {};
  };
  std::vector<BarGeom> metric_bars;
  struct LateGeom {
    int slot = 0;
    int32_t rank = 0;
    float x0 = 0, x1 = 0, y0 = 0, y1 = 0;  // the bar of others' total wait
  };
  std::vector<LateGeom> late_bars;
  int link_lines = 0;  // compare mode: fused-op links drawn
};

enum class SideTab {
  Details,
  Range,
  Search,
  Opportunities,
  Metrics,
  Diagnostics,
  Communicators,
  Compare,
  Replay
};

// The "Replay A/B..." panel: `braid ab` for a pair as a child process.
struct ReplayPanel {
  AbRequest request;
  std::unique_ptr<ChildProcess> child;
  std::string command;  // the command line shown
  double started = 0;   // steady-clock seconds
  double ended = 0;
  bool opened = false;  // its runs were opened in compare mode
  AbOutcome outcome;
  bool visible = false;  // the tab is offered
};

// The explorer in the window (Opportunities tab).
struct ExplorePanel {
  Explorer explorer;
  bool started = false;
  bool follow = true;  // show its simulated runs in compare mode as they come
  std::string profile = "h100-nvlink";
  std::vector<ExploreFinding> findings;  // the checkboxes (the last result's, as ticked)
  int selected = -1;                     // the finding shown in full (hovered last)
  int generation = 0;                    // the explorer's result taken in
  std::string saved;                     // "saved as schedule N (parent M) in FILE"
  int64_t saved_id = -1;
  FileTask task;  // "Save" and "Lift", off the UI thread
};

struct App {
  std::string path;
  std::vector<RunRow> runs;  // of the file
  RunSlot slots[2];
  bool compare = false;

  TimeAxis axis;
  LayoutOptions layout_opt;
  bool fit_pending = true;
  // The axis window the last fit of a run still loading gave (the next one follows it).
  std::optional<std::pair<Ns, Ns>> auto_fit;
  bool show_flows = true;
  bool show_critical_path = true;  // when `braid analyze` stored one

  std::optional<Selection> selected;
  std::optional<Selection> hovered;

  // Range selection (axis times) and its statistics, per slot.
  bool range_active = false;
  Ns range_t0 = 0, range_t1 = 0;
  std::optional<RangeStats> range_stats[2];

  char search_text[128] = {};
  SearchResult search_result;
  int search_slot = 0;
  int search_index = -1;

  std::vector<FusedLink> links;  // compare mode: fused ops of B and what they replace in A
  int selected_link = -1;        // the Compare tab's chosen fused op (summarize_links index)
  std::string links_error;
  std::vector<DiffRow> diff;

  SideTab tab = SideTab::Details;
  bool tab_requested = false;

  // Mouse drag on the timeline: 0 none, 1 pan, 2 range selection.
  int drag_mode = 0;
  float drag_x = 0, drag_y = 0;
  Ns drag_t = 0;
  bool drag_moved = false;

  ExplorePanel explore;
  ReplayPanel replay;

  FrameGeometry geom;
  // Where named widgets were drawn in the last frame (min x, min y, max x, max y), for the UI
  // tests to click them: "finding N" (the explorer's checkboxes), "save", "lift", "replay run",
  // "replay cancel", "replay button".
  std::map<std::string, ImVec4> widgets;
  std::string status;  // one line under the toolbar (errors, hints)
  float sidebar_width = 470.f;

  bool slot_active(int s) const { return s == 0 || compare; }
  const ViewRun* run(int s) const { return slot_active(s) ? slots[s].data.get() : nullptr; }
  bool all_ready() const { return slots[0].ready() && (!compare || slots[1].ready()); }
  bool all_complete() const {
    return all_ready() && slots[0].data->complete && (!compare || slots[1].data->complete);
  }
  bool loading() const;
  double load_fraction() const;
};

// How often the window is drawn while a run loads and no input comes (input draws at once, at
// the display's rate): the ranks in so far and the progress bar, ten times a second, where the
// display's 60 would spend half a core of a 2-core machine redrawing a 100 M-event run the load
// needs (docs/gui.md). Idle otherwise, the window waits for input up to kIdleFrameS.
constexpr double kLoadingFrameS = 0.1;
constexpr double kIdleFrameS = 0.25;

// Opens `path` and starts loading run `run_a` (-1: the first run), and `run_b` in compare mode
// (-1: no compare). Throws braid::Error when the file cannot be opened.
void app_open(App& app, const std::string& path, int64_t run_a, int64_t run_b = -1);
// Starts loading another run into slot `s` (of `file`, default the open file).
void app_load(App& app, int s, int64_t run_id, const std::string& file = "",
              const std::string& title = "");
// The explorer: (re)starts it on the open file's newest root schedule with the panel's choice.
void explore_start(App& app);
// Takes a finished explorer run in: its simulated runs into compare mode when following.
bool explore_poll(App& app);
// Lifts the run of slot A into a schedule (fusion::lift_into_file, as `braid lift`) in the
// background (ExplorePanel::task, with progress and cancel); once it is stored, explore_poll
// starts the explorer on it. Errors go to the status line.
void explore_lift(App& app);
// Stores the explorer's result as `braid fuse` does, in the background (ExplorePanel::task);
// explore_poll sets ExplorePanel::saved and saved_id when it is done.
void explore_save(App& app);
// Starts `braid ab` as a child process (cancelling one still running).
void replay_start(App& app, const AbRequest& r);
// Takes a finished child in: the stored runs into compare mode on success.
bool replay_poll(App& app);
// Takes finished background loads in; call once per frame. Returns true when something changed.
bool app_poll(App& app);
// Recomputes layouts, alignment shifts, the diff and the fused links from the loaded runs.
void app_derive(App& app);
// Waits (blocking) until every load has finished.
void app_wait(App& app);

// Builds the whole window between ImGui::NewFrame() and ImGui::Render().
void build_frame(App& app);

// Navigation, shared by keys, panels and tests.
// Recomputes the layout of slot `s` (after collapsing or expanding a rank).
void relayout(App& app, int s);
// Fits the span of the GPU work (kernels, copies, collectives) of the runs shown, where a
// capture's process start-up without GPU work would otherwise take most of the window; with
// `whole`, every event (CPU calls and annotations included).
void fit_all(App& app, bool whole = false);
void zoom_to(App& app, Ns t0, Ns t1);  // axis times
void select_event(App& app, int slot, const Hit& hit, bool zoom);
void show_tab(App& app, SideTab tab);
// The time shown on the axis for a run's time (its shift applied) and back.
inline Ns to_axis(const App& app, int slot, Ns t) { return t - app.slots[slot].shift; }

double steady_seconds();  // a monotonic clock, in seconds
// Records the last ImGui item as widget `name` (App::widgets).
void note_widget(App& app, const std::string& name);

// Text helpers for the panels.
std::string event_title(const ViewRun& d, const Event& e);  // "allreduce 64.0 MiB" / kernel name
std::string short_name(const std::string& s, size_t max_chars);
// `s` cut in the middle to at most `max_chars` ("ncclDevKernel_...RING_LL"): long kernel names
// differ at both ends.
std::string elide_middle(const std::string& s, size_t max_chars);
// Text that fits `max_w` pixels (<= 0: the rest of the line), elided in the middle, with the
// whole text as a tooltip when it was cut.
void text_elided(const std::string& s, float max_w = 0);

namespace panels {
void run_picker(App& app);
void search_box(App& app);
void search_results(App& app);
void overview(App& app, ImVec2 size);
void timeline(App& app, ImVec2 size);
void details(App& app);
void range(App& app);
// The range statistics of both runs for [range_t0, range_t1] (axis times).
void update_range_stats(App& app);
void opportunities(App& app);
void metrics(App& app);
void diagnostics(App& app);
void communicators(App& app);
void compare(App& app);
void replay(App& app);
void explore_toolbar(App& app);
}  // namespace panels

}  // namespace braid::view

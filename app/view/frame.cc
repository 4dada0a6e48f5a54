// The window: toolbar (run picker, search, fit), overview strip, timeline, and the side panel
// with one tab per panel.
#include <algorithm>
#include <cstdio>

#include "app/view/app.h"

namespace braid::view {
namespace {

// Keys by GLFW key code (letters are their ASCII capitals), as the GLFW backend fills
// io.KeysDown; ImGui 1.86 has no named letter keys.
bool key_pressed(int key) {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput || key < 0 || key >= IM_ARRAYSIZE(io.KeysDown)) return false;
  return ImGui::IsKeyPressed(key, true);
}

void keyboard(App& app) {
  if (!app.all_ready()) return;
  float w = app.axis.width();
  float cx = w * 0.5f;
  const ImGuiIO& io = ImGui::GetIO();
  if (key_pressed('W')) app.axis.zoom_at(cx, 0.8);
  if (key_pressed('S')) app.axis.zoom_at(cx, 1.25);
  if (key_pressed('A')) app.axis.pan_px(w * 0.1f);
  if (key_pressed('D')) app.axis.pan_px(-w * 0.1f);
  if (key_pressed('F')) {
    if (app.range_active && !io.KeyShift)
      zoom_to(app, app.range_t0, app.range_t1);
    else
      fit_all(app, io.KeyShift);
  }
  if (key_pressed(256 /* GLFW_KEY_ESCAPE */)) {
    app.selected.reset();
    app.range_active = false;
  }
}

void side_panel(App& app) {
  if (!ImGui::BeginTabBar("side")) return;
  auto tab = [&](const char* label, SideTab t, void (*draw)(App&)) {
    ImGuiTabItemFlags f = 0;
    if (app.tab_requested && app.tab == t) f |= ImGuiTabItemFlags_SetSelected;
    if (ImGui::BeginTabItem(label, nullptr, f)) {
      if (!app.tab_requested) app.tab = t;
      ImGui::BeginChild("tab", ImVec2(0, 0), false);
      draw(app);
      ImGui::EndChild();
      ImGui::EndTabItem();
    }
  };
  tab("Details", SideTab::Details, panels::details);
  tab("Range", SideTab::Range, panels::range);
  tab("Search", SideTab::Search, panels::search_results);
  tab("Opportunities", SideTab::Opportunities, panels::opportunities);
  tab("Metrics", SideTab::Metrics, panels::metrics);
  tab("Diagnostics", SideTab::Diagnostics, panels::diagnostics);
  tab("Communicators", SideTab::Communicators, panels::communicators);
  if (app.compare) tab("Compare", SideTab::Compare, panels::compare);
  if (app.replay.visible) tab("Replay", SideTab::Replay, panels::replay);
  app.tab_requested = false;
  ImGui::EndTabBar();
}

}  // namespace

void build_frame(App& app) {
  app_poll(app);
  app.widgets.clear();
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0.f);
  ImGui::Begin("braid-view", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoScrollWithMouse | ImGuiWindowFlags_NoScrollbar);
  ImGui::PopStyleVar();

  panels::run_picker(app);
  ImGui::SameLine();
  panels::search_box(app);
  ImGui::SameLine();
  if (ImGui::Button("Fit (F)")) fit_all(app);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("The span of the GPU work; Shift+F: everything, CPU calls included");
  ImGui::SameLine();
  ImGui::Checkbox("Flows", &app.show_flows);
  if (app.slots[0].ready() && !app.slots[0].extras.critical_path.empty()) {
    ImGui::SameLine();
    ImGui::Checkbox("Critical path", &app.show_critical_path);
  }
  ImGui::SameLine();
  if (ImGui::Button("Replay A/B...")) {
    app.replay.visible = true;
    show_tab(app, SideTab::Replay);
  }
  note_widget(app, "replay button");
  panels::explore_toolbar(app);
  if (app.loading()) {
    ImGui::SameLine();
    char buf[64];
    std::snprintf(buf, sizeof buf, "loading %.0f%%", app.load_fraction() * 100);
    ImGui::ProgressBar(static_cast<float>(app.load_fraction()), ImVec2(200, 0), buf);
  }
  if (!app.status.empty()) ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "%s", app.status.c_str());

  ImVec2 avail = ImGui::GetContentRegionAvail();
  float side = std::min(app.sidebar_width, avail.x * 0.45f);
  float main_w = avail.x - side - ImGui::GetStyle().ItemSpacing.x;
  ImGui::BeginGroup();
  float overview_h = app.compare ? 56.f : 36.f;
  panels::overview(app, ImVec2(main_w, overview_h));
  panels::timeline(app, ImVec2(main_w, ImGui::GetContentRegionAvail().y));
  ImGui::EndGroup();
  ImGui::SameLine();
  ImGui::BeginChild("side", ImVec2(0, 0), true);
  side_panel(app);
  ImGui::EndChild();

  keyboard(app);
  ImGui::End();
}

}  // namespace braid::view

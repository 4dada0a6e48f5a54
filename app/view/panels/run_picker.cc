// The run picker: every run of the file (captures, imports, replays, simulations); a second
// picker in compare mode.
#include <string>

#include "app/view/app.h"

namespace braid::view::panels {
namespace {

std::string run_label(const RunRow& r) {
  std::string t = "run " + std::to_string(r.run_id) + ": " + std::string(to_string(r.kind));
  if (!r.backend.empty()) t += " (" + r.backend + ")";
  if (r.schedule_id >= 0) t += " schedule " + std::to_string(r.schedule_id);
  if (!r.label.empty()) t += " " + r.label;
  return t;
}

void picker(App& app, int s, const char* id) {
  const RunRow* cur = nullptr;
  const RunSlot& slot = app.slots[s];
  if (slot.file.empty())
    for (const RunRow& r : app.runs)
      if (r.run_id == slot.run_id) cur = &r;
  ImGui::SetNextItemWidth(240);
  const std::string shown = cur                   ? run_label(*cur)
                            : !slot.title.empty() ? slot.title
                                                  : std::string("(choose a run)");
  if (ImGui::BeginCombo(id, shown.c_str())) {
    for (const RunRow& r : app.runs) {
      bool sel = cur == &r;
      if (ImGui::Selectable(run_label(r).c_str(), sel) && !sel) {
        app.explore.follow = false;  // the user's choice of runs replaces the explorer's
        app_load(app, s, r.run_id);
      }
      if (ImGui::IsItemHovered() && !r.source.empty()) ImGui::SetTooltip("%s", r.source.c_str());
    }
    ImGui::EndCombo();
  }
}

}  // namespace

void run_picker(App& app) {
  picker(app, 0, app.compare ? "A##run" : "run##run");
  ImGui::SameLine();
  bool cmp = app.compare;
  if (ImGui::Checkbox("Compare", &cmp) && app.runs.size() > 0 && app.slots[0].file.empty()) {
    app.compare = cmp;
    if (cmp) {
      // Default: the last run that is not A (a replay or simulation is usually added last).
      int64_t other = app.runs.back().run_id == app.slots[0].run_id && app.runs.size() > 1
                          ? app.runs[app.runs.size() - 2].run_id
                          : app.runs.back().run_id;
      app_load(app, 1, other);  // A's alignment is re-derived once B is in
      show_tab(app, SideTab::Compare);
    } else {
      app_derive(app);
      fit_all(app);
    }
  }
  if (app.compare) {
    ImGui::SameLine();
    picker(app, 1, "B##run");
  }
}

}  // namespace braid::view::panels

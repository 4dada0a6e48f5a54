// The Opportunities tab: the explorer (every finding of the open schedule with a checkbox; a
// change re-runs `braid fuse`'s pipeline and the sim in the background, and the simulated fused
// step shows as run B), "Lift" for a file with a run and no schedule, "Save" as `braid fuse`
// stores; then the opportunities stored in the file, largest predicted saving first, a click
// zooming the timeline to where the operations they name ran.
#include <cinttypes>
#include <cstdio>

#include "app/view/app.h"
#include "trace/format.h"

namespace braid::view::panels {
namespace {

const ImVec4 kAssumption(0.9f, 0.8f, 0.45f, 1);
const char* kProfiles[] = {"h100-nvlink", "h100-pcie", "h100-ib", "a100-nvlink", "cpu-shm"};

std::string ms(Ns ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(ns) * 1e-6);
  return buf;
}

// "Save" or "Lift" while it runs in the background: its progress and a cancel button.
void task_progress(App& app) {
  FileTask& t = app.explore.task;
  if (!t.busy()) return;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s %.0f%%", t.what() == "lift" ? "lifting" : "saving",
                t.fraction() * 100);
  ImGui::ProgressBar(static_cast<float>(t.fraction()), ImVec2(-80, 0), buf);
  ImGui::SameLine();
  if (ImGui::Button("Cancel##task")) t.cancel();
  note_widget(app, "task cancel");
}

void explorer(App& app) {
  ExplorePanel& x = app.explore;
  const bool has_runs = !app.runs.empty();
  bool has_schedules = app.slots[0].extras.has_schedules || !app.slots[0].file.empty();
  if (!has_runs) has_schedules = true;  // opened only because it has schedules
  if (!has_schedules && !x.started) {
    if (!app.slots[0].ready()) return;
    ImGui::TextWrapped(
        "This file has a run and no schedule. Lift the run into a schedule (as `braid lift` "
        "does) to explore rewrites of it.");
    ImGui::BeginDisabled(x.task.busy());
    if (ImGui::Button("Lift")) explore_lift(app);
    ImGui::EndDisabled();
    note_widget(app, "lift");
    task_progress(app);
    return;
  }
  if (!x.started) explore_start(app);  // the tab shown on a file with schedules

  ImGui::TextUnformatted("Explore: choose rewrites");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(130);
  if (ImGui::BeginCombo("profile", x.profile.c_str())) {
    for (const char* p : kProfiles)
      if (ImGui::Selectable(p, x.profile == p) && x.profile != p) {
        x.profile = p;
        explore_start(app);
      }
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("The profile of `braid fuse --profile` and `braid replay --backend sim`");
  const Explorer& e = x.explorer;
  if (e.busy()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "fusing and simulating %.0f%%", e.fraction() * 100);
    ImGui::ProgressBar(static_cast<float>(e.fraction()), ImVec2(-80, 0), buf);
    ImGui::SameLine();
    if (ImGui::Button("Cancel##explore")) x.explorer.cancel();
  }
  if (!e.error().empty()) ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "%s", e.error().c_str());
  if (!e.result()) return;
  const ExploreResult& r = *e.result();
  ImGui::Text("schedule %" PRId64 ", simulated step %s -> %s (%+.1f%%), %.2f s", r.schedule_id,
              ms(r.baseline_step_ns()).c_str(), ms(r.fused_step_ns()).c_str(),
              r.baseline_step_ns() > 0
                  ? 100.0 * static_cast<double>(r.fused_step_ns() - r.baseline_step_ns()) /
                        static_cast<double>(r.baseline_step_ns())
                  : 0.0,
              r.seconds);
  ImGui::BeginDisabled(x.task.busy());
  if (ImGui::Button("Save")) explore_save(app);
  ImGui::EndDisabled();
  note_widget(app, "save");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Store the fused schedule, its passes and the chosen findings as braid fuse "
        "does");
  ImGui::SameLine();
  ImGui::Checkbox("show as runs A/B", &x.follow);
  task_progress(app);
  if (!x.saved.empty()) ImGui::TextWrapped("%s", x.saved.c_str());

  if (!ImGui::BeginTable("explore", 5,
                         ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit |
                             ImGuiTableFlags_Resizable | ImGuiTableFlags_ScrollY,
                         ImVec2(0, ImGui::GetTextLineHeightWithSpacing() * 14)))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("");
  ImGui::TableSetupColumn("status");
  ImGui::TableSetupColumn("pass");
  ImGui::TableSetupColumn("local");
  ImGui::TableSetupColumn("what", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  bool changed = false;
  ImGuiListClipper clip;
  clip.Begin(static_cast<int>(x.findings.size()));
  while (clip.Step())
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      ExploreFinding& f = x.findings[static_cast<size_t>(i)];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushID(i);
      ImGui::BeginDisabled(!f.can_tick());
      if (ImGui::Checkbox("##t", &f.ticked)) changed = true;
      note_widget(app, "finding " + std::to_string(i));
      ImGui::EndDisabled();
      if (!f.can_tick() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
        ImGui::SetTooltip("advice the pass has no rewrite for: not applied");
      else if (f.can_assume && !f.ticked && ImGui::IsItemHovered())
        ImGui::SetTooltip("tick to apply it under its assumption (as braid fuse --assume %s)",
                          f.key.pass.c_str());
      ImGui::PopID();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(f.assumed ? "assumed" : to_string(f.status));
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(f.key.pass.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_duration(static_cast<double>(f.local_saving_ns)).c_str());
      ImGui::TableNextColumn();
      // Advice shows its assumption (what must hold for it to be legal); the rest what it does.
      if (!f.assumption.empty())
        ImGui::TextColored(kAssumption, "%s", f.assumption.c_str());
      else
        ImGui::TextUnformatted(f.summary.c_str());
      if (ImGui::IsItemHovered()) {
        x.selected = i;
        ImGui::SetTooltip("%s%s%s", f.summary.c_str(), f.assumption.empty() ? "" : "\n",
                          f.assumption.c_str());
      }
    }
  ImGui::EndTable();
  // The hovered finding in full, wrapped.
  if (x.selected >= 0 && x.selected < static_cast<int>(x.findings.size())) {
    const ExploreFinding& f = x.findings[static_cast<size_t>(x.selected)];
    ImGui::TextWrapped("%s (%s): %s", f.key.pass.c_str(), to_string(f.status), f.summary.c_str());
    if (!f.assumption.empty()) {
      ImGui::PushStyleColor(ImGuiCol_Text, kAssumption);
      ImGui::TextWrapped("%s", f.assumption.c_str());
      ImGui::PopStyleColor();
    }
  }
  if (changed) x.explorer.choose(x.findings);
}

void stored(App& app) {
  const ViewRun* d = app.run(0);
  if (!d) return;
  const Extras& x = app.slots[0].extras;
  if (!x.error.empty()) ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "%s", x.error.c_str());
  if (x.opportunities.empty()) {
    ImGui::TextWrapped(x.has_schedules ? "No opportunities stored for these schedules."
                                       : "No opportunities yet: run braid fuse on this file.");
    return;
  }
  ImGui::TextWrapped("%zu opportunities in %s; click one to show where it is.",
                     x.opportunities.size(),
                     app.slots[0].file.empty() ? "the file" : "the explorer's result");
  if (!ImGui::BeginTable(
          "opps", 4,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Resizable))
    return;
  ImGui::TableSetupColumn("saving");
  ImGui::TableSetupColumn("pass");
  ImGui::TableSetupColumn("ranks / ops");
  ImGui::TableSetupColumn("detail");
  ImGui::TableHeadersRow();
  for (size_t i = 0; i < x.opportunities.size(); ++i) {
    const OpportunityView& v = x.opportunities[i];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    std::string label =
        format_duration(static_cast<double>(v.o.predicted_saving_ns)) + "##opp" + std::to_string(i);
    if (ImGui::Selectable(label.c_str(), false, ImGuiSelectableFlags_SpanAllColumns)) {
      if (v.t0 >= 0) {
        zoom_to(app, to_axis(app, 0, v.t0), to_axis(app, 0, v.t1));
        if (const std::optional<EventRef> at = d->place(v.colls.front()))
          app.selected = Selection{0, Hit{at->lane, at->row, at->index, 1}};
      } else {
        app.status = "opportunity " + std::to_string(i + 1) +
                     ": its operations have no counterpart in " + d->run_title();
      }
    }
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(v.o.pass.c_str());
    ImGui::TableNextColumn();
    std::string where =
        std::to_string(v.o.ranks.size()) + " ranks, " + std::to_string(v.o.ops.size()) + " ops";
    if (v.t0 < 0) where += " (not in this run)";
    ImGui::TextUnformatted(where.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(short_name(v.o.detail, 200).c_str());
  }
  ImGui::EndTable();
}

}  // namespace

void opportunities(App& app) {
  explorer(app);
  ImGui::Separator();
  if (ImGui::CollapsingHeader("Stored opportunities")) stored(app);
}

// In the toolbar: the explorer's progress, or its step-time change (B - A), while its runs are
// shown.
void explore_toolbar(App& app) {
  const Explorer& e = app.explore.explorer;
  if (e.busy()) {
    ImGui::SameLine();
    char buf[64];
    std::snprintf(buf, sizeof buf, "exploring %.0f%%", e.fraction() * 100);
    ImGui::ProgressBar(static_cast<float>(e.fraction()), ImVec2(160, 0), buf);
  }
  if (!e.result() || app.slots[0].file != e.result()->scratch) return;
  const ExploreResult& r = *e.result();
  const Ns d = r.fused_step_ns() - r.baseline_step_ns();
  ImGui::SameLine();
  ImGui::TextColored(
      d <= 0 ? ImVec4(0.5f, 0.9f, 0.5f, 1) : ImVec4(1, 0.6f, 0.4f, 1),
      "B - A step: %+.3f ms (%+.1f%%, simulated on %s)", static_cast<double>(d) * 1e-6,
      r.baseline_step_ns() > 0
          ? 100.0 * static_cast<double>(d) / static_cast<double>(r.baseline_step_ns())
          : 0.0,
      r.profile.c_str());
}

}  // namespace braid::view::panels

// Compare mode's diff summary: step time, exposed communication and per-operation totals of
// run B against run A, and the fused operations of B with the operations of A they replace.
#include <cinttypes>
#include <cmath>
#include <optional>

#include "app/view/app.h"
#include "trace/format.h"

namespace braid::view::panels {
namespace {

std::string value(double v, const std::string& unit) {
  if (unit == "ns") return format_duration(v);
  if (unit == "bytes") return format_bytes(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

}  // namespace

void compare(App& app) {
  if (!app.compare || !app.all_ready()) {
    ImGui::TextWrapped("Tick Compare and choose run B to compare two runs.");
    return;
  }
  ImGui::TextWrapped("A: %s", app.slots[0].data->run_title().c_str());
  ImGui::TextWrapped("B: %s", app.slots[1].data->run_title().c_str());
  ImGui::TextDisabled("Both are aligned on the start of their first step.");
  if (ImGui::BeginTable(
          "diff", 4,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Borders)) {
    for (const char* h : {"", "A", "B", "B - A"}) ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const DiffRow& r : app.diff) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.name.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(value(r.a, r.unit).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(value(r.b, r.unit).c_str());
      ImGui::TableNextColumn();
      double dlt = r.delta();
      // Less time is better; counts and bytes are neutral.
      ImVec4 c = r.unit != "ns" || dlt == 0 ? ImVec4(0.8f, 0.8f, 0.8f, 1)
                 : dlt < 0                  ? ImVec4(0.4f, 0.9f, 0.4f, 1)
                                            : ImVec4(1, 0.45f, 0.4f, 1);
      std::string txt = (dlt > 0 ? "+" : dlt < 0 ? "-" : "") + value(std::fabs(dlt), r.unit);
      if (r.a != 0 && dlt != 0) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " (%+.0f%%)", r.percent());
        txt += buf;
      }
      ImGui::TextColored(c, "%s", txt.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::Separator();
  if (!app.links_error.empty())
    ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "%s", app.links_error.c_str());
  if (app.links.empty()) {
    ImGui::TextWrapped(app.slots[1].data->run.schedule_id < 0
                           ? "B was not produced from a schedule: no fused operations to link."
                           : "B's schedule replaces no operations of its parent.");
    return;
  }
  std::vector<FusedOpSummary> ops = summarize_links(app.links);
  ImGui::TextWrapped(
      "%zu fused operations; in each step, a line joins each to what it replaces in the same "
      "step of A (click one to zoom to its first step):",
      ops.size());
  if (!ImGui::BeginTable(
          "fused", 3,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Borders))
    return;
  for (const char* h : {"fused operation", "replaces", "steps x ranks"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (size_t i = 0; i < ops.size(); ++i) {
    const FusedOpSummary& o = ops[i];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    std::string label = elide_middle(o.what, 36) + "##op" + std::to_string(i);
    if (ImGui::Selectable(label.c_str(), app.selected_link == static_cast<int>(i),
                          ImGuiSelectableFlags_SpanAllColumns)) {
      app.selected_link = static_cast<int>(i);
      // Zoom to its first step: B's instances and A's replaced ones, on every rank.
      Ns t0 = INT64_MAX, t1 = INT64_MIN;
      std::optional<Selection> first;
      for (size_t li : o.links) {
        const FusedLink& l = app.links[li];
        if (l.steps.empty()) continue;
        for (int32_t f : l.steps[0].fused) {
          const CollRec& c = app.slots[1].data->colls[f];
          t0 = std::min(t0, to_axis(app, 1, c.c.start));
          t1 = std::max(t1, to_axis(app, 1, c.c.end));
          if (!first)
            if (const std::optional<EventRef> at = app.slots[1].data->place(f))
              first = Selection{1, Hit{at->lane, at->row, at->index, 1}};
        }
        for (int32_t r : l.steps[0].replaced) {
          const CollRec& c = app.slots[0].data->colls[r];
          t0 = std::min(t0, to_axis(app, 0, c.c.start));
          t1 = std::max(t1, to_axis(app, 0, c.c.end));
        }
      }
      if (t0 <= t1) zoom_to(app, t0, t1);
      if (first) app.selected = first;
    }
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::Text("%s: on ranks", o.what.c_str());
      for (int32_t r : o.ranks) {
        ImGui::SameLine();
        ImGui::Text("%d", r);
      }
      ImGui::EndTooltip();
    }
    ImGui::TableNextColumn();
    ImGui::Text("%zu ops", o.replaces);
    ImGui::TableNextColumn();
    ImGui::Text("%zu x %zu", o.steps, o.ranks.size());
  }
  ImGui::EndTable();
}

}  // namespace braid::view::panels

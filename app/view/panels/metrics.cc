// Per-rank metrics: computed from the events (compute, communication, exposed communication,
// idle), and the analysis stage's tables when `braid analyze` has written them.
#include <algorithm>
#include <cinttypes>

#include "app/view/app.h"
#include "app/view/panels/analysis_table.h"
#include "trace/summary.h"

namespace braid::view::panels {

void show_analysis_table(const AnalysisTable& t) {
  // Small tables open, long ones (per-collective rows) closed until asked for.
  if (!ImGui::CollapsingHeader(t.name.c_str(),
                               t.rows.size() <= 64 ? ImGuiTreeNodeFlags_DefaultOpen : 0))
    return;
  int n = static_cast<int>(std::min<size_t>(t.columns.size(), 63));
  if (n == 0) return;
  // A scrolling table fills the space it is given: give it its rows' height (at most 16 rows
  // shown, the rest scroll), so the tables below stay visible.
  float rows_h = static_cast<float>(std::min<size_t>(t.rows.size(), 16) + 2) *
                 ImGui::GetTextLineHeightWithSpacing();
  if (ImGui::BeginTable(t.name.c_str(), n,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollX | ImGuiTableFlags_ScrollY |
                            ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Borders,
                        ImVec2(0, rows_h))) {
    for (int c = 0; c < n; ++c) ImGui::TableSetupColumn(t.columns[c].c_str());
    ImGui::TableHeadersRow();
    ImGuiListClipper clip;
    clip.Begin(static_cast<int>(t.rows.size()));
    while (clip.Step())
      for (int r = clip.DisplayStart; r < clip.DisplayEnd; ++r) {
        ImGui::TableNextRow();
        for (int c = 0; c < n; ++c) {
          ImGui::TableNextColumn();
          ImGui::TextUnformatted(short_name(t.rows[r][c], 60).c_str());
        }
      }
    ImGui::EndTable();
  }
  if (t.truncated) ImGui::TextDisabled("(first %zu rows)", t.rows.size());
}

bool no_analysis_hint(const std::vector<const AnalysisTable*>& tables) {
  if (!tables.empty()) return false;
  ImGui::TextColored(ImVec4(0.9f, 0.8f, 0.4f, 1), "No analysis yet — run braid analyze.");
  return true;
}

void metrics(App& app) {
  for (int s = 0; s < 2; ++s) {
    const RunData* d = app.run(s);
    if (!d) continue;
    const RunMetrics& m = app.slots[s].metrics;
    ImGui::PushID(s);
    ImGui::Text("%s", d->run_title().c_str());
    ImGui::Text("step time %s (%s%" PRId64 " steps)",
                format_duration(static_cast<double>(m.step_time)).c_str(),
                m.steps_from_trace ? "" : "no steps in the trace: whole run, ", m.steps);
    if (ImGui::BeginTable(
            "ranks", 6,
            ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Borders)) {
      for (const char* h : {"rank", "compute", "comm", "exposed", "idle", "kernels"})
        ImGui::TableSetupColumn(h);
      ImGui::TableHeadersRow();
      for (const RankMetrics& r : m.ranks) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::Text("%d", r.rank);
        for (Ns v : {r.compute, r.comm, r.exposed_comm, r.idle}) {
          ImGui::TableNextColumn();
          ImGui::TextUnformatted(format_duration(static_cast<double>(v)).c_str());
        }
        ImGui::TableNextColumn();
        ImGui::Text("%" PRId64, r.kernels);
      }
      ImGui::EndTable();
    }
    // Every analysis table of the run as stored, except the full JSON report, the per-member
    // rows (Details shows a collective's members) and the communicators (their own tab).
    std::vector<const AnalysisTable*> tables;
    for (const AnalysisTable& t : app.slots[s].extras.analysis)
      if (t.name != "analysis_reports" && t.name != "analysis_collective_members" &&
          t.name != "analysis_communicators")
        tables.push_back(&t);
    if (!no_analysis_hint(tables))
      for (const AnalysisTable* t : tables) show_analysis_table(*t);
    ImGui::Separator();
    ImGui::PopID();
  }
}

}  // namespace braid::view::panels

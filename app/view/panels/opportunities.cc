// Opportunities found by the fusion passes, largest predicted saving first; a click zooms the
// timeline to where the operations they name ran.
#include <cinttypes>

#include "app/view/app.h"

namespace braid::view::panels {

void opportunities(App& app) {
  const RunData* d = app.run(0);
  if (!d) return;
  const Extras& x = app.slots[0].extras;
  if (!x.error.empty()) ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "%s", x.error.c_str());
  if (x.opportunities.empty()) {
    ImGui::TextWrapped(x.has_schedules ? "No opportunities stored for these schedules."
                                       : "No opportunities yet: run braid fuse on this file.");
    return;
  }
  ImGui::TextWrapped("%zu opportunities; click one to show where it is.", x.opportunities.size());
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
        const CollRec& c = d->colls[v.colls.front()];
        if (c.lane >= 0) app.selected = Selection{0, Hit{c.lane, c.row, c.index, 1}};
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

}  // namespace braid::view::panels

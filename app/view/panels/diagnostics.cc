// Data-quality diagnostics of each run shown (what the importers skipped or fixed).
#include "trace/diagnostics.h"

#include <cinttypes>

#include "app/view/app.h"

namespace braid::view::panels {

void diagnostics(App& app) {
  for (int s = 0; s < 2; ++s) {
    const ViewRun* d = app.run(s);
    if (!d) continue;
    ImGui::PushID(s);
    ImGui::Text("%s", d->run_title().c_str());
    if (d->diagnostics.empty()) {
      ImGui::TextDisabled("no diagnostics");
    } else if (ImGui::BeginTable("diag", 4,
                                 ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit |
                                     ImGuiTableFlags_Borders)) {
      for (const char* h : {"severity", "code", "count"})
        ImGui::TableSetupColumn(h, ImGuiTableColumnFlags_WidthFixed);
      ImGui::TableSetupColumn("detail", ImGuiTableColumnFlags_WidthStretch);
      ImGui::TableHeadersRow();
      for (const Diagnostic& g : d->diagnostics) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImVec4 c = g.severity == Severity::Error     ? ImVec4(1, 0.4f, 0.4f, 1)
                   : g.severity == Severity::Warning ? ImVec4(1, 0.8f, 0.3f, 1)
                                                     : ImVec4(0.7f, 0.7f, 0.7f, 1);
        ImGui::TextColored(c, "%s", std::string(to_string(g.severity)).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(
            (g.code + (g.rank >= 0 ? " (rank " + std::to_string(g.rank) + ")" : "")).c_str());
        if (const diag::Info* info = diag::find(g.code); info && ImGui::IsItemHovered())
          ImGui::SetTooltip("%.*s", static_cast<int>(info->description.size()),
                            info->description.data());
        ImGui::TableNextColumn();
        ImGui::Text("%" PRId64, g.count);
        ImGui::TableNextColumn();
        ImGui::TextWrapped("%s", g.detail.c_str());
      }
      ImGui::EndTable();
    }
    ImGui::Separator();
    ImGui::PopID();
  }
}

}  // namespace braid::view::panels

// Statistics of the selected time range: events per category and their time, collectives and
// bytes, GPU busy time per rank, for each run shown.
#include <cinttypes>

#include "app/view/app.h"
#include "trace/format.h"

namespace braid::view::panels {

void update_range_stats(App& app) {
  for (int s = 0; s < 2; ++s) {
    app.range_stats[s].reset();
    if (const ViewRun* d = app.run(s))
      app.range_stats[s] =
          range_stats(*d, app.range_t0 + app.slots[s].shift, app.range_t1 + app.slots[s].shift);
  }
}

void range(App& app) {
  if (!app.range_active || !app.range_stats[0]) {
    ImGui::TextWrapped("Shift+drag (or right-drag) on the timeline to select a time range.");
    return;
  }
  ImGui::Text("range %s",
              format_duration(static_cast<double>(app.range_t1 - app.range_t0)).c_str());
  if (ImGui::Button("Zoom to range")) zoom_to(app, app.range_t0, app.range_t1);
  ImGui::SameLine();
  if (ImGui::Button("Clear")) app.range_active = false;
  for (int s = 0; s < 2; ++s) {
    if (!app.range_stats[s]) continue;
    const RangeStats& r = *app.range_stats[s];
    ImGui::Separator();
    ImGui::Text("%s", app.slots[s].data->run_title().c_str());
    ImGui::Text("%" PRId64 " events, %" PRId64 " collectives (%s)", r.events, r.collectives,
                format_bytes(r.collective_bytes).c_str());
    std::string id = "cat" + std::to_string(s);
    if (ImGui::BeginTable(id.c_str(), 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
      ImGui::TableSetupColumn("category");
      ImGui::TableSetupColumn("count");
      ImGui::TableSetupColumn("time");
      ImGui::TableHeadersRow();
      for (auto& [name, c] : r.by_category) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(name.c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%" PRId64, c.count);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_duration(static_cast<double>(c.time)).c_str());
      }
      ImGui::EndTable();
    }
    double len = static_cast<double>(std::max<Ns>(1, r.t1 - r.t0));
    for (auto& [rank, busy] : r.gpu_busy)
      ImGui::Text("rank %d: GPU busy %s (%.0f%%)", rank,
                  format_duration(static_cast<double>(busy)).c_str(),
                  100.0 * static_cast<double>(busy) / len);
  }
}

}  // namespace braid::view::panels

// Communicators: members, collectives carried, and the parallel dimension (TP, DP, PP, ...)
// the analysis inferred, from its tables that have a `comm` column.
#include <cinttypes>
#include <map>

#include "app/view/app.h"
#include "app/view/panels/analysis_table.h"
#include "trace/summary.h"

namespace braid::view::panels {

void communicators(App& app) {
  for (int s = 0; s < 2; ++s) {
    const RunData* d = app.run(s);
    if (!d) continue;
    ImGui::PushID(s);
    ImGui::Text("%s", d->run_title().c_str());
    std::map<std::string, std::pair<int64_t, int64_t>> per_comm;  // count, bytes
    for (const CollRec& r : d->colls) {
      auto& v = per_comm[d->str(r.c.comm)];
      ++v.first;
      v.second += std::max<int64_t>(0, r.c.bytes);
    }
    if (ImGui::BeginTable(
            "comms", 5,
            ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Borders)) {
      for (const char* h : {"comm", "ranks", "label", "collectives", "bytes"})
        ImGui::TableSetupColumn(h);
      ImGui::TableHeadersRow();
      for (const Communicator& c : d->communicators) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(c.comm.c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(c.ranks.empty() ? std::to_string(c.nranks).c_str()
                                               : short_name(c.ranks, 40).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(c.label.c_str());
        auto it = per_comm.find(c.comm);
        ImGui::TableNextColumn();
        ImGui::Text("%" PRId64, it == per_comm.end() ? 0 : it->second.first);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(it == per_comm.end() ? 0 : it->second.second).c_str());
      }
      ImGui::EndTable();
    }
    if (d->communicators.empty()) ImGui::TextDisabled("no communicators recorded");
    std::vector<const AnalysisTable*> tables;
    for (const AnalysisTable& t : app.slots[s].extras.analysis)
      for (const std::string& c : t.columns)
        if (c == "comm" || c == "comm_id") {
          tables.push_back(&t);
          break;
        }
    ImGui::TextDisabled("Parallel dimension of each communicator:");
    if (!no_analysis_hint(tables))
      for (const AnalysisTable* t : tables) show_analysis_table(*t);
    ImGui::Separator();
    ImGui::PopID();
  }
}

}  // namespace braid::view::panels

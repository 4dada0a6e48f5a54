// Communicators: members, collectives carried, and the parallel dimension (TP, DP, PP, ...)
// the analysis inferred, from its tables that have a `comm` column.
#include <cinttypes>
#include <map>

#include "app/view/app.h"
#include "trace/format.h"

namespace braid::view::panels {

void communicators(App& app) {
  for (int s = 0; s < 2; ++s) {
    const ViewRun* d = app.run(s);
    if (!d) continue;
    ImGui::PushID(s);
    ImGui::Text("%s", d->run_title().c_str());
    std::map<std::string, std::pair<int64_t, int64_t>> per_comm;  // count, bytes
    for (const CollRec& r : d->colls) {
      auto& v = per_comm[d->str(r.c.comm)];
      ++v.first;
      v.second += std::max<int64_t>(0, r.c.bytes);
    }
    const Extras& x = app.slots[s].extras;
    if (ImGui::BeginTable(
            "comms", 6,
            ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Borders)) {
      for (const char* h : {"comm", "parallel dim", "ranks", "label", "collectives", "bytes"})
        ImGui::TableSetupColumn(h);
      ImGui::TableHeadersRow();
      for (const Communicator& c : d->communicators) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(c.comm.c_str());
        ImGui::TableNextColumn();
        auto dim = x.comm_dim.find(c.comm);
        ImGui::TextUnformatted(dim == x.comm_dim.end() ? "-" : dim->second.c_str());
        if (dim != x.comm_dim.end() && ImGui::IsItemHovered())
          ImGui::SetTooltip("%s", x.comm_evidence.at(c.comm).c_str());
        ImGui::TableNextColumn();
        text_elided(c.ranks.empty() ? std::to_string(c.nranks) : c.ranks,
                    ImGui::CalcTextSize("M").x * 24);
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
    if (x.comm_dim.empty())
      ImGui::TextColored(
          ImVec4(0.9f, 0.8f, 0.4f, 1),
          "No analysis yet — run braid analyze to infer each communicator's parallel dimension.");
    else
      ImGui::TextDisabled("parallel dimension: braid analyze (hover it for the evidence)");
    ImGui::Separator();
    ImGui::PopID();
  }
}

}  // namespace braid::view::panels

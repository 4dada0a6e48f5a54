// Search by name: a box in the toolbar, the results in a side tab; Enter jumps to the next.
#include "app/view/app.h"
#include "app/view/core/time_axis.h"

namespace braid::view::panels {
namespace {

void jump(App& app, int i) {
  if (app.search_result.hits.empty()) return;
  int n = static_cast<int>(app.search_result.hits.size());
  app.search_index = ((i % n) + n) % n;
  select_event(app, app.search_slot, app.search_result.hits[app.search_index], true);
  show_tab(app, SideTab::Search);
}

}  // namespace

void search_box(App& app) {
  ImGui::SetNextItemWidth(220);
  bool enter =
      ImGui::InputTextWithHint("##search", "search names (Enter: next)", app.search_text,
                               sizeof app.search_text, ImGuiInputTextFlags_EnterReturnsTrue);
  if (!enter || !app.all_ready()) return;
  static std::string last;
  if (last != app.search_text || app.search_result.hits.empty()) {
    last = app.search_text;
    app.search_slot = 0;
    app.search_result = search_events(*app.slots[0].data, app.search_text);
    if (app.search_result.hits.empty() && app.compare) {
      app.search_slot = 1;
      app.search_result = search_events(*app.slots[1].data, app.search_text);
    }
    app.search_index = -1;
    show_tab(app, SideTab::Search);
  }
  jump(app, app.search_index + 1);
}

void search_results(App& app) {
  const ViewRun* d = app.run(app.search_slot);
  if (!d || app.search_text[0] == 0) {
    ImGui::TextWrapped("Type a name in the search box and press Enter.");
    return;
  }
  ImGui::Text("%lld matches%s", static_cast<long long>(app.search_result.total),
              app.search_result.total > static_cast<int64_t>(app.search_result.hits.size())
                  ? " (first 1000 listed)"
                  : "");
  if (ImGui::Button("previous")) jump(app, app.search_index - 1);
  ImGui::SameLine();
  if (ImGui::Button("next")) jump(app, app.search_index + 1);
  ImGuiListClipper clip;
  clip.Begin(static_cast<int>(app.search_result.hits.size()));
  while (clip.Step())
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      const Hit& h = app.search_result.hits[i];
      const Event e = d->event(h.lane, h.row, h.index);
      std::string label = "r" + std::to_string(d->lanes[h.lane].rank) + " " +
                          format_duration(static_cast<double>(e.start - d->start)) + "  " +
                          short_name(event_title(*d, e), 60) + "##" + std::to_string(i);
      if (ImGui::Selectable(label.c_str(), i == app.search_index)) jump(app, i);
    }
}

}  // namespace braid::view::panels

// Details of the selected event: what it is, where, when, and for a collective its metadata,
// bus bandwidth, wait versus transfer and its instances on the other ranks.
#include <cinttypes>

#include "app/view/app.h"
#include "app/view/core/colors.h"
#include "trace/format.h"

namespace braid::view::panels {
namespace {

// One key and its value (recorded as widgets "details key K" and "details value K" for the UI
// tests: the value column must fit its content, never one word per line).
void row(App& app, const char* k, const std::string& v) {
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  ImGui::TextDisabled("%s", k);
  note_widget(app, std::string("details key ") + k);
  ImGui::TableNextColumn();
  text_elided(v);
  note_widget(app, std::string("details value ") + k);
}

// A key/value table: the keys as wide as the widest, the values the rest of the panel.
bool begin_kv(const char* id) {
  if (!ImGui::BeginTable(id, 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit))
    return false;
  ImGui::TableSetupColumn("key", ImGuiTableColumnFlags_WidthFixed);
  ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch);
  return true;
}

std::string dur(Ns ns) { return format_duration(static_cast<double>(ns)); }

}  // namespace

void details(App& app) {
  if (!app.selected || !app.run(app.selected->slot)) {
    ImGui::TextWrapped(
        "Click an event to see its details. Shift+drag (or right-drag) selects a time range.");
    return;
  }
  const Selection sel = *app.selected;
  const ViewRun& d = *app.slots[sel.slot].data;
  const Lane& lane = d.lanes[sel.hit.lane];
  const Event e = d.event(sel.hit.lane, sel.hit.row, sel.hit.index);
  if (sel.hit.count > 1) {
    const Event last = d.event(sel.hit.lane, sel.hit.row, sel.hit.index + sel.hit.count - 1);
    ImGui::Text("%" PRId64 " folded events on rank %d, %s", sel.hit.count, lane.rank,
                lane.label.c_str());
    if (ImGui::Button("Zoom to them"))
      zoom_to(app, to_axis(app, sel.slot, e.start), to_axis(app, sel.slot, last.end));
    return;
  }
  ImGui::TextWrapped("%s",
                     d.str(e.name).empty() ? event_title(d, e).c_str() : d.str(e.name).c_str());
  if (ImGui::Button("Zoom to it")) select_event(app, sel.slot, sel.hit, true);
  if (!begin_kv("details")) return;
  row(app, "run", d.run_title());
  row(app, "rank / lane", std::to_string(lane.rank) + " / " + lane.label);
  if (e.kind() == EventKind::Step) row(app, "step", d.str(e.name));
  row(app, "category", category_name(e.category));
  row(app, "start", dur(e.start - d.start) + " after the run's start");
  row(app, "duration", dur(e.end - e.start));
  if (e.kind() == EventKind::Memcpy) row(app, "memcpy", std::string(to_string(e.mem_kind())));
  if (e.coll >= 0) {
    const CollRec& r = d.colls[e.coll];
    const Collective& c = r.c;
    CollTiming t = coll_timing(d, e.coll);
    row(app, "collective", std::string(to_string(c.op)));
    std::string comm = d.str(c.comm);
    for (const Communicator& cm : d.communicators)
      if (cm.comm == comm && !cm.label.empty()) comm += " (" + cm.label + ")";
    row(app, "communicator", comm);
    if (c.seq >= 0) row(app, "seq", std::to_string(c.seq));
    if (c.bytes >= 0) row(app, "bytes", format_bytes(c.bytes));
    if (c.dtype)
      row(app, "dtype / count",
          d.str(c.dtype) + " / " + std::to_string(c.in_count) + " in, " +
              std::to_string(c.out_count) + " out");
    if (c.algo || c.proto || c.channels >= 0)
      row(app, "algorithm",
          d.str(c.algo) + " " + d.str(c.proto) +
              (c.channels >= 0 ? ", " + std::to_string(c.channels) + " channels" : ""));
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.2f GB/s bus, %.2f GB/s alg (%d ranks)", t.busbw_gbs,
                  t.algbw_gbs, t.nranks);
    if (t.busbw_gbs > 0) row(app, "bandwidth", buf);
    row(app, "wait",
        dur(t.wait) + (t.late_rank >= 0
                           ? " (last to arrive: rank " + std::to_string(t.late_rank) + ")"
                           : ""));
    row(app, "transfer", dur(t.transfer));
    if (c.enqueue >= 0) row(app, "launch delay", dur(c.start - c.enqueue));
    ImGui::EndTable();
    if (r.match >= 0) {
      ImGui::Separator();
      ImGui::Text("Instances on %zu ranks:", d.matches[r.match].members.size());
      for (int32_t m : d.matches[r.match].members) {
        const CollRec& o = d.colls[m];
        std::string label = "rank " + std::to_string(o.c.rank) + ": start " +
                            dur(o.c.start - d.start) + ", " + dur(o.c.end - o.c.start) + "##m" +
                            std::to_string(m);
        if (ImGui::Selectable(label.c_str(), m == e.coll))
          if (const std::optional<EventRef> at = d.place(m))
            select_event(app, sel.slot, Hit{at->lane, at->row, at->index, 1}, false);
      }
    }
    return;
  }
  ImGui::EndTable();
}

}  // namespace braid::view::panels

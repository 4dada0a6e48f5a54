#include "app/view/app.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "trace/error.h"
#include "trace/summary.h"

namespace braid::view {

bool App::loading() const {
  for (int s = 0; s < 2; ++s)
    if (slot_active(s) && slots[s].load) return true;
  return false;
}

double App::load_fraction() const {
  double f = 0;
  int n = 0;
  for (int s = 0; s < 2; ++s)
    if (slot_active(s)) {
      f += slots[s].load ? slots[s].load->fraction() : 1.0;
      ++n;
    }
  return n ? f / n : 1.0;
}

void app_load(App& app, int s, int64_t run_id) {
  RunSlot& slot = app.slots[s];
  slot.load.reset();  // joins a load in flight before its storage is reused
  slot.run_id = run_id;
  slot.data.reset();
  slot.error.clear();
  slot.collapsed.clear();
  app.selected.reset();
  app.hovered.reset();
  app.range_active = false;
  app.range_stats[0].reset();
  app.range_stats[1].reset();
  app.search_result = {};
  app.search_index = -1;
  app.links.clear();
  app.selected_link = -1;
  app.diff.clear();
  app.fit_pending = true;
  RunSlot* p = &slot;
  slot.load = std::make_unique<BackgroundLoad>(app.path, run_id, [p](const RunData& d) {
    p->pending_metrics = run_metrics(d);
    p->pending_extras = load_extras(d);
  });
}

void app_open(App& app, const std::string& path, int64_t run_a, int64_t run_b) {
  TraceReader reader(path);  // fails here, with the file named, when it is not a .braid
  app.path = path;
  app.runs = reader.runs();
  if (app.runs.empty()) throw Error(ErrorCode::Empty, path + ": the file has no runs");
  auto known = [&](int64_t id) {
    for (const RunRow& r : app.runs)
      if (r.run_id == id) return true;
    return false;
  };
  if (run_a < 0) run_a = app.runs.front().run_id;
  for (int64_t id : {run_a, run_b})
    if (id >= 0 && !known(id)) {
      std::string ids;
      for (const RunRow& r : app.runs) ids += (ids.empty() ? "" : ", ") + std::to_string(r.run_id);
      throw Error(ErrorCode::NotFound,
                  path + ": no run " + std::to_string(id) + " (runs: " + ids + ")");
    }
  app.compare = run_b >= 0;
  app_load(app, 0, run_a);
  if (app.compare) {
    app_load(app, 1, run_b);
    show_tab(app, SideTab::Compare);
  }
}

void app_derive(App& app) {
  for (int s = 0; s < 2; ++s) {
    RunSlot& slot = app.slots[s];
    if (!app.slot_active(s) || !slot.data) continue;
    slot.collapsed.resize(slot.data->groups.size(), 0);
    slot.layout = layout_run(*slot.data, slot.collapsed, app.layout_opt);
    slot.shift = app.compare ? step_origin(*slot.data) : 0;
  }
  if (!app.all_ready()) return;
  app.axis.set_origin(app.compare ? 0 : app.slots[0].data->start);
  if (app.compare) {
    app.diff = diff_runs(app.slots[0].metrics, app.slots[1].metrics);
    try {
      app.links = fused_links(*app.slots[0].data, *app.slots[1].data);
      app.links_error.clear();
    } catch (const std::exception& e) {
      app.links.clear();
      app.links_error = e.what();
    }
  }
}

bool app_poll(App& app) {
  bool changed = false;
  for (int s = 0; s < 2; ++s) {
    RunSlot& slot = app.slots[s];
    if (!slot.load || !slot.load->finished()) continue;
    slot.data = slot.load->result();
    slot.error = slot.load->error();
    if (slot.data) {
      slot.metrics = std::move(slot.pending_metrics);
      slot.extras = std::move(slot.pending_extras);
    }
    slot.load.reset();
    changed = true;
  }
  if (changed) {
    app_derive(app);
    if (app.all_ready() && app.fit_pending) {
      fit_all(app);
      app.fit_pending = false;
    }
    for (int s = 0; s < 2; ++s)
      if (app.slot_active(s) && !app.slots[s].error.empty()) app.status = app.slots[s].error;
  }
  return changed;
}

void app_wait(App& app) {
  while (app.loading()) {
    app_poll(app);
    if (app.loading()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  app_poll(app);
}

void relayout(App& app, int s) {
  RunSlot& slot = app.slots[s];
  if (slot.data) slot.layout = layout_run(*slot.data, slot.collapsed, app.layout_opt);
}

void fit_all(App& app) {
  Ns lo = INT64_MAX, hi = INT64_MIN;
  for (int s = 0; s < 2; ++s)
    if (const RunData* d = app.run(s)) {
      lo = std::min(lo, d->start - app.slots[s].shift);
      hi = std::max(hi, d->end - app.slots[s].shift);
    }
  if (lo <= hi) app.axis.fit(lo, hi);
}

void zoom_to(App& app, Ns t0, Ns t1) {
  if (t1 <= t0) t1 = t0 + 1;
  Ns pad = std::max<Ns>((t1 - t0) / 10, 1);
  app.axis.set_window(t0 - pad, t1 + pad);
}

void select_event(App& app, int slot, const Hit& hit, bool zoom) {
  app.selected = Selection{slot, hit};
  show_tab(app, SideTab::Details);
  if (!zoom) return;
  const RunData* d = app.run(slot);
  if (!d) return;
  const Event& e = d->event(hit.lane, hit.row, hit.index);
  Ns t0 = e.start, t1 = e.end;
  if (e.coll >= 0 && d->colls[e.coll].match >= 0)
    for (int32_t m : d->matches[d->colls[e.coll].match].members) {
      t0 = std::min(t0, d->colls[m].c.start);
      t1 = std::max(t1, d->colls[m].c.end);
    }
  zoom_to(app, to_axis(app, slot, t0), to_axis(app, slot, t1));
}

void show_tab(App& app, SideTab tab) {
  app.tab = tab;
  app.tab_requested = true;
}

std::string short_name(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  if (max_chars <= 2) return s.substr(0, max_chars);
  return s.substr(0, max_chars - 2) + "..";
}

std::string elide_middle(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  if (max_chars <= 5) return s.substr(0, max_chars);
  size_t keep = max_chars - 3, head = (keep + 1) / 2;
  return s.substr(0, head) + "..." + s.substr(s.size() - (keep - head));
}

void text_elided(const std::string& s, float max_w) {
  if (max_w <= 0) max_w = ImGui::GetContentRegionAvail().x;
  if (ImGui::CalcTextSize(s.c_str()).x <= max_w) {
    ImGui::TextUnformatted(s.c_str());
    return;
  }
  // The longest middle-elided form that fits (text widths grow with the kept characters).
  size_t lo = 0, hi = s.size();
  while (lo < hi) {
    size_t mid = (lo + hi + 1) / 2;
    if (ImGui::CalcTextSize(elide_middle(s, mid).c_str()).x <= max_w)
      lo = mid;
    else
      hi = mid - 1;
  }
  ImGui::TextUnformatted(elide_middle(s, std::max<size_t>(lo, 6)).c_str());
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 50);
    ImGui::TextUnformatted(s.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
}

std::string event_title(const RunData& d, const Event& e) {
  if (e.coll >= 0) {
    const Collective& c = d.colls[e.coll].c;
    std::string t(to_string(c.op));
    if (c.bytes >= 0) t += " " + format_bytes(c.bytes);
    return t;
  }
  const std::string& n = d.str(e.name);
  if (!n.empty()) return n;
  if (e.kind == EventKind::Memcpy) return std::string(to_string(static_cast<MemKind>(e.reserved)));
  return "(unnamed)";
}

}  // namespace braid::view

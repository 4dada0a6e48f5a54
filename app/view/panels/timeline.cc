// The timeline: every rank and stream of the run (two runs stacked in compare mode) on one
// time axis, with the ruler, level of detail, labels, flow lines between the instances of a
// collective, hover tooltips, selection, range selection and navigation by mouse.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "app/view/app.h"
#include "app/view/core/colors.h"
#include "trace/format.h"

namespace braid::view {
namespace {

constexpr float kLabelWidth = 170.f;
constexpr float kRulerHeight = 22.f;
constexpr float kSectionHeader = 20.f;
constexpr float kSectionGap = 8.f;

ImU32 col(Rgb c, int a = 255) { return IM_COL32(c.r, c.g, c.b, a); }
ImU32 blend(Rgb a, Rgb b, float t) {
  auto mix = [&](uint8_t x, uint8_t y) { return static_cast<int>(x + (y - x) * t); };
  return IM_COL32(mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b), 255);
}

struct Point {
  float x, y;
  int32_t rank;
};

// Where a collective instance is drawn (screen), if its lane is visible.
struct SectionPlace {
  float top = 0;              // screen y of the section's lanes (layout y = 0)
  std::vector<int> lane_box;  // lane -> index into layout.lanes, -1 when collapsed
};

std::optional<Point> place_of(const App& app, int slot, const SectionPlace& sp, int32_t ci,
                              float axis_x0, const LayoutOptions& opt) {
  const ViewRun& d = *app.slots[slot].data;
  const CollRec& r = d.colls[ci];
  const std::optional<EventRef> at = d.place(ci);
  if (!at || sp.lane_box[at->lane] < 0) return std::nullopt;
  const LaneBox& b = app.slots[slot].layout.lanes[sp.lane_box[at->lane]];
  float y = sp.top + b.y0 + (static_cast<float>(at->row) + 0.5f) * opt.row_h;
  float x = axis_x0 + app.axis.x_of(to_axis(app, slot, r.c.start));
  return Point{x, y, r.c.rank};
}

void tooltip(const App& app, int slot, const Hit& h) {
  const ViewRun& d = *app.slots[slot].data;
  ImGui::BeginTooltip();
  const Event e = d.event(h.lane, h.row, h.index);
  if (h.count > 1) {
    const Event last = d.event(h.lane, h.row, h.index + h.count - 1);
    ImGui::Text("%lld events (zoom in to see them)", static_cast<long long>(h.count));
    ImGui::Text("mostly %s, span %s", category_name(h.category).c_str(),
                format_duration(static_cast<double>(last.end - e.start)).c_str());
    ImGui::TextDisabled("from %s", short_name(event_title(d, e), 60).c_str());
    ImGui::EndTooltip();
    return;
  }
  ImGui::TextUnformatted(
      short_name(d.str(e.name).empty() ? event_title(d, e) : d.str(e.name), 90).c_str());
  ImGui::Text("duration %s", format_duration(static_cast<double>(e.end - e.start)).c_str());
  if (e.coll >= 0) {
    const Collective& c = d.colls[e.coll].c;
    CollTiming t = coll_timing(d, e.coll);
    ImGui::Text("%s on %s", std::string(to_string(c.op)).c_str(), d.str(c.comm).c_str());
    if (c.bytes >= 0) ImGui::Text("bytes %s", format_bytes(c.bytes).c_str());
    if (c.algo || c.proto)
      ImGui::Text("algorithm %s / %s", d.str(c.algo).c_str(), d.str(c.proto).c_str());
    if (t.busbw_gbs > 0)
      ImGui::Text("bus bandwidth %.2f GB/s (algbw %.2f GB/s, %d ranks)", t.busbw_gbs, t.algbw_gbs,
                  t.nranks);
    ImGui::Text("wait %s, transfer %s", format_duration(static_cast<double>(t.wait)).c_str(),
                format_duration(static_cast<double>(t.transfer)).c_str());
  } else if (e.kind() == EventKind::Memcpy) {
    ImGui::Text("memcpy %s", std::string(to_string(e.mem_kind())).c_str());
  }
  ImGui::TextDisabled("%s, rank %d", category_name(e.category).c_str(), d.lanes[h.lane].rank);
  ImGui::EndTooltip();
}

void draw_ruler(App& app, ImDrawList* dl, ImVec2 p0, float axis_x0, float axis_w) {
  ImU32 line = IM_COL32(150, 150, 160, 255);
  dl->AddRectFilled(p0, ImVec2(axis_x0 + axis_w, p0.y + kRulerHeight), col(kLaneBackground));
  // Majors are at least two minor steps apart: space minors so that the widest label fits
  // between two majors, and labels never run into each other.
  float label_w = ImGui::CalcTextSize("888.8 ms").x + 8.f;
  for (const Tick& t : ruler_ticks(app.axis, std::max(12.f, label_w / 2.f))) {
    float x = axis_x0 + app.axis.x_of(t.t);
    float h = t.major ? kRulerHeight * 0.5f : kRulerHeight * 0.25f;
    dl->AddLine(ImVec2(x, p0.y + kRulerHeight - h), ImVec2(x, p0.y + kRulerHeight), line);
    if (t.major)
      dl->AddText(ImVec2(x + 3, p0.y + 1), IM_COL32(210, 210, 215, 255), t.label.c_str());
  }
  // The visible span, in the label column (clipped to it).
  std::string scale = format_duration(app.axis.ns_per_px() * app.axis.width()) + " shown";
  dl->PushClipRect(p0, ImVec2(axis_x0 - 4, p0.y + kRulerHeight), true);
  dl->AddText(ImVec2(p0.x + 4, p0.y + 3), IM_COL32(170, 170, 180, 255), scale.c_str());
  dl->PopClipRect();
}

}  // namespace

namespace panels {

// Why one function of ~375 lines (docs/architecture.md, "Long functions"): it is one ImGui
// immediate-mode frame of the timeline. Its layers (lanes, flow lines, the critical path,
// Compare links, the selection, the range overlay, then the mouse) draw in that order into one
// draw list and share the frame's geometry computed at the top (the visible span, lane rows,
// the hovered event); the lane and ruler drawing that needs nothing else is already in the
// helpers above. Split further, each layer would take that whole state as parameters.
void timeline(App& app, ImVec2 size) {
  const ImGuiIO& io = ImGui::GetIO();
  const LayoutOptions& opt = app.layout_opt;
  ImGui::BeginChild("timeline", size, false,
                    ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  ImVec2 p0 = ImGui::GetCursorScreenPos();
  float axis_x0 = p0.x + kLabelWidth;
  float axis_w = std::max(10.f, size.x - kLabelWidth - ImGui::GetStyle().ScrollbarSize);
  app.axis.set_width(axis_w);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(p0, ImVec2(p0.x + size.x, p0.y + size.y), col(kBackground));
  if (!app.all_ready()) {
    for (int s = 0; s < 2; ++s)
      if (app.slot_active(s) && !app.slots[s].error.empty())
        ImGui::TextWrapped("%s", app.slots[s].error.c_str());
    if (app.loading()) {
      ImGui::Text("loading %s ...", app.path.c_str());
      ImGui::ProgressBar(static_cast<float>(app.load_fraction()),
                         ImVec2(std::min(400.f, size.x), 0));
    }
    ImGui::EndChild();
    return;
  }
  draw_ruler(app, dl, p0, axis_x0, axis_w);
  ImGui::SetCursorScreenPos(ImVec2(p0.x, p0.y + kRulerHeight));
  ImGui::BeginChild("lanes", ImVec2(size.x, size.y - kRulerHeight), false,
                    ImGuiWindowFlags_NoScrollWithMouse);
  dl = ImGui::GetWindowDrawList();
  ImVec2 win = ImGui::GetWindowPos();
  float view_h = ImGui::GetWindowHeight();
  float scroll = ImGui::GetScrollY();
  float total = 0;
  for (int s = 0; s < 2; ++s)
    if (app.slot_active(s)) total += kSectionHeader + app.slots[s].layout.height + kSectionGap;
  ImGui::Dummy(ImVec2(size.x - ImGui::GetStyle().ScrollbarSize, total));

  app.geom = {};
  app.geom.axis_x0 = axis_x0;
  app.geom.axis_x1 = axis_x0 + axis_w;
  app.geom.t0 = app.axis.t0();
  app.geom.t1 = app.axis.t1();
  app.geom.lanes_y0 = win.y;
  app.geom.lanes_y1 = win.y + view_h;
  app.geom.label_x0 = p0.x;
  app.geom.label_x1 = axis_x0;

  float char_w = ImGui::CalcTextSize("M").x;
  float text_h = ImGui::GetTextLineHeight();
  ImVec2 mouse = io.MousePos;
  bool hovered_area = ImGui::IsWindowHovered() && mouse.x >= axis_x0 && mouse.x < axis_x0 + axis_w;
  bool hovered_labels = ImGui::IsWindowHovered() && mouse.x >= p0.x && mouse.x < axis_x0;
  app.hovered.reset();
  static thread_local std::vector<DrawItem> items;
  std::unordered_map<int32_t, std::vector<Point>> flows[2];
  SectionPlace places[2];
  float y_section = win.y - scroll;  // screen y of the current section's top
  const float vis0 = win.y, vis1 = win.y + view_h;
  dl->PushClipRect(ImVec2(p0.x, vis0), ImVec2(p0.x + size.x, vis1), true);

  for (int s = 0; s < 2; ++s) {
    if (!app.slot_active(s)) continue;
    RunSlot& slot = app.slots[s];
    const ViewRun& d = *slot.data;
    const Ns shift = slot.shift;
    int toggled_group = -1;  // the rank header clicked in this section, if any
    FrameGeometry::SectionGeom sg;
    sg.slot = s;
    sg.run_id = d.run.run_id;
    sg.shift = shift;
    sg.y0 = y_section;
    // Section header: which run this is.
    dl->AddRectFilled(ImVec2(p0.x, y_section), ImVec2(p0.x + size.x, y_section + kSectionHeader),
                      s == 0 ? IM_COL32(40, 60, 90, 255) : IM_COL32(80, 55, 40, 255));
    std::string title = (app.compare ? (s == 0 ? "A (baseline): " : "B: ") : "") + d.run_title() +
                        "  " + std::to_string(d.ranks.size()) + " ranks, " +
                        std::to_string(d.event_count) + " events" +
                        (app.compare ? ", times from the start of its first step" : "");
    dl->AddText(ImVec2(p0.x + 4, y_section + 3), IM_COL32(235, 235, 240, 255), title.c_str());
    float top = y_section + kSectionHeader;
    places[s].top = top;
    places[s].lane_box.assign(d.lanes.size(), -1);
    for (size_t i = 0; i < slot.layout.lanes.size(); ++i)
      places[s].lane_box[slot.layout.lanes[i].lane] = static_cast<int>(i);

    for (const GroupBox& g : slot.layout.groups) {
      float gy = top + g.y0;
      if (gy + (g.y1 - g.y0) < vis0 || gy > vis1) continue;
      const RankGroup& grp = d.groups[g.group];
      if (gy + opt.header_h >= vis0 && gy <= vis1) {
        dl->AddRectFilled(ImVec2(p0.x, gy), ImVec2(p0.x + size.x, gy + opt.header_h - 1),
                          IM_COL32(44, 48, 58, 255));
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s rank %d%s%s", g.collapsed ? ">" : "v", grp.info.rank,
                      grp.info.device_name.empty() ? "" : "  ",
                      short_name(grp.info.device_name, 14).c_str());
        dl->AddText(ImVec2(p0.x + 4, gy + (opt.header_h - text_h) * 0.5f),
                    IM_COL32(230, 230, 235, 255), buf);
        if (g.collapsed) {
          // A collapsed rank shows its lanes' outermost events as a thin strip.
          for (int li : grp.lanes) {
            const Lane& l = d.lanes[li];
            if (l.rows.empty() || !l.gpu) continue;
            items.clear();
            fold_row(l.rows[0], app.axis, shift, opt.min_px, items);
            for (const DrawItem& it : items) {
              float x0 = axis_x0 + std::max(it.x0, -2.f),
                    x1 = axis_x0 + std::min(std::max(it.x1, it.x0 + 1.f), axis_w + 2.f);
              dl->AddRectFilled(ImVec2(x0, gy + 5), ImVec2(x1, gy + opt.header_h - 5),
                                col(category_color(it.category)));
            }
          }
        }
        // Clicking a rank's header collapses or expands it; the layout is rebuilt after this
        // section is drawn (relayout replaces the groups and lanes iterated here).
        if (hovered_labels && ImGui::IsMouseClicked(0) && mouse.y >= gy &&
            mouse.y < gy + opt.header_h)
          toggled_group = g.group;
      }
    }
    for (const LaneBox& b : slot.layout.lanes) {
      float ly0 = top + b.y0, ly1 = top + b.y1;
      if (ly1 < vis0 || ly0 > vis1) continue;
      const Lane& l = d.lanes[b.lane];
      sg.lanes.push_back({s, l.rank, l.stream, ly0, ly1, static_cast<int>(l.rows.size())});
      dl->AddRectFilled(ImVec2(axis_x0, ly0), ImVec2(axis_x0 + axis_w, ly1), col(kLaneBackground));
      dl->AddText(ImVec2(p0.x + 14, ly0 + (std::min(opt.row_h, ly1 - ly0) - text_h) * 0.5f),
                  IM_COL32(200, 200, 205, 255),
                  elide_middle(l.label, static_cast<size_t>((kLabelWidth - 18) / char_w)).c_str());
      if (hovered_labels && mouse.y >= ly0 && mouse.y < ly1 && !app.drag_mode) {
        // The whole label, and the id a thread or stream has in the trace.
        ImGui::BeginTooltip();
        ImGui::TextUnformatted(l.label.c_str());
        if (l.stream == kStepsLane)
          ImGui::TextDisabled("rank %d: the steps the file holds; click one to zoom to it", l.rank);
        else
          ImGui::TextDisabled("rank %d, %s id %lld", l.rank, l.gpu ? "stream" : "thread",
                              static_cast<long long>(l.stream));
        ImGui::EndTooltip();
      }
      dl->PushClipRect(ImVec2(axis_x0, ly0), ImVec2(axis_x0 + axis_w, ly1), true);
      for (size_t r = 0; r < l.rows.size(); ++r) {
        float ry0 = ly0 + static_cast<float>(r) * opt.row_h, ry1 = ry0 + opt.row_h - 1;
        if (ry1 < vis0 || ry0 > vis1) continue;
        const Row& row = l.rows[r];
        items.clear();
        fold_row(row, app.axis, shift, opt.min_px, items);
        for (const DrawItem& it : items) {
          float x0 = axis_x0 + std::max(it.x0, -2.f);
          float x1 = axis_x0 + std::min(std::max(it.x1, it.x0 + 1.f), axis_w + 2.f);
          Rgb c = category_color(it.category);
          if (it.count > 1) {
            // A folded block in its dominant category's colour, dimmed toward grey.
            dl->AddRectFilled(ImVec2(x0, ry0 + 1), ImVec2(x1, ry1), blend(c, kFoldedColor, 0.3f));
            if (x1 - x0 > 8 * char_w) {
              char buf[32];
              std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(it.count));
              dl->AddText(ImVec2(x0 + 3, ry0 + (opt.row_h - text_h) * 0.5f),
                          IM_COL32(20, 20, 20, 255), buf);
            }
            continue;
          }
          const Event e = row[static_cast<size_t>(it.first)];
          dl->AddRectFilled(ImVec2(x0, ry0 + 1), ImVec2(x1, ry1), col(c));
          if (x1 - x0 > 4 * char_w) {
            float tx = std::max(x0, axis_x0) + 3;
            auto chars = static_cast<size_t>(std::max(0.f, (x1 - tx - 2) / char_w));
            if (chars >= 3) {
              std::string t = short_name(event_title(d, e), chars);
              dl->AddText(ImVec2(tx, ry0 + (opt.row_h - text_h) * 0.5f), IM_COL32(15, 15, 15, 255),
                          t.c_str());
            }
          }
          if (app.show_flows && e.coll >= 0 && d.colls.match(e.coll) >= 0 && flows[s].size() < 4000)
            flows[s][d.colls.match(e.coll)].push_back(
                {axis_x0 + it.x0, (ry0 + ry1) * 0.5f, l.rank});
        }
        if (hovered_area && mouse.y >= ry0 && mouse.y < ry1 + 1) {
          float mx = mouse.x - axis_x0;
          for (const DrawItem& it : items)
            if (mx >= it.x0 - 1 && mx <= std::max(it.x1, it.x0 + 1) + 1) {
              app.hovered =
                  Selection{s, Hit{b.lane, static_cast<int>(r), it.first, it.count, it.category}};
              break;
            }
        }
      }
      dl->PopClipRect();
    }
    float end = top + slot.layout.height;
    sg.y1 = end;
    app.geom.sections.push_back(std::move(sg));
    y_section = end + kSectionGap;
    if (toggled_group >= 0) {
      slot.collapsed[toggled_group] = !slot.collapsed[toggled_group];
      relayout(app, s);
    }
  }

  // Flow lines between the instances of each visible collective, rank to rank; zoomed out,
  // where hundreds would hide the events, only the selected one's are drawn (below).
  constexpr size_t kMaxFlows = 150;
  if (app.show_flows && flows[0].size() + flows[1].size() <= kMaxFlows)
    for (int s = 0; s < 2; ++s)
      for (auto& [m, pts] : flows[s]) {
        if (pts.size() < 2) continue;
        std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.y < b.y; });
        for (size_t i = 1; i < pts.size(); ++i)
          dl->AddLine(ImVec2(pts[i - 1].x, pts[i - 1].y), ImVec2(pts[i].x, pts[i].y),
                      IM_COL32(255, 255, 255, 90));
      }

  // The critical path `braid analyze` found: a bar under each segment's lane.
  if (app.show_critical_path)
    for (int s = 0; s < 2; ++s) {
      if (!app.slot_active(s)) continue;
      const ViewRun& d = *app.slots[s].data;
      for (const CriticalSegment& c : app.slots[s].extras.critical_path) {
        if (c.kind == "gap" || c.end < app.axis.t0() + app.slots[s].shift ||
            c.start > app.axis.t1() + app.slots[s].shift)
          continue;
        int li = -1;
        for (size_t i = 0; i < d.lanes.size() && li < 0; ++i)
          if (d.lanes[i].gpu && d.lanes[i].rank == c.rank && d.lanes[i].stream == c.stream)
            li = static_cast<int>(i);
        if (li < 0 || places[s].lane_box[li] < 0) continue;
        const LaneBox& b = app.slots[s].layout.lanes[places[s].lane_box[li]];
        float y = places[s].top + b.y1;
        float x0 = axis_x0 + std::max(app.axis.x_of(to_axis(app, s, c.start)), -2.f);
        float x1 = axis_x0 + std::min(app.axis.x_of(to_axis(app, s, c.end)), axis_w + 2);
        dl->AddRectFilled(ImVec2(x0, y - 1), ImVec2(std::max(x1, x0 + 1), y + 2),
                          IM_COL32(255, 235, 59, 230));
      }
    }

  // Compare mode: each fused operation of B linked to the operations of A it replaces, in the
  // same step only (B's k-th instance to A's k-th), on the same rank. With a fused op chosen in
  // the Compare tab, only its links; else, when more than a screenful would be drawn, only
  // those of the first step in view (one step shows what each fused op stands for).
  if (app.compare && !app.links.empty()) {
    struct Line {
      ImVec2 a, b;
      size_t step;
    };
    std::vector<Line> lines;
    std::vector<uint8_t> chosen(app.links.size(), 1);
    bool one_op = false;
    if (app.selected_link >= 0) {
      auto ops = summarize_links(app.links);
      if (app.selected_link < static_cast<int>(ops.size())) {
        std::fill(chosen.begin(), chosen.end(), 0);
        for (size_t li : ops[app.selected_link].links) chosen[li] = 1;
        one_op = true;
      }
    }
    size_t first_step = SIZE_MAX;
    for (size_t li = 0; li < app.links.size(); ++li) {
      if (!chosen[li]) continue;
      const auto& steps = app.links[li].steps;
      for (size_t k = 0; k < steps.size(); ++k)
        for (int32_t fc : steps[k].fused) {
          auto pb = place_of(app, 1, places[1], fc, axis_x0, opt);
          if (!pb) continue;
          for (int32_t rc : steps[k].replaced) {
            auto pa = place_of(app, 0, places[0], rc, axis_x0, opt);
            if (!pa || pa->rank != pb->rank) continue;
            bool in_view = (pa->x >= axis_x0 && pa->x <= axis_x0 + axis_w) ||
                           (pb->x >= axis_x0 && pb->x <= axis_x0 + axis_w);
            if (!in_view) continue;
            lines.push_back({{pa->x, pa->y}, {pb->x, pb->y}, k});
            first_step = std::min(first_step, k);
          }
        }
    }
    constexpr size_t kMaxLinks = 24;
    bool only_first = !one_op && lines.size() > kMaxLinks;
    for (const Line& l : lines)
      if (!only_first || l.step == first_step)
        dl->AddLine(l.a, l.b, IM_COL32(0, 230, 255, 170), 1.5f);
    app.geom.link_lines = 0;
    for (const Line& l : lines) app.geom.link_lines += !only_first || l.step == first_step;
  }

  // The selected event: outline, and its collective's instances on every rank.
  if (app.selected && app.run(app.selected->slot)) {
    const Selection& sel = *app.selected;
    const ViewRun& d = *app.slots[sel.slot].data;
    if (sel.hit.lane < static_cast<int>(d.lanes.size())) {
      const Event e = d.event(sel.hit.lane, sel.hit.row, sel.hit.index);
      int bi = places[sel.slot].lane_box[sel.hit.lane];
      if (bi >= 0) {
        const LaneBox& b = app.slots[sel.slot].layout.lanes[bi];
        float y0 = places[sel.slot].top + b.y0 + static_cast<float>(sel.hit.row) * opt.row_h;
        float x0 = axis_x0 + app.axis.x_of(to_axis(app, sel.slot, e.start));
        float x1 = std::max(x0 + 2, axis_x0 + app.axis.x_of(to_axis(app, sel.slot, e.end)));
        dl->AddRect(ImVec2(x0 - 1, y0), ImVec2(x1 + 1, y0 + opt.row_h),
                    IM_COL32(255, 255, 255, 255), 0, 0, 2.f);
      }
      if (e.coll >= 0 && d.colls.match(e.coll) >= 0) {
        std::vector<Point> pts;
        for (int32_t m : d.matches[d.colls.match(e.coll)].members)
          if (auto p = place_of(app, sel.slot, places[sel.slot], m, axis_x0, opt))
            pts.push_back(*p);
        std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.y < b.y; });
        for (size_t i = 1; i < pts.size(); ++i)
          dl->AddLine(ImVec2(pts[i - 1].x, pts[i - 1].y), ImVec2(pts[i].x, pts[i].y),
                      IM_COL32(255, 235, 59, 255), 2.f);
      }
    }
  }

  // Range selection overlay.
  if (app.range_active) {
    float x0 = axis_x0 + app.axis.x_of(std::min(app.range_t0, app.range_t1));
    float x1 = axis_x0 + app.axis.x_of(std::max(app.range_t0, app.range_t1));
    dl->AddRectFilled(ImVec2(x0, vis0), ImVec2(x1, vis1), IM_COL32(120, 170, 255, 40));
    dl->AddLine(ImVec2(x0, vis0), ImVec2(x0, vis1), IM_COL32(120, 170, 255, 200));
    dl->AddLine(ImVec2(x1, vis0), ImVec2(x1, vis1), IM_COL32(120, 170, 255, 200));
    std::string len = format_duration(static_cast<double>(std::llabs(app.range_t1 - app.range_t0)));
    dl->AddText(ImVec2(x0 + 3, vis0 + 2), IM_COL32(200, 220, 255, 255), len.c_str());
  }
  dl->PopClipRect();

  // Mouse: wheel zooms at the cursor (Shift+wheel scrolls), drag pans, Shift+drag or right
  // drag selects a range, a click selects.
  if (hovered_area && io.MouseWheel != 0) {
    if (io.KeyShift)
      ImGui::SetScrollY(scroll - io.MouseWheel * 3 * opt.row_h);
    else
      app.axis.zoom_at(mouse.x - axis_x0, std::pow(0.8, io.MouseWheel));
  }
  if (hovered_area && (ImGui::IsMouseClicked(0) || ImGui::IsMouseClicked(1))) {
    app.drag_mode = (ImGui::IsMouseClicked(1) || io.KeyShift) ? 2 : 1;
    app.drag_x = mouse.x;
    app.drag_y = mouse.y;
    app.drag_t = app.axis.t_of(mouse.x - axis_x0);
    app.drag_moved = false;
  }
  if (app.drag_mode) {
    bool down = ImGui::IsMouseDown(0) || ImGui::IsMouseDown(1);
    if (std::fabs(mouse.x - app.drag_x) + std::fabs(mouse.y - app.drag_y) > 3)
      app.drag_moved = true;
    if (app.drag_mode == 1 && app.drag_moved) {
      app.axis.pan_px(io.MouseDelta.x);
      ImGui::SetScrollY(scroll - io.MouseDelta.y);
    }
    if (app.drag_mode == 2 && app.drag_moved) {
      app.range_active = true;
      app.range_t0 = app.drag_t;
      app.range_t1 = app.axis.t_of(mouse.x - axis_x0);
    }
    if (!down) {
      if (!app.drag_moved && app.drag_mode == 1) {
        if (app.hovered) {
          // A step (the steps lane) zooms to itself.
          const Hit& h = app.hovered->hit;
          const ViewRun& hd = *app.slots[app.hovered->slot].data;
          bool step = h.count == 1 && hd.event(h.lane, h.row, h.index).kind() == EventKind::Step;
          select_event(app, app.hovered->slot, h, step);
        } else
          app.selected.reset();
      }
      if (app.drag_mode == 2 && app.range_active) {
        if (app.range_t1 < app.range_t0) std::swap(app.range_t0, app.range_t1);
        update_range_stats(app);
        show_tab(app, SideTab::Range);
      }
      app.drag_mode = 0;
    }
  }
  if (app.hovered && !app.drag_moved) tooltip(app, app.hovered->slot, app.hovered->hit);

  ImGui::EndChild();
  ImGui::EndChild();
}

}  // namespace panels
}  // namespace braid::view

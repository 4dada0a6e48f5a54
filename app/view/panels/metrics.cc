// Metrics a person reads: per rank a stacked bar of where its GPU time went (computation,
// communication overlapped by it, exposed communication, memory traffic, idle), the step time,
// the collectives with the most exposed time, and who made the others wait. Every number is
// analysis::compute_metrics's (ViewRun::metrics), the ones `braid analyze` prints. The tables
// `braid analyze` stored stay available, folded, under "Raw tables".
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "app/view/app.h"
#include "app/view/core/colors.h"
#include "app/view/panels/analysis_table.h"
#include "trace/format.h"

namespace braid::view::panels {
namespace {

ImU32 col(Rgb c) { return IM_COL32(c.r, c.g, c.b, 255); }
std::string dur(Ns ns) { return format_duration(static_cast<double>(ns)); }
std::string pct(Ns part, Ns whole) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%",
                whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return buf;
}

void section(const char* title) {
  ImGui::Spacing();
  ImGui::TextColored(ImVec4(0.75f, 0.82f, 1.f, 1.f), "%s", title);
  ImGui::Separator();
}

struct Part {
  const char* name;
  Rgb color;
};
constexpr Part kParts[5] = {{"compute", kBarCompute},
                            {"overlapped comm", kBarOverlapped},
                            {"exposed comm", kBarExposed},
                            {"memory", kBarMemory},
                            {"idle", kBarIdle}};

void legend() {
  for (int i = 0; i < 5; ++i) {
    if (i) ImGui::SameLine();
    ImVec2 p = ImGui::GetCursorScreenPos();
    float h = ImGui::GetTextLineHeight();
    ImGui::GetWindowDrawList()->AddRectFilled(
        ImVec2(p.x, p.y + 2), ImVec2(p.x + h - 4, p.y + h - 2), col(kParts[i].color));
    ImGui::Dummy(ImVec2(h - 2, h));
    ImGui::SameLine(0, 2);
    ImGui::TextUnformatted(kParts[i].name);
  }
}

// One bar per rank, all on one scale (the longest span fills the width).
void rank_bars(App& app, int slot, const RunMetrics& m) {
  Ns longest = 1;
  for (const analysis::RankMetrics& r : m.ranks) longest = std::max(longest, r.span());
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float label_w = ImGui::CalcTextSize("rank 0000").x;
  const float value_w = ImGui::CalcTextSize("888.88 ms").x + 8;
  const float h = ImGui::GetTextLineHeight() + 4;
  for (const analysis::RankMetrics& r : m.ranks) {
    ImVec2 p = ImGui::GetCursorScreenPos();
    float width = std::max(40.f, ImGui::GetContentRegionAvail().x - label_w - value_w);
    char label[32];
    std::snprintf(label, sizeof label, "rank %d", r.rank);
    dl->AddText(ImVec2(p.x, p.y + 2), IM_COL32(220, 220, 225, 255), label);
    MetricsBar b = metrics_bar(r);
    const Ns parts[5] = {b.compute, b.overlapped, b.exposed, b.memory, b.idle};
    FrameGeometry::BarGeom g;
    g.slot = slot;
    g.rank = r.rank;
    g.y0 = p.y;
    g.y1 = p.y + h - 2;
    float x = p.x + label_w;
    const double scale = static_cast<double>(width) / static_cast<double>(longest);
    g.x[0] = x;
    Ns acc = 0;
    ImGui::SetCursorScreenPos(ImVec2(x, p.y));
    ImGui::InvisibleButton("bar", ImVec2(width, h - 2));
    const bool hovered = ImGui::IsItemHovered();
    const float mx = ImGui::GetIO().MousePos.x;
    for (int i = 0; i < 5; ++i) {
      acc += parts[i];
      // Boundaries from the running sum, so rounding never opens a gap between parts.
      float x1 = p.x + label_w + static_cast<float>(static_cast<double>(acc) * scale);
      if (x1 > x) dl->AddRectFilled(ImVec2(x, g.y0), ImVec2(x1, g.y1), col(kParts[i].color));
      if (hovered && mx >= x && mx < x1) {
        ImGui::BeginTooltip();
        ImGui::Text("rank %d: %s %s (%s of %s)", r.rank, kParts[i].name, dur(parts[i]).c_str(),
                    pct(parts[i], r.span()).c_str(), dur(r.span()).c_str());
        ImGui::EndTooltip();
      }
      g.x[i + 1] = x1;
      x = x1;
    }
    dl->AddText(ImVec2(p.x + label_w + width + 6, p.y + 2), IM_COL32(200, 200, 205, 255),
                dur(r.span()).c_str());
    app.geom.metric_bars.push_back(g);
    ImGui::SetCursorScreenPos(ImVec2(p.x, p.y + h));
  }
  ImGui::Dummy(ImVec2(1, 2));
}

void rank_table(const RunMetrics& m) {
  if (!ImGui::BeginTable(
          "ranks", 7,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Borders))
    return;
  for (const char* h : {"rank", "span", "compute", "comm", "exposed", "overlap", "idle"})
    ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (const analysis::RankMetrics& r : m.ranks) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%d", r.rank);
    for (Ns v : {r.span(), r.compute_ns, r.comm_ns, r.exposed_comm_ns}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(dur(v).c_str());
    }
    ImGui::TableNextColumn();
    ImGui::Text("%.1f%%", r.overlap_pct);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(dur(r.idle_ns).c_str());
  }
  ImGui::EndTable();
}

// The instance of a collective of the analysis on `rank` (its member there), for zooming.
void zoom_to_collective(App& app, int slot, const analysis::CollectiveMetrics& c) {
  zoom_to(app, to_axis(app, slot, c.first_arrival), to_axis(app, slot, c.end));
}

void exposed_table(App& app, int slot, const ViewRun& d) {
  std::vector<ExposedColl> top = top_exposed(d, 8);
  if (top.empty()) {
    ImGui::TextDisabled("No exposed communication.");
    return;
  }
  if (!ImGui::BeginTable(
          "exposed", 5,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Borders))
    return;
  for (const char* h : {"collective", "size", "count", "exposed", "busbw"})
    ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (size_t i = 0; i < top.size(); ++i) {
    const ExposedColl& e = top[i];
    const analysis::CollectiveMetrics& w = d.metrics.collectives[e.worst];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    std::string what = std::string(to_string(e.op)) + (e.comm.empty() ? "" : " on " + e.comm);
    std::string label = elide_middle(what, 28) + "##x" + std::to_string(i);
    if (ImGui::Selectable(label.c_str(), false, ImGuiSelectableFlags_SpanAllColumns))
      zoom_to_collective(app, slot, w);
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::Text("%s: %" PRId64 " instances, exposed %s in all (summed over ranks)", what.c_str(),
                  e.count, dur(e.exposed).c_str());
      ImGui::Text("click: zoom to the most exposed one (%s)", dur(w.exposed_ns).c_str());
      ImGui::EndTooltip();
    }
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(e.bytes >= 0 ? format_bytes(e.bytes).c_str() : "?");
    ImGui::TableNextColumn();
    ImGui::Text("%" PRId64, e.count);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(dur(e.exposed).c_str());
    ImGui::TableNextColumn();
    if (w.busbw_gbps > 0)
      ImGui::Text("%.1f GB/s", w.busbw_gbps);
    else
      ImGui::TextDisabled("-");
  }
  ImGui::EndTable();
}

// Who made the others wait: per rank, the collectives it arrived last at and how long the
// others waited for it in all (analysis::late_ranks, `braid analyze`'s "last to arrive").
void late_chart(App& app, int slot, const ViewRun& d) {
  auto late = analysis::late_ranks(d.metrics);
  if (late.empty()) {
    ImGui::TextDisabled("No collective with two or more ranks: nobody waited.");
    return;
  }
  Ns most = 1;
  for (auto& [r, v] : late) most = std::max(most, v.waited_ns);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float label_w = ImGui::CalcTextSize("rank 0000").x;
  const float text_w = ImGui::CalcTextSize("888.88 ms, 8888x last").x + 8;
  const float h = ImGui::GetTextLineHeight() + 2;
  for (auto& [rank, v] : late) {
    ImVec2 p = ImGui::GetCursorScreenPos();
    float width = std::max(40.f, ImGui::GetContentRegionAvail().x - label_w - text_w);
    char label[32];
    std::snprintf(label, sizeof label, "rank %d", rank);
    dl->AddText(ImVec2(p.x, p.y + 1), IM_COL32(220, 220, 225, 255), label);
    float x0 = p.x + label_w;
    float x1 = x0 + std::max(1.f, width * static_cast<float>(static_cast<double>(v.waited_ns) /
                                                             static_cast<double>(most)));
    dl->AddRectFilled(ImVec2(x0, p.y + 2), ImVec2(x1, p.y + h - 2), col(kBarLate));
    char txt[64];
    std::snprintf(txt, sizeof txt, "%s, %" PRId64 "x last", dur(v.waited_ns).c_str(), v.count);
    dl->AddText(ImVec2(x1 + 6, p.y + 1), IM_COL32(200, 200, 205, 255), txt);
    app.geom.late_bars.push_back({slot, rank, x0, x1, p.y + 2, p.y + h - 2});
    ImGui::SetCursorScreenPos(ImVec2(x0, p.y));
    ImGui::InvisibleButton("late", ImVec2(width, h));
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::Text("rank %d arrived last at %" PRId64 " collectives; the others waited %s for it",
                  rank, v.count, dur(v.waited_ns).c_str());
      ImGui::EndTooltip();
    }
    ImGui::SetCursorScreenPos(ImVec2(p.x, p.y + h));
  }
  ImGui::Dummy(ImVec2(1, 2));
}

}  // namespace

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
          text_elided(t.rows[r][c], ImGui::CalcTextSize("M").x * 60);
        }
      }
    ImGui::EndTable();
  }
  if (t.truncated) ImGui::TextDisabled("(first %zu rows)", t.rows.size());
}

bool no_analysis_hint(const std::vector<const AnalysisTable*>& tables) {
  if (!tables.empty()) return false;
  ImGui::TextColored(ImVec4(0.9f, 0.8f, 0.4f, 1), "No analysis stored yet: run braid analyze.");
  return true;
}

void metrics(App& app) {
  for (int s = 0; s < 2; ++s) {
    const ViewRun* d = app.run(s);
    if (!d) continue;
    const RunMetrics& m = app.slots[s].metrics;
    ImGui::PushID(s);
    ImGui::TextUnformatted(d->run_title().c_str());
    if (m.steps_from_trace)
      ImGui::Text("step time %s (mean of %" PRId64 " steps, first to last rank)",
                  dur(m.step_time).c_str(), m.steps);
    else
      ImGui::Text("no steps in the trace: GPU span %s", dur(m.step_time).c_str());
    if (m.ranks.empty()) {
      ImGui::TextDisabled("No GPU activity in this run.");
    } else {
      section("where each rank's GPU time went");
      legend();
      rank_bars(app, s, m);
      rank_table(m);
    }
    section("most exposed collectives");
    exposed_table(app, s, *d);
    section("who made the others wait");
    late_chart(app, s, *d);
    // Every analysis table of the run as stored, except the full JSON report, the per-member
    // rows (Details shows a collective's members) and the communicators (their own tab).
    std::vector<const AnalysisTable*> tables;
    for (const AnalysisTable& t : app.slots[s].extras.analysis)
      if (t.name != "analysis_reports" && t.name != "analysis_collective_members" &&
          t.name != "analysis_communicators")
        tables.push_back(&t);
    ImGui::Spacing();
    if (ImGui::CollapsingHeader("Raw tables")) {
      ImGui::Indent();
      if (!no_analysis_hint(tables))
        for (const AnalysisTable* t : tables) show_analysis_table(*t);
      ImGui::Unindent();
    }
    ImGui::Separator();
    ImGui::PopID();
  }
}

}  // namespace braid::view::panels

// The overview strip: each run's whole span, the busy fraction of its GPU streams per pixel
// column, and the visible window; clicking or dragging in it moves the window there.
#include <algorithm>

#include "app/view/app.h"
#include "app/view/core/colors.h"

namespace braid::view::panels {

void overview(App& app, ImVec2 size) {
  ImGui::BeginChild("overview", size, false,
                    ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p0 = ImGui::GetCursorScreenPos();
  dl->AddRectFilled(p0, ImVec2(p0.x + size.x, p0.y + size.y), IM_COL32(18, 20, 24, 255));
  if (!app.all_ready()) {
    ImGui::EndChild();
    return;
  }
  // The overview spans what fit_all shows: both runs' spans on the aligned axis.
  Ns lo = INT64_MAX, hi = INT64_MIN;
  int n = 0;
  for (int s = 0; s < 2; ++s)
    if (const ViewRun* d = app.run(s)) {
      lo = std::min(lo, d->start - app.slots[s].shift);
      hi = std::max(hi, d->end - app.slots[s].shift);
      ++n;
    }
  double span = static_cast<double>(std::max<Ns>(1, hi - lo));
  float strip_h = (size.y - 4) / static_cast<float>(n);
  int k = 0;
  for (int s = 0; s < 2; ++s) {
    const ViewRun* d = app.run(s);
    if (!d) continue;
    float y0 = p0.y + 2 + strip_h * static_cast<float>(k++);
    const std::vector<float>& bins = d->gpu_density;  // busy fraction of its GPU lanes
    float rx0 =
        p0.x +
        static_cast<float>(static_cast<double>(d->start - app.slots[s].shift - lo) / span) * size.x;
    float rx1 =
        p0.x +
        static_cast<float>(static_cast<double>(d->end - app.slots[s].shift - lo) / span) * size.x;
    float bw = (rx1 - rx0) / kOverviewBins;
    for (int i = 0; i < kOverviewBins; ++i) {
      float v = i < static_cast<int>(bins.size()) ? bins[i] : 0.f;
      if (v <= 0) continue;
      auto a = static_cast<int>(60 + 195 * v);
      ImU32 c = s == 0 ? IM_COL32(90, 160, 255, a) : IM_COL32(255, 170, 90, a);
      dl->AddRectFilled(ImVec2(rx0 + bw * static_cast<float>(i), y0 + strip_h * (1 - v)),
                        ImVec2(rx0 + bw * static_cast<float>(i + 1) + 0.5f, y0 + strip_h - 1), c);
    }
  }
  float vx0 = p0.x + static_cast<float>(static_cast<double>(app.axis.t0() - lo) / span) * size.x;
  float vx1 = p0.x + static_cast<float>(static_cast<double>(app.axis.t1() - lo) / span) * size.x;
  vx1 = std::max(vx1, vx0 + 2);
  dl->AddRect(ImVec2(vx0, p0.y + 1), ImVec2(vx1, p0.y + size.y - 1), IM_COL32(255, 255, 255, 200),
              0, 0, 1.5f);
  ImGui::InvisibleButton("overview_area", size);
  if (ImGui::IsItemActive() && ImGui::IsMouseDown(0)) {
    double t = lo + (ImGui::GetIO().MousePos.x - p0.x) / size.x * span;
    double half = static_cast<double>(app.axis.t1() - app.axis.t0()) / 2;
    app.axis.set_window(static_cast<Ns>(t - half), static_cast<Ns>(t + half));
  }
  ImGui::EndChild();
}

}  // namespace braid::view::panels

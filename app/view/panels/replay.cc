// "Replay A/B...": `braid ab` for the baseline / fused pair on a chosen backend (sim; mpi with N
// ranks through mpirun; nccl where GPUs exist) as a child process: its command line, live log,
// elapsed time, cancel, exit status and first error line; when it ends well its stored runs open
// in compare mode with the measured speedup and the data-check verdict.
#include <cinttypes>
#include <cstdio>

#include "app/view/app.h"

namespace braid::view::panels {

void replay(App& app) {
  ReplayPanel& p = app.replay;
  AbRequest& r = p.request;
  if (r.braid.empty()) r.braid = find_braid_exe();
  r.file = app.path;
  const bool running = p.child && !p.child->finished();

  // The pair: by default the one the explorer saved, else braid ab's default (the newest
  // schedule with a parent, and that parent).
  ImGui::TextWrapped(
      "Runs `braid ab` on %s: the baseline and the fused schedule interleaved, "
      "with the data check; both runs are stored in the file.",
      app.path.c_str());
  ImGui::BeginDisabled(running);
  int backend = static_cast<int>(r.backend);
  ImGui::RadioButton("sim", &backend, 0);
  ImGui::SameLine();
  ImGui::RadioButton("mpi", &backend, 1);
  ImGui::SameLine();
  ImGui::RadioButton("nccl", &backend, 2);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "one process per GPU under mpirun; needs a braid built with CUDA, NCCL and "
        "MPI, and GPUs");
  r.backend = static_cast<AbBackend>(backend);
  if (r.backend != AbBackend::Sim) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(90);
    ImGui::InputInt("ranks (mpirun -np)", &r.ranks);
  }
  ImGui::SetNextItemWidth(90);
  ImGui::InputInt("steps", &r.steps);
  if (r.steps < 1) r.steps = 1;
  int ids[2] = {static_cast<int>(r.baseline), static_cast<int>(r.fused)};
  ImGui::SetNextItemWidth(160);
  if (ImGui::InputInt2("baseline / fused schedule (-1: default)", ids)) {
    r.baseline = ids[0];
    r.fused = ids[1];
  }
  ImGui::EndDisabled();
  if (!running) {
    if (ImGui::Button("Run")) replay_start(app, r);
    note_widget(app, "replay run");
  } else {
    if (ImGui::Button("Cancel")) p.child->cancel();
    note_widget(app, "replay cancel");
    ImGui::SameLine();
    const double t = steady_seconds() - p.started;
    char buf[64];
    std::snprintf(buf, sizeof buf, "running %.1f s", t);
    // Indeterminate: `braid ab` reports at its end; the bar moves while it runs.
    const float phase = static_cast<float>(t - static_cast<double>(static_cast<int64_t>(t)));
    ImGui::ProgressBar(phase, ImVec2(-1, 0), buf);
  }
  if (!p.command.empty()) {
    ImGui::TextDisabled("$ %s", p.command.c_str());
  }
  if (p.child && p.child->finished()) {
    const int st = p.child->exit_status();
    if (p.child->cancelled())
      ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "cancelled (exit status %d)", st);
    else if (st == 0)
      ImGui::TextColored(ImVec4(0.5f, 0.9f, 0.5f, 1), "finished (exit status 0) in %.1f s",
                         p.ended - p.started);
    else
      ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "failed (exit status %d)", st);
    const AbOutcome& o = p.outcome;
    if (!o.first_error.empty())
      ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "%s", o.first_error.c_str());
    if (!o.speedup.empty()) ImGui::TextUnformatted(o.speedup.c_str());
    if (!o.data_check.empty()) ImGui::TextUnformatted(o.data_check.c_str());
    if (o.fused_run >= 0)
      ImGui::Text("runs %" PRId64 " (A, baseline) and %" PRId64
                  " (B, fused) opened in compare mode",
                  o.baseline_run, o.fused_run);
  }
  if (p.child) {
    ImGui::Separator();
    ImGui::BeginChild("log", ImVec2(0, 0), true, ImGuiWindowFlags_HorizontalScrollbar);
    const std::string log = p.child->log();
    ImGui::TextUnformatted(log.data(), log.data() + log.size());
    if (running && ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 20) ImGui::SetScrollHereY(1.f);
    ImGui::EndChild();
  }
}

}  // namespace braid::view::panels

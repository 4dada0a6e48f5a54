#include "app/view/app.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "fusion/lift.h"
#include "fusion/schedule_store.h"
#include "trace/error.h"
#include "trace/format.h"

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

void app_load(App& app, int s, int64_t run_id, const std::string& file, const std::string& title) {
  RunSlot& slot = app.slots[s];
  slot.load.reset();  // joins a load in flight before its storage is reused
  slot.run_id = run_id;
  slot.file = file;
  slot.title = title;
  slot.data.reset();
  slot.handed_over = 0;
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
  app.auto_fit.reset();
  RunSlot* p = &slot;
  slot.load = std::make_unique<BackgroundLoad>(file.empty() ? app.path : file, run_id,
                                               [p](const ViewRun& d) {
                                                 p->pending_metrics = run_metrics(d);
                                                 p->pending_extras = load_extras(d);
                                               });
}

void app_open(App& app, const std::string& path, int64_t run_a, int64_t run_b) {
  TraceReader reader(path);  // fails here, with the file named, when it is not a .braid
  app.path = path;
  app.runs = reader.runs();
  if (app.runs.empty()) {
    // A schedule and no run (`braid synth -o`): the explorer simulates it.
    if (default_root_schedule(path) < 0)
      throw Error(ErrorCode::Empty, path + ": the file has no runs and no schedule");
    if (run_a >= 0 || run_b >= 0)
      throw Error(ErrorCode::NotFound, path + ": the file has no runs, only schedules");
    app.compare = false;
    explore_start(app);
    show_tab(app, SideTab::Opportunities);
    return;
  }
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
  if (app.compare && app.all_complete()) {
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
  bool changed = explore_poll(app);
  changed = replay_poll(app) || changed;
  for (int s = 0; s < 2; ++s) {
    RunSlot& slot = app.slots[s];
    if (!slot.load) continue;
    if (!slot.load->finished()) {
      // The ranks loaded so far: the frames show them while the rest stream in.
      if (const int64_t n = slot.load->handed_over(); n != slot.handed_over) {
        slot.handed_over = n;
        slot.data = slot.load->result();
        changed = true;
      }
      continue;
    }
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
    // While a run streams in, the view follows its span as it grows, until the user moves it.
    const bool follow = app.fit_pending || (app.auto_fit && app.axis.t0() == app.auto_fit->first &&
                                            app.axis.t1() == app.auto_fit->second);
    // (A first ViewRun without a span yet, no steps: fitted on nothing, then followed.)
    if (app.all_ready() && follow) {
      fit_all(app);
      app.fit_pending = false;
      app.auto_fit.reset();
      if (!app.all_complete()) app.auto_fit = std::make_pair(app.axis.t0(), app.axis.t1());
    }
    for (int s = 0; s < 2; ++s)
      if (app.slot_active(s) && !app.slots[s].error.empty()) app.status = app.slots[s].error;
  }
  return changed;
}

void explore_start(App& app) {
  ExplorePanel& x = app.explore;
  ExploreRequest r = x.explorer.request();
  const bool same = x.started && r.path == app.path && r.profile == x.profile;
  if (!same) r = ExploreRequest{};
  r.path = app.path;
  r.profile = x.profile;
  x.started = true;
  x.saved.clear();
  x.explorer.start(std::move(r));
}

// A finished "Save" or "Lift" taken in.
bool explore_task_poll(App& app) {
  ExplorePanel& x = app.explore;
  if (!x.task.poll()) return false;
  const bool failed = !x.task.error().empty();
  if (x.task.what() == "save") {
    x.saved = failed ? (x.task.cancelled() ? "save cancelled: the file is as it was"
                                           : "save failed: " + x.task.error())
                     : x.task.message();
    if (!failed) x.saved_id = x.task.id();
  } else if (failed) {
    app.status =
        x.task.cancelled() ? "lift cancelled: the file is as it was" : "lift: " + x.task.error();
  } else {
    app.status = x.task.message();
    app.slots[0].extras.has_schedules = true;
    explore_start(app);
  }
  return true;
}

bool explore_poll(App& app) {
  ExplorePanel& x = app.explore;
  const bool task_done = explore_task_poll(app);
  x.explorer.poll();
  if (task_done && x.generation == x.explorer.generation()) return true;
  if (x.generation == x.explorer.generation()) return false;
  x.generation = x.explorer.generation();
  if (!x.explorer.error().empty()) {
    app.status = "explorer: " + x.explorer.error();
    return true;
  }
  const ExploreResult& r = *x.explorer.result();
  x.findings = r.findings;
  if (x.follow) {
    // Keep the zoom when the explorer's runs were already shown (a new choice of rewrites).
    const bool was_shown = app.compare && !app.slots[0].file.empty() && app.all_ready();
    const TimeAxis axis = app.axis;
    app.compare = true;
    app_load(app, 0, r.baseline_run, r.scratch, "explorer: simulated baseline");
    app_load(app, 1, r.fused_run, r.scratch, "explorer: simulated fused");
    if (was_shown) {
      app.fit_pending = false;
      app.axis = axis;
    }
  }
  return true;
}

void explore_lift(App& app) {
  const int64_t run = app.slots[0].file.empty() ? app.slots[0].run_id : -1;
  app.explore.task.start("lift", [path = app.path, run](const std::atomic<bool>& cancel,
                                                        std::atomic<double>& progress) {
    fusion::LiftOptions opt;
    opt.cancel = &cancel;
    opt.progress = [&progress](size_t i, size_t n) {
      progress = static_cast<double>(i) / static_cast<double>(n ? n : 1);
    };
    const fusion::LiftedRun l = fusion::lift_into_file(path, run, opt);
    progress = 1.0;
    return FileTask::Outcome{"lifted run " + std::to_string(l.run_id) + " into schedule " +
                                 std::to_string(l.schedule_id) + " (as `braid lift` does)",
                             l.schedule_id};
  });
}

void explore_save(App& app) {
  ExplorePanel& x = app.explore;
  if (x.task.start("save", x.explorer.save_task())) x.saved.clear();
}

void replay_start(App& app, const AbRequest& r) {
  ReplayPanel& p = app.replay;
  p.child.reset();  // cancels and waits for one still running
  p.request = r;
  if (p.request.file.empty()) p.request.file = app.path;
  if (p.request.braid.empty()) p.request.braid = find_braid_exe();
  if (p.request.backend != AbBackend::Sim && p.request.ranks < 1) {
    // mpirun needs one process per rank of the pair.
    try {
      for (const auto& st : fusion::list_schedules(app.path))
        if (st.parent_id >= 0 && (r.fused < 0 || st.id == r.fused))
          p.request.ranks =
              static_cast<int>(fusion::load_stored_schedule(app.path, st.id).ranks.size());
    } catch (const std::exception&) {
    }
    if (p.request.ranks < 1) p.request.ranks = 2;
  }
  const AbRequest& q = p.request;
  const std::vector<std::string> argv = ab_command(q);
  p.command = shell_line(argv);
  p.outcome = AbOutcome{};
  p.opened = false;
  p.started = steady_seconds();
  p.ended = 0;
  p.child = std::make_unique<ChildProcess>(argv);
}

bool replay_poll(App& app) {
  ReplayPanel& p = app.replay;
  if (!p.child || !p.child->finished() || p.opened) return false;
  p.opened = true;
  p.ended = steady_seconds();
  p.outcome = parse_ab_output(p.child->log());
  if (p.child->exit_status() != 0 || p.outcome.fused_run < 0) return true;
  // The stored runs, side by side.
  try {
    app.runs = TraceReader(app.path).runs();
  } catch (const std::exception& e) {
    app.status = e.what();
    return true;
  }
  app.explore.follow = false;
  app.compare = true;
  app_load(app, 0, p.outcome.baseline_run);
  app_load(app, 1, p.outcome.fused_run);
  return true;
}

void app_wait(App& app) {
  // A poll may start loads (the explorer's or a replay's runs): wait for those too.
  for (;;) {
    app_poll(app);
    if (!app.loading() && !app.explore.explorer.busy() && !app.explore.task.busy()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void relayout(App& app, int s) {
  RunSlot& slot = app.slots[s];
  if (slot.data) slot.layout = layout_run(*slot.data, slot.collapsed, app.layout_opt);
}

void fit_all(App& app, bool whole) {
  Ns lo = INT64_MAX, hi = INT64_MIN;
  for (int s = 0; s < 2; ++s)
    if (const ViewRun* d = app.run(s)) {
      lo = std::min(lo, (whole ? d->start : d->open_start()) - app.slots[s].shift);
      hi = std::max(hi, (whole ? d->end : d->open_end()) - app.slots[s].shift);
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
  const ViewRun* d = app.run(slot);
  if (!d) return;
  const Event e = d->event(hit.lane, hit.row, hit.index);
  Ns t0 = e.start, t1 = e.end;
  if (e.coll >= 0 && d->colls.match(e.coll) >= 0)
    for (int32_t m : d->matches[d->colls.match(e.coll)].members) {
      t0 = std::min(t0, d->colls[m].c.start);
      t1 = std::max(t1, d->colls[m].c.end);
    }
  zoom_to(app, to_axis(app, slot, t0), to_axis(app, slot, t1));
}

void show_tab(App& app, SideTab tab) {
  app.tab = tab;
  app.tab_requested = true;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void note_widget(App& app, const std::string& name) {
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  app.widgets[name] = ImVec4(a.x, a.y, b.x, b.y);
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

std::string event_title(const ViewRun& d, const Event& e) {
  if (e.coll >= 0) {
    const Collective& c = d.colls[e.coll].c;
    std::string t(to_string(c.op));
    if (c.bytes >= 0) t += " " + format_bytes(c.bytes);
    return t;
  }
  const std::string& n = d.str(e.name);
  if (!n.empty()) return n;
  if (e.kind() == EventKind::Memcpy) return std::string(to_string(e.mem_kind()));
  return "(unnamed)";
}

}  // namespace braid::view

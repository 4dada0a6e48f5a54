// braid-view: the desktop GUI (GLFW + OpenGL 3 + Dear ImGui), and --screenshot, which renders
// one frame into an offscreen framebuffer (no display needed beyond a GL context, e.g. under
// Xvfb) and writes it as a PNG.
#define GLFW_INCLUDE_NONE
#include <GL/gl.h>
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <CLI/CLI.hpp>
#include <cfloat>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "app/view/app.h"
#include "app/view/png_io.h"
#include "trace/error.h"
#include "trace/format.h"
#include "trace/json.h"
#include "trace/output_file.h"

namespace braid::view {
namespace {

std::string glfw_error;
void on_glfw_error(int, const char* msg) { glfw_error = msg; }

// GL 3.0 framebuffer objects, fetched through GLFW (libGL exports only GL 1.x portably).
#ifndef GL_FRAMEBUFFER
#define GL_FRAMEBUFFER 0x8D40
#define GL_RENDERBUFFER 0x8D41
#define GL_COLOR_ATTACHMENT0 0x8CE0
#define GL_FRAMEBUFFER_COMPLETE 0x8CD5
#endif
struct Fbo {
  using GenFn = void (*)(GLsizei, GLuint*);
  using BindFn = void (*)(GLenum, GLuint);
  using StorageFn = void (*)(GLenum, GLenum, GLsizei, GLsizei);
  using AttachFn = void (*)(GLenum, GLenum, GLenum, GLuint);
  using StatusFn = GLenum (*)(GLenum);
  GLuint fb = 0, rb = 0;
  BindFn bind_fb = nullptr;

  Fbo(int w, int h) {
    auto gen_fb = reinterpret_cast<GenFn>(glfwGetProcAddress("glGenFramebuffers"));
    auto gen_rb = reinterpret_cast<GenFn>(glfwGetProcAddress("glGenRenderbuffers"));
    bind_fb = reinterpret_cast<BindFn>(glfwGetProcAddress("glBindFramebuffer"));
    auto bind_rb = reinterpret_cast<BindFn>(glfwGetProcAddress("glBindRenderbuffer"));
    auto storage = reinterpret_cast<StorageFn>(glfwGetProcAddress("glRenderbufferStorage"));
    auto attach = reinterpret_cast<AttachFn>(glfwGetProcAddress("glFramebufferRenderbuffer"));
    auto status = reinterpret_cast<StatusFn>(glfwGetProcAddress("glCheckFramebufferStatus"));
    if (!gen_fb || !gen_rb || !bind_fb || !bind_rb || !storage || !attach || !status)
      throw Error(ErrorCode::Unsupported,
                  "the OpenGL context has no framebuffer objects (OpenGL 3.0 needed)");
    gen_fb(1, &fb);
    gen_rb(1, &rb);
    bind_rb(GL_RENDERBUFFER, rb);
    storage(GL_RENDERBUFFER, GL_RGBA8, w, h);
    bind_fb(GL_FRAMEBUFFER, fb);
    attach(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, rb);
    if (status(GL_FRAMEBUFFER) != GL_FRAMEBUFFER_COMPLETE)
      throw Error(ErrorCode::Unsupported, "cannot create a " + std::to_string(w) + "x" +
                                              std::to_string(h) + " offscreen framebuffer");
  }
};

void style() {
  ImGui::StyleColorsDark();
  ImGuiStyle& s = ImGui::GetStyle();
  s.WindowPadding = ImVec2(6, 6);
  s.FramePadding = ImVec2(5, 3);
  s.ItemSpacing = ImVec2(6, 4);
  s.CellPadding = ImVec2(4, 1);
}

SideTab tab_from_name(const std::string& n) {
  static const std::pair<const char*, SideTab> kTabs[] = {{"details", SideTab::Details},
                                                          {"range", SideTab::Range},
                                                          {"search", SideTab::Search},
                                                          {"opportunities", SideTab::Opportunities},
                                                          {"metrics", SideTab::Metrics},
                                                          {"diagnostics", SideTab::Diagnostics},
                                                          {"communicators", SideTab::Communicators},
                                                          {"compare", SideTab::Compare},
                                                          {"replay", SideTab::Replay}};
  for (auto& [k, v] : kTabs)
    if (n == k) return v;
  throw Error(ErrorCode::Usage, "--tab: unknown panel '" + n +
                                    "' (details, range, search, opportunities, metrics, "
                                    "diagnostics, communicators, compare, replay)");
}

std::string geometry_json(const App& app, int w, int h) {
  const FrameGeometry& g = app.geom;
  json::Writer o;
  auto px = [&o](std::string_view k, float v) { o.key(k).general(v, 6); };  // as ostream prints
  o.begin_object().field("width", w).field("height", h);
  px("axis_x0", g.axis_x0);
  px("axis_x1", g.axis_x1);
  o.field("t0", g.t0).field("t1", g.t1);
  px("lanes_y0", g.lanes_y0);
  px("lanes_y1", g.lanes_y1);
  px("label_x0", g.label_x0);
  px("label_x1", g.label_x1);
  o.key("sections").begin_array();
  for (const auto& s : g.sections) {
    o.begin_object().field("slot", s.slot).field("run_id", s.run_id).field("shift", s.shift);
    px("y0", s.y0);
    px("y1", s.y1);
    o.key("lanes").begin_array();
    for (const auto& l : s.lanes) {
      o.begin_object().field("rank", l.rank).field("stream", l.stream);
      px("y0", l.y0);
      px("y1", l.y1);
      o.field("rows", l.rows).end_object();
    }
    o.end_array().end_object();
  }
  o.end_array().key("metric_bars").begin_array();
  for (const auto& b : g.metric_bars) {
    o.begin_object().field("slot", b.slot).field("rank", b.rank);
    px("y0", b.y0);
    px("y1", b.y1);
    o.key("x").begin_array();
    for (float v : b.x) o.general(v, 6);
    o.end_array().end_object();
  }
  o.end_array().key("late_bars").begin_array();
  for (const auto& b : g.late_bars) {
    o.begin_object().field("slot", b.slot).field("rank", b.rank);
    px("x0", b.x0);
    px("x1", b.x1);
    px("y0", b.y0);
    px("y1", b.y1);
    o.end_object();
  }
  o.end_array().key("widgets").begin_object();
  for (const auto& [name, r] : app.widgets) {
    o.key(name).begin_array();
    for (float v : {r.x, r.y, r.z, r.w}) o.general(v, 6);
    o.end_array();
  }
  o.end_object().end_object();
  return o.take() + "\n";
}

struct Options {
  std::string file;
  int64_t run = -1;
  std::vector<int64_t> compare;
  std::string screenshot, geometry, size = "1600x900", tab;
  std::string replay;  // start `braid ab` on this backend at open
  int replay_np = 0;
};

void start_replay(App& app, const Options& opt) {
  AbRequest r;
  r.braid = find_braid_exe();
  r.file = opt.file;
  r.backend = opt.replay == "sim"   ? AbBackend::Sim
              : opt.replay == "mpi" ? AbBackend::Mpi
                                    : AbBackend::Nccl;
  r.ranks = opt.replay_np;
  app.replay.visible = true;
  show_tab(app, SideTab::Replay);
  replay_start(app, r);
}

int run_view(const Options& opt) {
  int w = 1600, h = 900;
  if (std::sscanf(opt.size.c_str(), "%dx%d", &w, &h) != 2 || w < 200 || h < 150 || w > 8192 ||
      h > 8192)
    throw Error(ErrorCode::Usage,
                "--size: expected WxH between 200x150 and 8192x8192, got '" + opt.size + "'");
  const bool headless = !opt.screenshot.empty();

  App app;
  int64_t run_a = opt.run, run_b = -1;
  if (opt.compare.size() == 2) {
    run_a = opt.compare[0];
    run_b = opt.compare[1];
  }
  app_open(app, opt.file, run_a, run_b);  // errors about the file come before any window
  if (!opt.tab.empty()) show_tab(app, tab_from_name(opt.tab));
  if (app.tab == SideTab::Replay) app.replay.visible = true;

  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit())
    throw Error(ErrorCode::Unsupported,
                "cannot open a display (" + glfw_error +
                    "); for a headless --screenshot run under `xvfb-run -a`");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 2);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
  if (headless) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  std::string title = "braid-view - " + opt.file;
  GLFWwindow* win = glfwCreateWindow(w, h, title.c_str(), nullptr, nullptr);
  if (!win) {
    glfwTerminate();
    throw Error(ErrorCode::Unsupported, "cannot create an OpenGL 3.2 window (" + glfw_error + ")");
  }
  glfwMakeContextCurrent(win);
  glfwSwapInterval(headless ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  style();
  ImGui_ImplGlfw_InitForOpenGL(win, !headless);
  ImGui_ImplOpenGL3_Init("#version 150");

  int rc = 0;
  if (headless) {
    Fbo fbo(w, h);
    if (!opt.replay.empty()) {
      // The replay panel after `braid ab` ended (its runs then load in compare mode).
      start_replay(app, opt);
      while (!app.replay.child->finished())
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    app_wait(app);
    for (int s = 0; s < 2; ++s)
      if (app.slot_active(s) && !app.slots[s].error.empty())
        throw Error(ErrorCode::BadFormat, app.slots[s].error);
    // A few frames: ImGui sizes windows, tables and tabs from the previous frame.
    for (int frame = 0; frame < 4; ++frame) {
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      io.DisplaySize = ImVec2(static_cast<float>(w), static_cast<float>(h));
      io.DisplayFramebufferScale = ImVec2(1, 1);
      io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
      ImGui::NewFrame();
      build_frame(app);
      ImGui::Render();
      fbo.bind_fb(GL_FRAMEBUFFER, fbo.fb);
      glViewport(0, 0, w, h);
      glClearColor(0.1f, 0.1f, 0.12f, 1.f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    }
    glFinish();
    Image img;
    img.width = w;
    img.height = h;
    img.rgba.resize(static_cast<size_t>(w) * h * 4);
    glPixelStorei(GL_PACK_ALIGNMENT, 1);
    glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, img.rgba.data());
    // GL's rows go bottom-up; PNG's top-down.
    std::vector<uint8_t> tmp(static_cast<size_t>(w) * 4);
    for (int y = 0; y < h / 2; ++y) {
      uint8_t* a = &img.rgba[static_cast<size_t>(y) * w * 4];
      uint8_t* b = &img.rgba[static_cast<size_t>(h - 1 - y) * w * 4];
      std::copy(a, a + tmp.size(), tmp.begin());
      std::copy(b, b + tmp.size(), a);
      std::copy(tmp.begin(), tmp.end(), b);
    }
    for (size_t i = 3; i < img.rgba.size(); i += 4) img.rgba[i] = 255;
    write_png(opt.screenshot, img);
    if (!opt.geometry.empty()) {
      AtomicOutputFile out(opt.geometry);
      BufferedOut b(out.fd(), opt.geometry);
      b.put(geometry_json(app, w, h));
      b.flush();
      out.commit();
    }
    std::printf("braid-view: wrote %s (%dx%d)\n", opt.screenshot.c_str(), w, h);
  } else {
    if (!opt.replay.empty()) start_replay(app, opt);
    while (!glfwWindowShouldClose(win)) {
      // No input: a frame when one is due (app.h), not one per display refresh.
      glfwWaitEventsTimeout(app.loading() ? kLoadingFrameS : kIdleFrameS);
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      ImGui::NewFrame();
      build_frame(app);
      ImGui::Render();
      int fw, fh;
      glfwGetFramebufferSize(win, &fw, &fh);
      glViewport(0, 0, fw, fh);
      glClearColor(0.1f, 0.1f, 0.12f, 1.f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      glfwSwapBuffers(win);
    }
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(win);
  glfwTerminate();
  return rc;
}

}  // namespace
}  // namespace braid::view

int main(int argc, char** argv) {
  braid::view::lean_malloc();
  braid::view::Options opt;
  CLI::App cli{
      "braid-view: before/after timelines of a .braid file.\n"
      "Keys: W/S zoom, A/D pan, F fit (to the selected range if any), Esc clear; mouse wheel "
      "zooms\n"
      "at the cursor, Shift+wheel scrolls, drag pans, click selects, Shift+drag or right-drag\n"
      "selects a range. See docs/gui.md.",
      "braid-view"};
  cli.add_option("file", opt.file, ".braid file to open")->required();
  cli.add_option("--run", opt.run,
                 "Run to show (default: the first); the run picker lists them all");
  cli.add_option("--compare", opt.compare,
                 "Compare two runs: baseline A and B, stacked and step-aligned")
      ->expected(2);
  cli.add_option("--screenshot", opt.screenshot,
                 "Render one frame headless (needs a GL context: run under `xvfb-run -a`) and "
                 "write it as a PNG");
  cli.add_option("--size", opt.size, "Window / screenshot size WxH")->capture_default_str();
  cli.add_option("--tab", opt.tab,
                 "Side panel to show: details, range, search, opportunities, metrics, diagnostics, "
                 "communicators, compare");
  cli.add_option("--replay", opt.replay,
                 "Open the Replay tab and run `braid ab` on this backend at once (with "
                 "--screenshot: the panel after it ended)")
      ->check(CLI::IsMember({"sim", "mpi", "nccl"}));
  cli.add_option("--np", opt.replay_np,
                 "--replay mpi/nccl: mpirun -np (default: the ranks of "
                 "the fused schedule)");
  cli.add_option("--geometry", opt.geometry,
                 "With --screenshot: also write where the axis, sections and lanes were drawn "
                 "(JSON, for tests)");
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "braid-view: error: %s\n", e.what());
    return 2;
  }
  try {
    if (!opt.geometry.empty() && opt.screenshot.empty())
      throw braid::Error(braid::ErrorCode::Usage, "--geometry needs --screenshot");
    return braid::view::run_view(opt);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-view: error: %s\n", e.what());
    return e.code() == braid::ErrorCode::Usage ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-view: error: %s\n", e.what());
    return 1;
  }
}

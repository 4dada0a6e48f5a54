#include "capture/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>

#include "trace/error.h"

namespace braid::capture {
namespace {

std::optional<int64_t> to_int(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> to_double(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::string str(s);
  char* end = nullptr;
  double v = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size() || !(v >= 0)) return std::nullopt;
  return v;
}

int env_int(const GetEnv& getenv, const char* name, int fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  auto i = to_int(v);
  return i ? static_cast<int>(*i) : fallback;
}

}  // namespace

RankIdentity rank_from_env(const GetEnv& getenv) {
  struct Source {
    const char *rank, *size, *local;
  };
  static const Source kSources[] = {
      {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
  };
  RankIdentity id;
  for (const auto& s : kSources) {
    const char* r = getenv(s.rank);
    if (!r || !*r || !to_int(r)) continue;
    id.rank = static_cast<int>(*to_int(r));
    id.world_size = env_int(getenv, s.size, -1);
    id.local_rank = env_int(getenv, s.local, -1);
    id.source = s.rank;
    return id;
  }
  return id;
}

WindowSpec parse_window(std::string_view text) {
  WindowSpec w;
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::Usage, "capture window '" + std::string(text) + "': " + why);
  };
  if (text.empty() || text == "all") return w;
  if (text == "cuda-profiler-api" || text == "profiler") {
    w.kind = WindowKind::ProfilerApi;
    return w;
  }
  auto colon = text.find(':');
  if (colon == std::string_view::npos)
    throw bad("expected all, cuda-profiler-api, nvtx:NAME, steps:A-B or duration:SECONDS");
  std::string_view kind = text.substr(0, colon), arg = text.substr(colon + 1);
  if (kind == "nvtx") {
    if (arg.empty()) throw bad("no range name");
    w.kind = WindowKind::Nvtx;
    w.nvtx_name = std::string(arg);
  } else if (kind == "steps") {
    auto dash = arg.find('-');
    auto a = to_int(arg.substr(0, dash));
    auto b = dash == std::string_view::npos ? a : to_int(arg.substr(dash + 1));
    if (!a || !b || *a < 0 || *b < *a) throw bad("expected steps:A-B with 0 <= A <= B");
    w.kind = WindowKind::Steps;
    w.first_step = *a;
    w.last_step = *b;
  } else if (kind == "duration") {
    auto at = arg.find('@');
    auto d = to_double(arg.substr(0, at));
    auto delay = at == std::string_view::npos ? std::optional<double>(0)
                                              : to_double(arg.substr(at + 1));
    if (!d || *d <= 0 || !delay) throw bad("expected duration:SECONDS[@DELAY] with SECONDS > 0");
    w.kind = WindowKind::Duration;
    w.duration_s = *d;
    w.delay_s = *delay;
  } else {
    throw bad("unknown kind '" + std::string(kind) + "'");
  }
  return w;
}

std::string to_string(const WindowSpec& w) {
  switch (w.kind) {
    case WindowKind::All: return "all";
    case WindowKind::ProfilerApi: return "cuda-profiler-api";
    case WindowKind::Nvtx: return "nvtx:" + w.nvtx_name;
    case WindowKind::Steps:
      return "steps:" + std::to_string(w.first_step) + "-" + std::to_string(w.last_step);
    case WindowKind::Daemon: return "daemon";
    case WindowKind::Duration: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "duration:%g@%g", w.duration_s, w.delay_s);
      return buf;
    }
  }
  return "all";
}

namespace {
// Whether `s` starts with `lower_prefix` (lower case), ignoring case. No allocation: the agent's
// NVTX handlers ask for every range a steps window could start on.
bool starts_with_nocase(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (size_t i = 0; i < lower_prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != lower_prefix[i]) return false;
  return true;
}
}  // namespace

std::optional<int64_t> step_from_range_name(std::string_view name) {
  std::string_view rest;
  for (std::string_view prefix : {"profilerstep#", "step#", "step_", "step "}) {
    if (starts_with_nocase(name, prefix)) {
      rest = name.substr(prefix.size());
      break;
    }
  }
  if (rest.empty()) return std::nullopt;
  auto v = to_int(rest);
  if (!v || *v < 0) return std::nullopt;
  return v;
}

bool is_recorded_api(std::string_view name) {
  static constexpr std::string_view kPrefixes[] = {
      "cudaLaunch", "cudaMemcpy", "cudaMemset", "cudaGraphLaunch", "cudaStreamWaitEvent",
      "cudaEventRecord", "cudaStreamSynchronize", "cudaEventSynchronize",
      "cudaDeviceSynchronize", "cuLaunch", "cuMemcpy", "cuMemset", "cuGraphLaunch",
      "cuStreamWaitEvent", "cuEventRecord", "cuStreamSynchronize", "cuEventSynchronize",
      "cuCtxSynchronize"};
  for (auto p : kPrefixes)
    if (name.substr(0, p.size()) == p) return true;
  return false;
}

TraceSet parse_trace(std::string_view text) {
  if (text == "all") return TraceSet{};
  TraceSet t{false, false, false, false};
  bool any = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string_view word =
        text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    if (word == "cuda")
      t.cuda = true;
    else if (word == "nvtx")
      t.nvtx = true;
    else if (word == "nccl")
      t.nccl = true;
    else if (word == "api")
      t.api = true;
    else
      throw Error(ErrorCode::Usage, "--trace '" + std::string(text) + "': unknown '" +
                                        std::string(word) +
                                        "' (choose from cuda, nvtx, nccl, api)");
    any = true;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (!any) throw Error(ErrorCode::Usage, "--trace: empty");
  return t;
}

CuptiPolicy parse_cupti_policy(std::string_view text) {
  if (text == "yield") return CuptiPolicy::Yield;
  if (text == "hold") return CuptiPolicy::Hold;
  throw Error(ErrorCode::Usage, "--cupti '" + std::string(text) + "': expected yield or hold");
}

const char* to_string(CuptiPolicy p) { return p == CuptiPolicy::Hold ? "hold" : "yield"; }

std::string to_string(const TraceSet& t) {
  std::string out;
  for (auto [on, name] :
       {std::pair{t.cuda, "cuda"}, {t.nvtx, "nvtx"}, {t.nccl, "nccl"}, {t.api, "api"}})
    if (on) out += (out.empty() ? "" : ",") + std::string(name);
  return out;
}

CaptureConfig config_from_env(const GetEnv& getenv) {
  CaptureConfig c;
  const char* out = getenv("BRAID_CAPTURE_OUTPUT");
  c.enabled = out && *out;
  if (c.enabled) c.output = out;
  if (const char* a = getenv("BRAID_CAPTURE_ATTACH"); a && *a) {
    // Attach mode wins over a file output: the daemon decides what is captured and where.
    c.enabled = true;
    c.attach_socket = a;
    c.output.clear();
    c.window = WindowSpec{};
    c.window.kind = WindowKind::Daemon;
    const char* job = getenv("BRAID_CAPTURE_JOB");
    c.job = job && *job ? job : "job";
  }
  if (const char* w = getenv("BRAID_CAPTURE_WINDOW"); w && *w && !c.attach()) {
    try {
      c.window = parse_window(w);
    } catch (const Error&) {
      c.window = WindowSpec{};  // braid record validated it; a hand-set bad value captures all
    }
  }
  if (const char* t = getenv("BRAID_CAPTURE_TRACE"); t && *t) {
    try {
      c.trace = parse_trace(t);
    } catch (const Error&) {
      c.trace = TraceSet{};  // braid record validated it; a hand-set bad value records all
    }
  }
  if (const char* p = getenv("BRAID_CAPTURE_CUPTI"); p && *p) {
    try {
      c.cupti = parse_cupti_policy(p);
    } catch (const Error&) {
      c.cupti = CuptiPolicy::Yield;  // braid record validated it; a hand-set bad value yields
    }
  }
  if (const char* cmd = getenv("BRAID_CAPTURE_COMMAND")) c.command = cmd;
  int mb = env_int(getenv, "BRAID_CAPTURE_BUFFER_MB", 8);
  c.buffer_bytes = static_cast<size_t>(std::clamp(mb, 1, 10)) << 20;
  c.max_buffers = static_cast<size_t>(std::max(1, env_int(getenv, "BRAID_CAPTURE_MAX_BUFFERS", 64)));
  c.prealloc_buffers = std::min<size_t>(c.max_buffers, 4);
  c.flush_ms = std::max(10, env_int(getenv, "BRAID_CAPTURE_FLUSH_MS", 500));
  c.recalibrate_ms = std::max(10, env_int(getenv, "BRAID_CAPTURE_RECALIBRATE_MS", 2000));
  return c;
}

std::string output_path_for(const std::string& output, int rank, long pid) {
  std::filesystem::path p(output);
  std::string stem = p.stem().string(), ext = p.extension().string();
  if (ext.empty()) ext = ".braid";
  std::string tag = rank >= 0 ? ".rank" + std::to_string(rank) : ".pid" + std::to_string(pid);
  return (p.parent_path() / (stem + tag + ext)).string();
}

WindowController::WindowController(WindowSpec spec) : spec_(std::move(spec)) {
  enabled_ = spec_.kind == WindowKind::All ||
             (spec_.kind == WindowKind::Duration && spec_.delay_s <= 0);
}

std::optional<bool> WindowController::set(bool on) {
  if (finished_ || on == enabled_) return std::nullopt;
  enabled_ = on;
  return on;
}

std::optional<bool> WindowController::on_profiler_api(bool start) {
  if (spec_.kind != WindowKind::ProfilerApi) return std::nullopt;
  return set(start);  // cudaProfilerStart/Stop pairs may repeat: each opens a window
}

std::optional<bool> WindowController::on_range_start(std::string_view name) {
  if (spec_.kind == WindowKind::Nvtx && name == spec_.nvtx_name) {
    if (depth_++ == 0) return set(true);
  } else if (spec_.kind == WindowKind::Steps) {
    auto step = step_from_range_name(name);
    if (!step) return std::nullopt;
    if (steps_to_arm_ > 0) {  // attach mode: the window's steps count from this one
      spec_.first_step = *step;
      spec_.last_step = *step + steps_to_arm_ - 1;
      steps_to_arm_ = 0;
    }
    if (*step >= spec_.first_step && *step <= spec_.last_step) return set(true);
    if (*step > spec_.last_step) {
      auto r = set(false);
      finished_ = true;
      return r;
    }
  }
  return std::nullopt;
}

std::optional<bool> WindowController::on_range_end(std::string_view name) {
  if (spec_.kind == WindowKind::Nvtx && name == spec_.nvtx_name && depth_ > 0) {
    if (--depth_ == 0) return set(false);
  } else if (spec_.kind == WindowKind::Steps) {
    auto step = step_from_range_name(name);
    if (step && *step == spec_.last_step) {
      auto r = set(false);
      finished_ = true;
      return r;
    }
  }
  return std::nullopt;
}

std::optional<bool> WindowController::open_duration() {
  steps_to_arm_ = 0;
  spec_.kind = WindowKind::Daemon;  // open until close(): the daemon times duration windows
  finished_ = false;
  return set(true);
}

void WindowController::open_steps(int64_t n) {
  auto closed = set(false);
  (void)closed;
  spec_.kind = WindowKind::Steps;
  spec_.first_step = spec_.last_step = -1;
  steps_to_arm_ = std::max<int64_t>(1, n);
  finished_ = false;
}

std::optional<bool> WindowController::close() {
  steps_to_arm_ = 0;
  auto r = set(false);
  if (spec_.kind == WindowKind::Steps || spec_.kind == WindowKind::Daemon) {
    spec_.kind = WindowKind::Daemon;
    finished_ = false;  // the daemon may open another window later
  } else {
    finished_ = true;
  }
  return r;
}

std::optional<bool> WindowController::on_range_start_id(uint64_t id, std::string_view name) {
  // Ranges a program starts and never ends must not grow this without bound.
  if (started_.size() >= (1u << 16)) started_.clear();
  started_[id] = std::string(name);
  return on_range_start(name);
}

std::optional<bool> WindowController::on_range_end_id(uint64_t id) {
  auto it = started_.find(id);
  if (it == started_.end()) return std::nullopt;
  std::string name = std::move(it->second);
  started_.erase(it);
  return on_range_end(name);
}

std::optional<bool> WindowController::on_tick(double t) {
  if (spec_.kind != WindowKind::Duration) return std::nullopt;
  if (t >= spec_.delay_s + spec_.duration_s) {
    auto r = set(false);
    finished_ = true;
    return r;
  }
  if (t >= spec_.delay_s) return set(true);
  return std::nullopt;
}

}  // namespace braid::capture

#include "capture/launcher.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "trace/error.h"

namespace fs = std::filesystem;

namespace braid::capture {
namespace {

// The agent this braid injects (docs/capture.md, "Installing"): BRAID_CAPTURE_LIB when it is set;
// else the one installed with this braid, found from its own executable (BRAID_AGENT_FROM_EXE, the
// install layout's path from bin/ to lib/braid/libbraid_capture.so), so a braid installed under
// any prefix or moved with its tree finds its own; else the build tree's (BRAID_CAPTURE_LIB at
// build time), for a braid run where it was built. `path` is the first of `looked` that exists.
struct AgentLookup {
  std::vector<std::string> looked;
  std::string path;
  bool from_env = false;
};

AgentLookup find_agent() {
  AgentLookup a;
  if (const char* p = std::getenv("BRAID_CAPTURE_LIB"); p && *p) {
    a.from_env = true;
    a.looked.push_back(p);
  } else {
#ifdef BRAID_AGENT_FROM_EXE
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) a.looked.push_back((self.parent_path() / BRAID_AGENT_FROM_EXE).lexically_normal());
#endif
#ifdef BRAID_CAPTURE_LIB
    a.looked.push_back(BRAID_CAPTURE_LIB);
#endif
  }
  std::error_code ec;
  for (const std::string& p : a.looked)
    if (fs::is_regular_file(p, ec)) {
      a.path = p;
      break;
    }
  return a;
}

// The agent found, else where it was looked for first ("" when braid was built without one).
std::string agent_path() {
  AgentLookup a = find_agent();
  return a.path.empty() && !a.looked.empty() ? a.looked.front() : a.path;
}

// Why no agent can be injected, or "" when one was found.
std::string agent_missing(const AgentLookup& a) {
  if (!a.path.empty()) return "";
  if (a.looked.empty())
    return "this braid was built without the capture agent (no CUDA toolkit with CUPTI at build "
           "time)";
  if (a.from_env) return "the capture agent " + a.looked[0] + " (BRAID_CAPTURE_LIB) is missing";
  std::string where;
  for (const std::string& p : a.looked) where += (where.empty() ? "" : ", then ") + p;
  return "the capture agent is missing (looked for " + where + "; BRAID_CAPTURE_LIB names another)";
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& a : v) {
    if (!s.empty()) s += ' ';
    bool plain = !a.empty() && a.find_first_of(" \t\"'\\$`") == std::string::npos;
    s += plain ? a : "'" + a + "'";
  }
  return s;
}

pid_t g_child = -1;
extern "C" void forward_signal(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

}  // namespace

std::string capture_unavailable_reason() {
  if (std::string missing = agent_missing(find_agent()); !missing.empty()) return missing;
  // The driver, as the job would load it. Probing in this process is harmless: the command
  // runs in a fresh process image.
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    const char* e = dlerror();
    return std::string("no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded") +
           (e ? std::string(": ") + e : "") + ")";
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using NameFn = int (*)(int, const char**);
  auto init = reinterpret_cast<InitFn>(dlsym(cuda, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(cuda, "cuDeviceGetCount"));
  auto err_name = reinterpret_cast<NameFn>(dlsym(cuda, "cuGetErrorName"));
  if (!init || !count) return "libcuda.so.1 lacks cuInit/cuDeviceGetCount";
  if (int rc = init(0); rc != 0) {
    const char* name = nullptr;
    if (err_name) err_name(rc, &name);
    return "the CUDA driver cannot initialize (cuInit: " +
           std::string(name ? name : "error " + std::to_string(rc)) + ")";
  }
  int n = 0;
  if (count(&n) != 0 || n == 0)
    return "no GPU is visible (cuDeviceGetCount found none; check CUDA_VISIBLE_DEVICES)";
  return "";
}

std::vector<std::pair<std::string, std::string>> capture_environment(const RecordOptions& o) {
  std::vector<std::pair<std::string, std::string>> env;
  std::string lib = agent_path();
  env.emplace_back("CUDA_INJECTION64_PATH", lib);
  const char* preload = std::getenv("LD_PRELOAD");
  env.emplace_back("LD_PRELOAD", preload && *preload ? lib + ":" + preload : lib);
  // NCCL >= 2.23 loads its profiler plugin from here; the same library serves as one.
  if (const char* p = std::getenv("NCCL_PROFILER_PLUGIN"); !p || !*p)
    env.emplace_back("NCCL_PROFILER_PLUGIN", lib);
  // NVTX ranges reach CUPTI only through NVTX's injection hook. The agent serves it and hands NVTX
  // to the libcupti it loaded in the job (not one named at build time, which may be another copy).
  if (const char* p = std::getenv("NVTX_INJECTION64_PATH"); !p || !*p)
    env.emplace_back("NVTX_INJECTION64_PATH", lib);
  if (o.attach) {
    env.emplace_back("BRAID_CAPTURE_ATTACH", o.socket);
    env.emplace_back("BRAID_CAPTURE_JOB",
                     o.job.empty() ? default_job_id(o.command, [](const char* n) { return std::getenv(n); })
                                   : o.job);
  } else {
    env.emplace_back("BRAID_CAPTURE_OUTPUT", fs::absolute(o.output).string());
    env.emplace_back("BRAID_CAPTURE_WINDOW", to_string(o.window));
  }
  env.emplace_back("BRAID_CAPTURE_TRACE", to_string(o.trace));
  env.emplace_back("BRAID_CAPTURE_CUPTI", to_string(o.cupti));
  env.emplace_back("BRAID_CAPTURE_COMMAND", join(o.command));
  env.emplace_back("BRAID_CAPTURE_BUFFER_MB", std::to_string(o.buffer_mb));
  env.emplace_back("BRAID_CAPTURE_MAX_BUFFERS", std::to_string(o.max_buffers));
  return env;
}

std::string default_job_id(const std::vector<std::string>& command, const GetEnv& getenv) {
  if (const char* s = getenv("SLURM_JOB_ID"); s && *s) return std::string("slurm-") + s;
  if (const char* t = getenv("TORCHELASTIC_RUN_ID"); t && *t && std::string(t) != "none") return t;
  // torchrun train.py, python -m ..., mpirun -n 8 python train.py: the script names the job.
  for (size_t i = 1; i < command.size(); ++i) {
    fs::path a(command[i]);
    std::string ext = a.extension().string();
    if (command[i].rfind("-", 0) != 0 && (ext == ".py" || ext == ".sh"))
      return a.stem().string();
  }
  if (command.empty()) return "job";
  std::string name = fs::path(command[0]).filename().string();
  return name.empty() ? "job" : name;
}

std::vector<std::string> recorded_files(const std::string& output) {
  fs::path p = fs::absolute(output);
  std::string stem = p.stem().string(), ext = p.extension().string();
  if (ext.empty()) ext = ".braid";
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(p.parent_path(), ec)) {
    std::string name = e.path().filename().string();
    for (const char* tag : {".rank", ".pid"}) {
      std::string prefix = stem + tag;
      if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + ext.size() ||
          name.compare(name.size() - ext.size(), ext.size(), ext) != 0)
        continue;
      std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - ext.size());
      if (!mid.empty() && std::all_of(mid.begin(), mid.end(), ::isdigit))
        out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

int record(const RecordOptions& o) {
  if (o.command.empty()) throw Error(ErrorCode::Usage, "record: no command given (braid record -- CMD ...)");
  if (o.buffer_mb < 1 || o.buffer_mb > 10)
    throw Error(ErrorCode::Usage, "record: --buffer-mb must be between 1 and 10");
  if (o.max_buffers < 1) throw Error(ErrorCode::Usage, "record: --max-buffers must be positive");
  if (o.attach && o.socket.empty()) throw Error(ErrorCode::Usage, "record: --attach needs a socket");
  fs::path out = fs::absolute(o.output);
  std::error_code ec;
  std::string reason;
  bool capture = false;
  if (o.attach) {
    // Attach mode writes no file here and needs no GPU to be useful: NCCL calls are captured
    // without CUDA, and a process without a GPU still registers. Only the agent must exist.
    reason = agent_missing(find_agent());
    capture = reason.empty();
    if (!capture)
      std::fprintf(stderr, "braid record: attach mode unavailable: %s; the command runs without "
                           "capture\n", reason.c_str());
  } else {
    if (!fs::is_directory(out.parent_path(), ec))
      throw Error(ErrorCode::NotFound,
                  o.output + ": directory " + out.parent_path().string() + " does not exist");
    reason = capture_unavailable_reason();
    capture = reason.empty();
  }
  if (capture && !o.attach) {
    auto old = recorded_files(o.output);
    if (!old.empty() && !o.force)
      throw Error(ErrorCode::Io, old.front() + ": already exists from an earlier recording "
                                               "(use --force to replace it)");
    for (auto& f : old)
      for (const char* sfx : {"", "-wal", "-shm"}) fs::remove(f + sfx, ec);
  }

  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) throw Error(ErrorCode::Io, std::string("record: fork failed: ") + std::strerror(errno));
  if (child == 0) {
    if (capture)
      for (auto& [k, v] : capture_environment(o)) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "braid: error: record: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  // Like a shell waiting for its job: the terminal's Ctrl-C reaches the job, braid stays to
  // report; a SIGTERM sent to braid is passed on.
  g_child = child;
  struct sigaction ign{}, fwd{}, old_int{}, old_quit{}, old_term{};
  ign.sa_handler = SIG_IGN;
  fwd.sa_handler = forward_signal;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  sigaction(SIGTERM, &fwd, &old_term);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  g_child = -1;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 127 && WIFEXITED(status)) return code;  // exec failed; already said why

  if (o.attach) return code;  // the daemon wrote whatever was captured
  if (!capture) {
    std::fprintf(stderr, "braid record: nothing captured: %s; the command ran without capture\n",
                 reason.c_str());
    return code;
  }
  auto files = recorded_files(o.output);
  if (!o.quiet) {
    if (files.empty()) {
      std::fprintf(stderr,
                   "braid record: nothing captured: the command made no CUDA or NCCL calls\n");
    } else {
      std::string list;
      for (auto& f : files) list += (list.empty() ? "" : " ") + fs::path(f).filename().string();
      std::fprintf(stderr, "braid record: wrote %zu file%s in %s: %s%s\n", files.size(),
                   files.size() == 1 ? "" : "s", out.parent_path().c_str(), list.c_str(),
                   files.size() > 1 ? " (combine them with braid merge)" : "");
    }
  }
  return code;
}

}  // namespace braid::capture

#include "app/view/core/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace braid::view {

ChildProcess::ChildProcess(std::vector<std::string> argv) {
  int p[2];
  if (argv.empty() || pipe2(p, O_CLOEXEC) != 0) {
    log_ = argv.empty() ? "no command" : std::string("pipe: ") + std::strerror(errno);
    status_ = 127;
    finished_ = true;
    return;
  }
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    // The child: its own process group (cancel ends mpirun and every rank), output to the pipe.
    setpgid(0, 0);
    dup2(p[1], 1);
    dup2(p[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execvp(args[0], args.data());
    const std::string msg =
        std::string("cannot run ") + args[0] + ": " + std::strerror(errno) + "\n";
    ssize_t n = write(2, msg.data(), msg.size());
    (void)n;
    _exit(127);
  }
  close(p[1]);
  if (pid_ < 0) {
    close(p[0]);
    log_ = std::string("fork: ") + std::strerror(errno);
    status_ = 127;
    finished_ = true;
    return;
  }
  setpgid(pid_, pid_);  // also here: no race with a cancel before the child ran setpgid
  fd_ = p[0];
  thread_ = std::thread([this] { reader(); });
}

void ChildProcess::reader() {
  using clock = std::chrono::steady_clock;
  clock::time_point cancelled_at{};
  bool killed = false, eof = false, exited = false;
  int st = 0;
  char buf[4096];
  while (!(exited && eof)) {
    if (!eof) {
      pollfd pf{fd_, POLLIN, 0};
      if (poll(&pf, 1, 50) > 0) {
        ssize_t n = read(fd_, buf, sizeof buf);
        if (n > 0) {
          std::lock_guard<std::mutex> lock(mu_);
          log_.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          eof = true;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!exited && waitpid(pid_, &st, WNOHANG) == pid_) {
      exited = true;
      // Whatever the group left holding the pipe: read what is there, then stop.
      if (!eof) {
        pollfd pf{fd_, POLLIN, 0};
        while (poll(&pf, 1, 100) > 0) {
          ssize_t n = read(fd_, buf, sizeof buf);
          if (n <= 0) break;
          std::lock_guard<std::mutex> lock(mu_);
          log_.append(buf, static_cast<size_t>(n));
        }
        eof = true;
      }
    }
    if (cancel_ && !exited) {
      if (cancelled_at == clock::time_point{}) {
        cancelled_at = clock::now();
        kill(-pid_, SIGTERM);
      } else if (!killed && clock::now() - cancelled_at > std::chrono::seconds(2)) {
        kill(-pid_, SIGKILL);
        killed = true;
      }
    }
  }
  // The rest of the group (ranks mpirun left behind) ends with the job.
  if (cancel_) kill(-pid_, SIGKILL);
  close(fd_);
  fd_ = -1;
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
  finished_ = true;
}

ChildProcess::~ChildProcess() {
  if (!finished_) cancel();
  if (thread_.joinable()) thread_.join();
}

void ChildProcess::cancel() {
  if (pid_ > 0 && !finished_) cancel_ = true;
}

std::string ChildProcess::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

std::vector<std::string> ab_command(const AbRequest& r) {
  std::vector<std::string> v;
  if (r.backend != AbBackend::Sim) {
    v = {r.mpirun, "--oversubscribe", "--allow-run-as-root", "-np", std::to_string(r.ranks)};
  }
  v.insert(v.end(), {r.braid, "ab", r.file});
  if (r.baseline >= 0) v.insert(v.end(), {"--baseline", std::to_string(r.baseline)});
  if (r.fused >= 0) v.insert(v.end(), {"--fused", std::to_string(r.fused)});
  v.insert(v.end(), {"--backend", r.backend == AbBackend::Sim   ? "sim"
                                  : r.backend == AbBackend::Mpi ? "mpi"
                                                                : "nccl"});
  v.insert(v.end(), {"--steps", std::to_string(r.steps), "--json"});
  return v;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string o;
  for (const std::string& a : argv) {
    bool plain = !a.empty() && a.find_first_of(" \t\"'\\$`*?;&|<>()") == std::string::npos;
    o += (o.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return o;
}

AbOutcome parse_ab_output(const std::string& log) {
  AbOutcome o;
  // `braid ab --json` prints one JSON object (docs/cli.md, "JSON output"), from a line that
  // starts with '{' to the last line that is '}'; anything else in the log is mpirun's or an
  // error on stderr.
  const size_t open = log.rfind("\n{") != std::string::npos ? log.rfind("\n{") + 1
                      : log.rfind('{', 0) == 0              ? 0
                                                            : std::string::npos;
  const size_t close = log.rfind("\n}");
  std::string outside = log;
  if (open != std::string::npos && close != std::string::npos && close > open) {
    const std::string text = log.substr(open, close + 2 - open);
    outside = log.substr(0, open) + log.substr(close + 2);
    simdjson::dom::parser p;
    simdjson::dom::element doc;
    if (p.parse(text).get(doc) == simdjson::SUCCESS) {
      simdjson::dom::array runs;
      if (doc["stored_runs"].get_array().get(runs) == simdjson::SUCCESS && runs.size() == 2) {
        o.baseline_run = int64_t(runs.at(0));
        o.fused_run = int64_t(runs.at(1));
      }
      double sp = 0, p25 = 0, p75 = 0;
      if (doc["speedup"].get_double().get(sp) == simdjson::SUCCESS &&
          doc["speedup_p25"].get_double().get(p25) == simdjson::SUCCESS &&
          doc["speedup_p75"].get_double().get(p75) == simdjson::SUCCESS) {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "speedup %.3fx (paired per-step ratios: 25th %.3fx, 75th percentile %.3fx)",
                      sp, p25, p75);
        o.speedup = buf;
      }
      std::string_view status;
      if (doc["data_check"]["status"].get_string().get(status) == simdjson::SUCCESS) {
        o.data_check = "data check " + std::string(status);
        int64_t n = 0, bufs = 0, bad = 0;
        auto c = doc["data_check"]["fused_vs_baseline"];
        if (c["elements"].get_int64().get(n) == simdjson::SUCCESS &&
            c["buffers"].get_int64().get(bufs) == simdjson::SUCCESS &&
            c["mismatches"].get_int64().get(bad) == simdjson::SUCCESS)
          o.data_check += status == "passed" ? ": " + std::to_string(n) + " elements of " +
                                                   std::to_string(bufs) + " buffers identical"
                                             : ": " + std::to_string(bad) + " of " +
                                                   std::to_string(n) + " elements differ";
      }
    }
  }
  size_t b = 0;
  while (b < outside.size()) {
    size_t e = outside.find('\n', b);
    if (e == std::string::npos) e = outside.size();
    const std::string line = outside.substr(b, e - b);
    b = e + 1;
    if (o.first_error.empty() &&
        (line.find("error") != std::string::npos || line.find("cannot run") == 0))
      o.first_error = line;
  }
  return o;
}

std::string find_braid_exe() {
  if (const char* e = std::getenv("BRAID_EXE"); e && *e) return e;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // build/app/view/braid-view -> build/app/braid; installed side by side -> ./braid.
    for (const auto& p : {self.parent_path().parent_path() / "braid", self.parent_path() / "braid"})
      if (std::filesystem::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0)
        return p.string();
  }
  return "braid";
}

}  // namespace braid::view

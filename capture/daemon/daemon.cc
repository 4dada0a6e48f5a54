#include "capture/daemon/daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "capture/daemon/records_codec.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/json.h"

namespace braid::daemon {

namespace fs = std::filesystem;

struct Daemon::Conn {
  uint64_t id = 0;
  int fd = -1;
  uid_t uid = 0;
  enum class Role { Unknown, Agent, Client } role = Role::Unknown;
  FrameReader in;
  std::string out;
  size_t out_pos = 0;
  bool closing = false;  // drop after the queued bytes are sent
  Hello hello;           // agents
  int64_t connected_ms = 0;
  std::unordered_map<uint64_t, std::unordered_map<StrId, StrId>> strings;  // per capture
};

struct Daemon::Capture {
  uint64_t id = 0;
  std::string job, path;
  WindowMode mode = WindowMode::Duration;
  int64_t value = 0;
  int64_t started_ms = 0, deadline_ms = 0, grace_until_ms = -1;
  int64_t grace_cap_ms = -1;  // the latest grace_until_ms may move to (close + close_max_ms)
  std::unique_ptr<capture::FileSink> sink;
  std::map<uint64_t, int32_t> pending;  // agent conn id -> rank, until its done
  // Every agent of the capture -> the rank its rows are stored under in this file. An agent's
  // items are all written under it, so a renumber moves that agent's rows and nobody else's.
  std::map<uint64_t, int32_t> ranks;
  std::set<uint64_t> rank_conflicts;  // agents already diagnosed daemon.rank_conflict
  uint32_t agents = 0, lost = 0;
  int64_t records = 0, dropped = 0;
  uint64_t client = 0;  // conn to notify, 0 if none
  std::vector<std::string> notes;
};

std::string default_socket_path() {
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
    return std::string(x) + "/braid/daemon.sock";
  if (geteuid() == 0) return "/run/braid/daemon.sock";
  return "/tmp/braid-" + std::to_string(geteuid()) + "/daemon.sock";
}

namespace {

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string safe_name(std::string s) {
  for (char& ch : s)
    if (!(isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) ch = '_';
  if (s.empty() || s[0] == '.') s = "job" + s;
  return s;
}

std::string window_text(WindowMode m, int64_t v) {
  if (m == WindowMode::Steps) return std::to_string(v) + " steps";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f s", double(v) / 1e9);
  return buf;
}

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

Daemon::Daemon(DaemonOptions opts) : opts_(std::move(opts)) {
  if (opts_.socket_path.empty()) opts_.socket_path = default_socket_path();
  if (opts_.out_dir.empty()) opts_.out_dir = ".";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (opts_.socket_path.size() >= sizeof(addr.sun_path))
    throw Error(ErrorCode::Usage, opts_.socket_path + ": socket path too long");
  std::strcpy(addr.sun_path, opts_.socket_path.c_str());

  fs::path dir = fs::path(opts_.socket_path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) throw Error(ErrorCode::Io, dir.string() + ": cannot create (" + ec.message() + ")");
    chmod(dir.c_str(), 0700);
  }
  // Another daemon already serving? Then refuse; a stale socket file is removed.
  if (fs::exists(opts_.socket_path, ec)) {
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0) close(probe);
    if (live)
      throw Error(ErrorCode::Usage,
                  opts_.socket_path + ": another braid daemon is already listening there");
    unlink(opts_.socket_path.c_str());
  }
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw Error(ErrorCode::Io, std::string("socket: ") + std::strerror(errno));
  // Owner-only from the moment it exists: bind under a restrictive umask, then chmod.
  mode_t old = umask(0177);
  int rc = bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  umask(old);
  if (rc != 0) {
    close(listen_fd_);
    throw Error(ErrorCode::Io, opts_.socket_path + ": cannot bind (" + std::strerror(err) + ")");
  }
  chmod(opts_.socket_path.c_str(), 0600);
  if (listen(listen_fd_, 128) != 0) {
    close(listen_fd_);
    throw Error(ErrorCode::Io, opts_.socket_path + ": cannot listen");
  }
  set_nonblocking(listen_fd_);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(listen_fd_);
    throw Error(ErrorCode::Io, "pipe2 failed");
  }
}

Daemon::~Daemon() {
  for (auto& [id, c] : conns_)
    if (c->fd >= 0) close(c->fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(opts_.socket_path.c_str());
  }
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
}

void Daemon::stop() {
  stop_ = true;
  char b = 1;
  [[maybe_unused]] auto n = write(wake_[1], &b, 1);
}

DaemonStats Daemon::stats() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  return stats_;
}

void Daemon::count(int64_t DaemonStats::*counter, int64_t n) {
  std::lock_guard<std::mutex> l(stats_mu_);
  stats_.*counter += n;
}

void Daemon::log(const std::string& line) const {
  if (opts_.log) opts_.log(line);
}

int64_t Daemon::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Daemon::run() {
  log("listening on " + opts_.socket_path + ", captures go to " + opts_.out_dir);
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stop_) {
    fds.clear();
    ids.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_[0], POLLIN, 0});
    for (auto& [id, c] : conns_) {
      short ev = POLLIN;
      if (c->out_pos < c->out.size()) ev |= POLLOUT;
      fds.push_back({c->fd, ev, 0});
      ids.push_back(id);
    }
    int64_t timeout = 1000;
    int64_t now = now_ms();
    for (auto& [id, cap] : captures_) {
      int64_t t = cap->grace_until_ms >= 0 ? cap->grace_until_ms : cap->deadline_ms;
      timeout = std::min(timeout, std::max<int64_t>(0, t - now));
    }
    int n = poll(fds.data(), fds.size(), static_cast<int>(timeout));
    if (n < 0 && errno != EINTR) throw Error(ErrorCode::Io, std::string("poll: ") + std::strerror(errno));
    if (n > 0) {
      if (fds[1].revents & POLLIN) {
        char buf[64];
        while (read(wake_[0], buf, sizeof buf) > 0) {
        }
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        auto it = conns_.find(ids[i]);
        if (it == conns_.end()) continue;
        Conn& c = *it->second;
        short re = fds[i + 2].revents;
        if (re & POLLOUT) write_pending(c);
        if (re & (POLLIN | POLLHUP | POLLERR)) on_readable(c);
      }
      if (fds[0].revents & POLLIN) accept_new();
    }
    check_deadlines();
    // Close connections marked for closing once their queue drained (or at once when dead).
    for (auto it = conns_.begin(); it != conns_.end();) {
      Conn& c = *it->second;
      if (c.closing && (c.out_pos >= c.out.size() || c.fd < 0)) {
        if (c.fd >= 0) close(c.fd);
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Shutting down: finish every capture with what it has.
  for (auto& [id, c] : conns_)
    if (c->role == Conn::Role::Agent) agent_gone(*c, "daemon stopping");
  for (auto& [id, c] : conns_) {
    write_pending(*c);
    if (c->fd >= 0) close(c->fd);
  }
  conns_.clear();
  log("stopped");
}

void Daemon::accept_new() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: all accepted
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(fd);
      continue;
    }
    auto c = std::make_unique<Conn>();
    c->id = next_conn_++;
    c->fd = fd;
    c->uid = cred.uid;
    c->connected_ms = now_ms();
    Conn& ref = *c;
    conns_.emplace(c->id, std::move(c));
    if (cred.uid != geteuid() && cred.uid != 0) {
      count(&DaemonStats::refused_peers);
      log("refused a connection from uid " + std::to_string(cred.uid) + " (pid " +
          std::to_string(cred.pid) + ")");
      send(ref, encode_error("permission denied: uid " + std::to_string(cred.uid) +
                             " is neither the daemon's user (uid " + std::to_string(geteuid()) +
                             ") nor root"));
      drop(ref, "");
    }
  }
}

void Daemon::on_readable(Conn& c) {
  if (c.fd < 0) return;
  char buf[65536];
  for (;;) {
    ssize_t n = read(c.fd, buf, sizeof buf);
    if (n > 0) {
      if (c.closing) continue;  // discard input from a peer being dropped
      c.in.feed(buf, static_cast<size_t>(n));
      try {
        while (auto f = c.in.next()) {
          on_frame(c, f->type, f->payload);
          if (c.closing || c.fd < 0) break;
        }
      } catch (const ProtocolError& e) {
        count(&DaemonStats::protocol_errors);
        send(c, encode_error(std::string("protocol error: ") + e.what()));
        if (c.role == Conn::Role::Agent) agent_gone(c, std::string("protocol error: ") + e.what());
        drop(c, std::string("protocol error: ") + e.what());
        return;
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    // EOF or error: the peer is gone.
    if (c.role == Conn::Role::Agent) agent_gone(c, "disconnected");
    for (auto& [id, cap] : captures_)
      if (cap->client == c.id) cap->client = 0;
    close(c.fd);
    c.fd = -1;
    c.closing = true;
    return;
  }
}

void Daemon::on_frame(Conn& c, MsgType type, std::string_view p) {
  switch (type) {
    case MsgType::Hello:
      if (c.role != Conn::Role::Unknown) throw ProtocolError("hello sent twice");
      return on_hello(c, p);
    case MsgType::Records:
      if (c.role != Conn::Role::Agent) throw ProtocolError("records from an unregistered peer");
      return on_records(c, p);
    case MsgType::Done:
      if (c.role != Conn::Role::Agent) throw ProtocolError("done from an unregistered peer");
      return on_done(c, p);
    case MsgType::Rank:
      if (c.role != Conn::Role::Agent) throw ProtocolError("rank from an unregistered peer");
      return on_rank(c, p);
    case MsgType::Trigger:
      if (c.role == Conn::Role::Agent) throw ProtocolError("agents cannot trigger captures");
      c.role = Conn::Role::Client;
      return on_trigger(c, p);
    case MsgType::StatusRequest:
      if (c.role == Conn::Role::Agent) throw ProtocolError("agents cannot ask for status");
      c.role = Conn::Role::Client;
      send(c, encode_status(status_json()));
      return;
    case MsgType::Error:
      log("peer " + std::to_string(c.id) + " reported: " + decode_text(p));
      if (c.role == Conn::Role::Agent) agent_gone(c, "reported an error");
      drop(c, "");
      return;
    default:
      throw ProtocolError("unexpected " + std::string(to_string(type)) + " message");
  }
}

void Daemon::on_hello(Conn& c, std::string_view p) {
  Hello h = decode_hello(p);
  if (h.version != kProtocolVersion) {
    send(c, encode_error("protocol version " + std::to_string(h.version) +
                         " is not supported: this daemon speaks version " +
                         std::to_string(kProtocolVersion)));
    drop(c, "");
    return;
  }
  if (h.job_id.empty()) throw ProtocolError("hello without a job id");
  c.role = Conn::Role::Agent;
  c.hello = std::move(h);
  count(&DaemonStats::agents_registered);
  count(&DaemonStats::agents_now);
  send(c, encode(Welcome{kProtocolVersion, c.id}));
  log("agent " + std::to_string(c.id) + " registered: job " + c.hello.job_id + " rank " +
      std::to_string(c.hello.rank) + " pid " + std::to_string(c.hello.pid));
}

void Daemon::on_trigger(Conn& c, std::string_view p) {
  Trigger t = decode_trigger(p);
  std::set<std::string> jobs;
  for (auto& [id, a] : conns_)
    if (a->role == Conn::Role::Agent && !a->closing) jobs.insert(a->hello.job_id);
  auto list = [&] {
    std::string s;
    for (const auto& j : jobs) s += (s.empty() ? "" : ", ") + j;
    return s;
  };
  if (t.job_id.empty()) {
    if (jobs.empty()) return send(c, encode_error("no agents are registered with this daemon"));
    if (jobs.size() > 1)
      return send(c, encode_error("several jobs are registered (" + list() + "): name one with --job"));
    t.job_id = *jobs.begin();
  } else if (!jobs.count(t.job_id)) {
    return send(c, encode_error("no registered process of job '" + t.job_id + "'" +
                                (jobs.empty() ? std::string(" (no agents are registered)")
                                              : " (registered jobs: " + list() + ")")));
  }
  for (auto& [id, cap] : captures_)
    if (cap->job == t.job_id)
      return send(c, encode_error("capture " + std::to_string(cap->id) + " of job '" + t.job_id +
                                  "' is still in progress"));
  std::string dir = t.out_dir.empty() ? opts_.out_dir : t.out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return send(c, encode_error(dir + ": cannot create the output directory (" + ec.message() + ")"));

  auto cap = std::make_unique<Capture>();
  cap->id = next_capture_++;
  cap->job = t.job_id;
  cap->mode = t.mode;
  cap->value = t.value;
  cap->started_ms = now_ms();
  int64_t span_ms = t.mode == WindowMode::Duration ? (t.value + 999'999) / 1'000'000
                                                  : opts_.steps_timeout_ms;
  cap->deadline_ms = cap->started_ms + span_ms;
  // Never reuse a name: capture ids restart with the daemon, earlier captures must survive.
  {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char ts[32];
    std::strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tm);
    std::string stem = safe_name(t.job_id) + "." + safe_name(hostname()) + "." + ts + ".capture" +
                       std::to_string(cap->id);
    cap->path = (fs::path(dir) / (stem + ".braid")).string();
    for (int k = 2; fs::exists(cap->path, ec); ++k)
      cap->path = (fs::path(dir) / (stem + "-" + std::to_string(k) + ".braid")).string();
  }
  try {
    mode_t old = umask(0077);  // owner-only output, -wal and -shm included
    capture::FileSinkOptions fo;
    fo.source = "braid daemon: job " + t.job_id + ", window " + window_text(t.mode, t.value);
    fo.backend = "cupti";
    fo.label = "daemon capture " + std::to_string(cap->id);
    try {
      cap->sink = std::make_unique<capture::FileSink>(cap->path, fo);
    } catch (...) {
      umask(old);
      throw;
    }
    umask(old);
    chmod(cap->path.c_str(), 0600);
  } catch (const std::exception& e) {
    return send(c, encode_error(std::string("cannot create the capture file: ") + e.what()));
  }
  cap->sink->set_meta("capture.job", t.job_id);
  cap->sink->set_meta("capture.window", window_text(t.mode, t.value));
  cap->sink->set_meta("capture.host", hostname());
  cap->sink->set_meta("capture.complete", "0");
  cap->client = c.id;
  Open open{cap->id, t.mode, t.value};
  // A process that does not know its rank yet gets a provisional one of its own (-2, -3, ...):
  // its rows must not mix with those of a real rank (its agent writes rank 0 until it knows).
  int32_t provisional = -2;
  for (auto& [id, a] : conns_) {
    if (a->role != Conn::Role::Agent || a->closing || a->hello.job_id != t.job_id) continue;
    int32_t rank = a->hello.rank >= 0 ? a->hello.rank : provisional--;
    cap->pending.emplace(id, rank);
    cap->ranks.emplace(id, rank);
    send(*a, encode(open));
  }
  cap->agents = static_cast<uint32_t>(cap->pending.size());
  cap->sink->checkpoint();
  count(&DaemonStats::captures_started);
  log("capture " + std::to_string(cap->id) + " of job " + t.job_id + " started (" +
      window_text(t.mode, t.value) + ", " + std::to_string(cap->agents) + " processes) -> " +
      cap->path);
  send(c, encode(Triggered{cap->id, cap->agents, t.job_id, cap->path}));
  captures_.emplace(cap->id, std::move(cap));
}

void Daemon::on_records(Conn& c, std::string_view p) {
  uint64_t id = records_capture_id(p);
  auto it = captures_.find(id);
  if (it == captures_.end() || !it->second->pending.count(c.id)) {
    // Late records of a capture already finished (the agent was counted lost): count, ignore.
    if (id >= next_capture_) throw ProtocolError("records for unknown capture " + std::to_string(id));
    count(&DaemonStats::dropped);
    return;
  }
  Capture& cap = *it->second;
  SenderRank sender;
  sender.rank = cap.ranks.at(c.id);
  sender.renumber = [&](int32_t, int32_t to) { sender.rank = rerank(cap, c, to); };
  int64_t rows = apply_records(p, *cap.sink, c.strings[id], sender);
  cap.records += rows;
  // An agent still sending after the close is waited for (DaemonOptions::close_grace_ms).
  if (cap.grace_until_ms >= 0)
    cap.grace_until_ms =
        std::max(cap.grace_until_ms, std::min(now_ms() + opts_.close_grace_ms, cap.grace_cap_ms));
  count(&DaemonStats::records, rows);
  cap.sink->checkpoint();
}

void Daemon::on_rank(Conn& c, std::string_view p) {
  RankUpdate r = decode_rank(p);
  if (r.rank != c.hello.rank)
    log("agent " + std::to_string(c.id) + " (job " + c.hello.job_id + " pid " +
        std::to_string(c.hello.pid) + ") learnt its rank: " + std::to_string(r.rank));
  c.hello.rank = r.rank;  // `braid status` and the next captures use it
  if (r.world_size > 0) c.hello.world_size = r.world_size;
  for (auto& [id, cap] : captures_)
    if (cap->ranks.count(c.id)) rerank(*cap, c, r.rank);
}

int32_t Daemon::rerank(Capture& cap, const Conn& c, int32_t to) {
  int32_t& cur = cap.ranks.at(c.id);
  if (cur == to) return cur;
  // Rows are told apart by rank only: moving onto a rank another process of this capture holds,
  // or away from one it shares, would mix two processes' rows. Keep them where they are.
  for (const auto& [other, rank] : cap.ranks) {
    if (other == c.id || (rank != to && rank != cur)) continue;
    if (cap.rank_conflicts.insert(c.id).second) {
      auto o = conns_.find(other);
      std::string who = o != conns_.end() ? "process " + std::to_string(o->second->hello.pid)
                                          : "another process";
      std::string detail =
          rank == to ? "process " + std::to_string(c.hello.pid) + " learnt rank " +
                           std::to_string(to) + ", which " + who +
                           " of this capture already holds; its rows keep rank " +
                           std::to_string(cur)
                     : "process " + std::to_string(c.hello.pid) + " learnt rank " +
                           std::to_string(to) + " but shares rank " + std::to_string(cur) +
                           " with " + who + " in this capture; its rows keep rank " +
                           std::to_string(cur);
      cap.sink->set_diagnostic(diag::make(diag::Code::daemon_rank_conflict, 1, detail, cur));
      log("capture " + std::to_string(cap.id) + ": " + detail);
    }
    return cur;
  }
  cap.sink->renumber_rank(cur, to);
  cap.sink->checkpoint();
  if (auto p = cap.pending.find(c.id); p != cap.pending.end()) p->second = to;
  cur = to;
  return cur;
}

void Daemon::on_done(Conn& c, std::string_view p) {
  Done d = decode_done(p);
  auto it = captures_.find(d.capture_id);
  if (it == captures_.end() || !it->second->pending.count(c.id)) return;  // already counted lost
  Capture& cap = *it->second;
  cap.dropped += d.dropped;
  count(&DaemonStats::dropped, d.dropped);
  int32_t rank = cap.pending[c.id];
  if (d.dropped > 0)
    cap.sink->set_diagnostic(diag::make(diag::Code::capture_dropped_records, d.dropped,
                                        "records the agent could not deliver to the daemon", rank));
  cap.pending.erase(c.id);
  c.strings.erase(d.capture_id);
  if (cap.pending.empty()) finish(cap);
}

void Daemon::agent_gone(Conn& c, const std::string& why) {
  if (c.role != Conn::Role::Agent) return;
  c.role = Conn::Role::Unknown;
  count(&DaemonStats::agents_now, -1);
  log("agent " + std::to_string(c.id) + " (job " + c.hello.job_id + " rank " +
      std::to_string(c.hello.rank) + ") gone: " + why);
  std::vector<uint64_t> done;
  for (auto& [id, cap] : captures_) {
    auto it = cap->pending.find(c.id);
    if (it == cap->pending.end()) continue;
    ++cap->lost;
    count(&DaemonStats::agents_lost);
    cap->sink->set_diagnostic(
        diag::make(diag::Code::daemon_agent_lost, 1,
                   "process " + std::to_string(c.hello.pid) + " " + why +
                       " before its window closed; its records up to then are kept",
                   it->second));
    cap->pending.erase(it);
    if (cap->pending.empty()) done.push_back(id);
  }
  for (uint64_t id : done) finish(*captures_.at(id));
}

void Daemon::check_deadlines() {
  int64_t now = now_ms();
  std::vector<uint64_t> expired;
  for (auto& [id, cap] : captures_) {
    if (cap->grace_until_ms < 0 && now >= cap->deadline_ms) {
      for (auto& [agent, rank] : cap->pending)
        if (auto it = conns_.find(agent); it != conns_.end()) send(*it->second, encode(cap->id));
      cap->grace_until_ms = now + opts_.close_grace_ms;
      cap->grace_cap_ms = now + std::max(opts_.close_max_ms, opts_.close_grace_ms);
      if (cap->mode == WindowMode::Steps)
        cap->notes.push_back("the steps window reached the daemon's time limit");
    } else if (cap->grace_until_ms >= 0 && now >= cap->grace_until_ms) {
      expired.push_back(id);
    }
  }
  for (uint64_t id : expired) {
    // Silence is judged at the socket: what a pending agent sent while the daemon was busy with
    // other connections is read first (it may be its last records and its done).
    std::vector<uint64_t> agents;
    for (auto& [agent, rank] : captures_.at(id)->pending) agents.push_back(agent);
    for (uint64_t agent : agents)
      if (auto it = conns_.find(agent); it != conns_.end()) on_readable(*it->second);
    auto still = captures_.find(id);
    if (still == captures_.end()) continue;  // finished by what was read
    Capture& cap = *still->second;
    if (cap.pending.empty() || now_ms() < cap.grace_until_ms) continue;  // it spoke: wait more
    for (auto& [agent, rank] : cap.pending) {
      ++cap.lost;
      count(&DaemonStats::agents_lost);
      cap.sink->set_diagnostic(
          diag::make(diag::Code::daemon_agent_timeout, 1,
                     "no end of window from this process within the grace period "
                     "(silent for --grace-ms, or still sending at --close-max-ms)",
                     rank));
    }
    cap.pending.clear();
    finish(cap);
  }
}

void Daemon::finish(Capture& cap) {
  std::string detail;
  for (const auto& n : cap.notes) detail += (detail.empty() ? "" : "; ") + n;
  cap.sink->set_meta("capture.records", std::to_string(cap.records));
  cap.sink->set_meta("capture.complete", "1");
  if (cap.lost)
    detail += (detail.empty() ? "" : "; ") + std::to_string(cap.lost) + " of " +
              std::to_string(cap.agents) + " processes were lost";
  std::string result = "ok";
  try {
    cap.sink->close();
  } catch (const std::exception& e) {
    result = std::string("error: ") + e.what();
    detail += (detail.empty() ? "" : "; ") + result;
  }
  count(&DaemonStats::captures_completed);
  log("capture " + std::to_string(cap.id) + " finished: " + std::to_string(cap.records) +
      " records, " + std::to_string(cap.dropped) + " dropped, " + std::to_string(cap.lost) +
      " lost -> " + cap.path);
  json::Writer done(json::Writer::Style::Spaced);
  done.begin_object()
      .field("id", cap.id)
      .field("job", cap.job)
      .field("path", cap.path)
      .field("records", cap.records)
      .field("dropped", cap.dropped)
      .field("agents", cap.agents)
      .field("lost", cap.lost)
      .field_fixed("seconds", double(now_ms() - cap.started_ms) / 1e3, 3)
      .end_object();
  completed_.push_back(done.take());
  if (completed_.size() > 32) completed_.erase(completed_.begin());
  if (cap.client)
    if (auto it = conns_.find(cap.client); it != conns_.end())
      send(*it->second, encode(CaptureDone{cap.id, cap.path, cap.records, cap.dropped,
                                           cap.agents, cap.lost, detail}));
  uint64_t id = cap.id;
  captures_.erase(id);  // `cap` is gone after this line
}

void Daemon::send(Conn& c, std::string bytes) {
  if (c.fd < 0) return;
  if (c.out.size() - c.out_pos + bytes.size() > opts_.max_queued_bytes) {
    // A peer that does not read its messages: drop it rather than grow without bound.
    if (c.role == Conn::Role::Agent) agent_gone(c, "stopped reading from the daemon");
    close(c.fd);
    c.fd = -1;
    c.closing = true;
    return;
  }
  c.out.append(bytes);
  write_pending(c);
}

void Daemon::write_pending(Conn& c) {
  while (c.fd >= 0 && c.out_pos < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    close(c.fd);  // the peer is gone; on_readable will not see it again
    c.fd = -1;
    c.closing = true;
    return;
  }
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  }
}

void Daemon::drop(Conn& c, const std::string& why) {
  if (!why.empty()) log("dropping peer " + std::to_string(c.id) + ": " + why);
  c.closing = true;
  if (c.fd >= 0) shutdown(c.fd, SHUT_RD);
}

std::string Daemon::status_json() const {
  const int64_t now = now_ms();
  auto secs = [&](int64_t since) { return double(now - since) / 1e3; };
  constexpr bool kLines = true;
  json::Writer w(json::Writer::Style::Spaced);
  w.begin_object(kLines)
      .key("daemon")
      .begin_object()
      .field("pid", getpid())
      .field("socket", opts_.socket_path)
      .field("out", opts_.out_dir)
      .field("protocol", kProtocolVersion)
      .end_object();
  w.key("agents").begin_array(kLines);
  for (const auto& [id, c] : conns_) {
    if (c->role != Conn::Role::Agent || c->closing) continue;
    const Hello& h = c->hello;
    w.begin_object()
        .field("id", id)
        .field("job", h.job_id)
        .field("rank", h.rank)
        .field("local_rank", h.local_rank)
        .field("world_size", h.world_size)
        .field("pid", h.pid)
        .field("host", h.host)
        .field("devices", h.devices)
        .field_fixed("connected_s", secs(c->connected_ms), 3)
        .end_object();
  }
  w.end_array().key("captures").begin_array(kLines);
  for (const auto& [id, cap] : captures_)
    w.begin_object()
        .field("id", id)
        .field("job", cap->job)
        .field("window", window_text(cap->mode, cap->value))
        .field("agents", cap->agents)
        .field("pending", cap->pending.size())
        .field("records", cap->records)
        .field("path", cap->path)
        .field_fixed("elapsed_s", secs(cap->started_ms), 3)
        .end_object();
  w.end_array().key("completed").begin_array(kLines);
  for (const std::string& c : completed_) w.raw(c);
  w.end_array().end_object();
  return w.take() + "\n";
}

}  // namespace braid::daemon

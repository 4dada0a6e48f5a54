#include "capture/daemon/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "trace/error.h"

namespace braid::daemon {

namespace {

int connect_unix(const std::string& path, int* err) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    *err = ENAMETOOLONG;
    return -1;
  }
  std::strcpy(addr.sun_path, path.c_str());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    *err = errno;
    close(fd);
    return -1;
  }
  return fd;
}

// Sends all of `bytes`. A send that times out (SO_SNDTIMEO: the daemon is not reading, so the
// socket is full) is retried while `patient()` says so; the frame is never left half-sent by a
// timeout it outlives.
template <typename Patient>
bool send_all(int fd, const std::string& bytes, Patient patient) {
  size_t pos = 0;
  auto last_progress = std::chrono::steady_clock::now();
  while (pos < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + pos, bytes.size() - pos, MSG_NOSIGNAL);
    if (n > 0) {
      pos += static_cast<size_t>(n);
      last_progress = std::chrono::steady_clock::now();
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
               patient(std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - last_progress)
                           .count())) {
      continue;
    } else {
      return false;  // EPIPE, ECONNRESET, or no progress for longer than the caller waits
    }
  }
  return true;
}

bool send_all(int fd, const std::string& bytes) {
  return send_all(fd, bytes, [](int64_t) { return false; });
}

}  // namespace

// ---- ClientConnection ----

ClientConnection::ClientConnection(const std::string& socket_path) : path_(socket_path) {
  int err = 0;
  fd_ = connect_unix(socket_path, &err);
  if (fd_ < 0) {
    if (err == ENOENT || err == ECONNREFUSED)
      throw Error(ErrorCode::NotFound, "no braid daemon is listening on " + socket_path +
                                           " (start one with `braid daemon`, or pass --socket)");
    if (err == EACCES)
      throw Error(ErrorCode::Io, socket_path + ": permission denied (the daemon's socket is "
                                               "owner-only: run as the daemon's user or root)");
    throw Error(ErrorCode::Io, socket_path + ": cannot connect (" + std::strerror(err) + ")");
  }
}

ClientConnection::~ClientConnection() {
  if (fd_ >= 0) close(fd_);
}

void ClientConnection::send(const std::string& frame) {
  if (!send_all(fd_, frame))
    throw Error(ErrorCode::Io, path_ + ": the daemon closed the connection");
}

std::optional<FrameReader::Frame> ClientConnection::read(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    try {
      if (auto f = in_.next()) return f;
    } catch (const ProtocolError& e) {
      throw Error(ErrorCode::BadFormat, path_ + ": protocol error from the daemon: " + e.what());
    }
    int wait = -1;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) return std::nullopt;
      wait = static_cast<int>(left);
    }
    pollfd p{fd_, POLLIN, 0};
    int n = poll(&p, 1, wait);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return std::nullopt;
    char buf[65536];
    ssize_t r = ::read(fd_, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(ErrorCode::Io, path_ + ": the daemon closed the connection");
    in_.feed(buf, static_cast<size_t>(r));
  }
}

// ---- AgentClient ----

AgentClient::AgentClient(std::string socket_path, AgentIdentity id, Callbacks cb, int retry_ms)
    : path_(std::move(socket_path)), id_(std::move(id)), cb_(std::move(cb)), retry_ms_(retry_ms) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(ErrorCode::Io, "pipe2 failed");
  thread_ = std::thread([this] { loop(); });
}

AgentClient::~AgentClient() {
  uint64_t open;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    open = open_capture_;
  }
  if (open && registered_) done(open, 0, "agent exiting");
  stop_ = true;
  char b = 1;
  [[maybe_unused]] auto n = write(wake_[1], &b, 1);
  thread_.join();
  int fd = fd_.exchange(-1);
  if (fd >= 0) close(fd);
  close(wake_[0]);
  close(wake_[1]);
}

bool AgentClient::wait_registered(int timeout_ms) {
  std::unique_lock<std::mutex> l(state_mu_);
  return state_cv_.wait_for(l, std::chrono::milliseconds(timeout_ms),
                            [&] { return registered_.load(); });
}

bool AgentClient::send_frame(const std::string& frame) {
  std::lock_guard<std::mutex> l(send_mu_);
  int fd = fd_.load();
  if (fd < 0 || !registered_) return false;
  // A daemon that falls behind (a loaded node, 64 processes sending at once) fills the socket:
  // wait for it, since only this writer thread waits (the job's records queue up in front of
  // it, and are dropped and counted there if the queue fills). A daemon that takes nothing for
  // send_patience_ms counts as hung: give up the connection (the daemon counts this process
  // lost) and keep the job running.
  if (send_all(fd, frame, [this](int64_t stalled_ms) {
        return !stop_.load() && stalled_ms < send_patience_ms_.load();
      }))
    return true;
  shutdown(fd, SHUT_RDWR);  // the reader thread sees the end and cleans up
  return false;
}

void AgentClient::update_rank(int32_t rank, int32_t world_size) {
  {
    std::lock_guard<std::mutex> l(state_mu_);
    if (id_.rank == rank && id_.world_size == world_size) return;
    id_.rank = rank;
    id_.world_size = world_size;
  }
  // Sent by the client's thread: this is a job thread (NCCL's communicator set-up), which must
  // not wait behind a batch going to a slow daemon. Not registered yet: the hello carries it.
  // Lost on the way: the next hello carries it.
  rank_dirty_.store(true);
  char b = 1;
  [[maybe_unused]] auto n = write(wake_[1], &b, 1);
}

void AgentClient::send_rank_if_dirty() {
  if (!rank_dirty_.exchange(false)) return;
  RankUpdate r;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    r = RankUpdate{id_.rank, id_.world_size};
  }
  send_frame(encode(r));
}

void AgentClient::done(uint64_t capture_id, int64_t dropped, const std::string& reason) {
  {
    std::lock_guard<std::mutex> l(state_mu_);
    if (open_capture_ == capture_id) open_capture_ = 0;
  }
  send_frame(encode(Done{capture_id, dropped, reason}));
}

void AgentClient::abandon_in_forked_child() {
  int fd = fd_.exchange(-1);
  if (fd >= 0) close(fd);
  registered_ = false;
}

bool AgentClient::connect_once() {
  int err = 0;
  int fd = connect_unix(path_, &err);
  if (fd < 0) return false;
  // A send into a full socket returns after 250 ms, so send_frame rechecks its patience and stop.
  timeval tv{0, 250'000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  Hello h;
  h.pid = id_.pid;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    h.rank = hello_rank_ = id_.rank;
    h.world_size = hello_world_ = id_.world_size;
  }
  h.local_rank = id_.local_rank;
  h.job_id = id_.job_id;
  h.host = id_.host;
  h.devices = id_.devices;
  if (!send_all(fd, encode(h))) {
    close(fd);
    return false;
  }
  fd_ = fd;
  return true;
}

void AgentClient::disconnect(const std::string& why) {
  uint64_t open;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    open = open_capture_;
    open_capture_ = 0;
    registered_ = false;
  }
  {
    std::lock_guard<std::mutex> l(send_mu_);
    int fd = fd_.exchange(-1);
    if (fd >= 0) close(fd);
  }
  if (open && cb_.on_close) cb_.on_close(open);  // stop recording: nobody to send to
}

void AgentClient::loop() {
  FrameReader in;
  while (!stop_) {
    if (fd_.load() < 0) {
      if (!connect_once()) {
        pollfd p{wake_[0], POLLIN, 0};
        poll(&p, 1, retry_ms_);
        continue;
      }
      in = FrameReader();
    }
    pollfd p[2] = {{fd_.load(), POLLIN, 0}, {wake_[0], POLLIN, 0}};
    int n = poll(p, 2, 1000);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0 || stop_) continue;
    if (p[1].revents & POLLIN) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
      if (registered_) send_rank_if_dirty();
    }
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    ssize_t r = ::read(p[0].fd, buf, sizeof buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      disconnect("daemon gone");
      continue;
    }
    in.feed(buf, static_cast<size_t>(r));
    try {
      while (auto f = in.next()) {
        switch (f->type) {
          case MsgType::Welcome: {
            Welcome w = decode_welcome(f->payload);
            agent_id_ = w.agent_id;
            std::optional<RankUpdate> learnt;  // while the hello was on its way
            {
              std::lock_guard<std::mutex> l(state_mu_);
              registered_ = true;
              rank_dirty_.store(false);  // the learnt rank goes now, if any
              if (id_.rank != hello_rank_ || id_.world_size != hello_world_)
                learnt = RankUpdate{id_.rank, id_.world_size};
            }
            state_cv_.notify_all();
            if (learnt) send_frame(encode(*learnt));
            break;
          }
          case MsgType::Open: {
            Open o = decode_open(f->payload);
            {
              std::lock_guard<std::mutex> l(state_mu_);
              open_capture_ = o.capture_id;
            }
            if (cb_.on_open) cb_.on_open(o);
            break;
          }
          case MsgType::Close: {
            uint64_t id = decode_close(f->payload);
            if (cb_.on_close) cb_.on_close(id);
            break;
          }
          case MsgType::Error:
            // Refused (permission, version): stay quiet, keep the job running, retry later.
            throw ProtocolError("daemon: " + decode_text(f->payload));
          default:
            throw ProtocolError("unexpected message from the daemon");
        }
      }
    } catch (const ProtocolError&) {
      disconnect("protocol error");
      pollfd w{wake_[0], POLLIN, 0};
      poll(&w, 1, retry_ms_);
    }
  }
}

// ---- DaemonSink ----

DaemonSink::DaemonSink(AgentClient& client, uint64_t capture_id, size_t batch_bytes)
    : client_(client), capture_(capture_id), batch_bytes_(batch_bytes) {}

StrId DaemonSink::intern(std::string_view s) {
  auto it = strings_.find(std::string(s));
  if (it != strings_.end()) return it->second;
  StrId id = next_string_++;
  strings_.emplace(std::string(s), id);
  enc_.string(id, s);
  return id;
}

void DaemonSink::send_batch() {
  if (enc_.empty()) return;
  int64_t rows = rows_in_batch_;
  rows_in_batch_ = 0;
  std::string f = enc_.take_frame(capture_);
  if (client_.send_frame(f)) {
    sent_rows_ += rows;
  } else {
    dropped_ += rows;
    // The strings of the lost batch never arrived: send them again with whatever follows.
    strings_.clear();
  }
}

void DaemonSink::close() {
  if (closed_) return;
  closed_ = true;
  send_batch();
  client_.done(capture_, dropped_, "window closed");
}

}  // namespace braid::daemon

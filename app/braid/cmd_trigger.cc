// braid trigger: open a capture window in every registered process of a job on this node.
#include <cmath>
#include <cstdio>

#include "app/braid/cli.h"
#include "capture/daemon/client.h"
#include "capture/daemon/daemon.h"
#include "trace/error.h"

namespace braid::cli {

// "5s", "250ms", "1.5m", "2000us", a bare number is seconds.
int64_t parse_duration_ns(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    throw Error(ErrorCode::Usage, "bad duration '" + text + "' (e.g. 5s, 250ms, 1m)");
  }
  std::string unit = text.substr(pos);
  double scale = unit.empty() || unit == "s" ? 1e9
                 : unit == "ms"              ? 1e6
                 : unit == "us"              ? 1e3
                 : unit == "m" || unit == "min" ? 60e9
                                                : -1;
  if (scale < 0 || !(v > 0) || !std::isfinite(v))
    throw Error(ErrorCode::Usage, "bad duration '" + text + "' (e.g. 5s, 250ms, 1m)");
  return static_cast<int64_t>(v * scale);
}

void register_trigger(CLI::App& app, Action& run) {
  struct Opts {
    std::string socket, job, duration, out;
    int64_t steps = 0;
    bool no_wait = false, quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "trigger",
      "Capture a window of a running job on this node: the daemon opens the window in every\n"
      "registered process of the job, for a duration or a number of training steps, and writes\n"
      "one .braid. Waits until the file is complete and prints its path (exit 1 when processes\n"
      "were lost during the capture; the file then holds what they sent before).");
  cmd->add_option("--socket", o->socket, "The daemon's socket (default: as `braid daemon`)");
  cmd->add_option("--job", o->job, "Job id (default: the only registered job)");
  auto* d = cmd->add_option("--duration", o->duration, "Window length: 5s, 250ms, 1m");
  auto* s = cmd->add_option("--steps", o->steps, "Window of N training steps")
                ->check(CLI::PositiveNumber);
  d->excludes(s);
  s->excludes(d);
  cmd->add_option("--out", o->out, "Directory for the capture (default: the daemon's --out)");
  cmd->add_flag("--no-wait", o->no_wait, "Return once the capture started");
  cmd->add_flag("-q,--quiet", o->quiet, "Print only the file's path");
  cmd->callback([o, &run] {
    run = [o] {
      if (o->duration.empty() && o->steps <= 0)
        throw Error(ErrorCode::Usage, "give --duration or --steps");
      daemon::Trigger t;
      t.job_id = o->job;
      if (!o->duration.empty()) {
        t.mode = daemon::WindowMode::Duration;
        t.value = parse_duration_ns(o->duration);
      } else {
        t.mode = daemon::WindowMode::Steps;
        t.value = o->steps;
      }
      t.out_dir = o->out;
      std::string sock = o->socket.empty() ? daemon::default_socket_path() : o->socket;
      daemon::ClientConnection c(sock);
      c.send(daemon::encode(t));
      auto f = c.read(30000);
      if (!f) throw Error(ErrorCode::Io, sock + ": the daemon did not answer within 30 s");
      if (f->type == daemon::MsgType::Error)
        throw Error(ErrorCode::Usage, daemon::decode_text(f->payload));
      if (f->type != daemon::MsgType::Triggered)
        throw Error(ErrorCode::BadFormat, sock + ": unexpected answer from the daemon");
      auto started = daemon::decode_triggered(f->payload);
      if (!o->quiet)
        std::fprintf(stderr, "capture %llu of job %s started on %u processes -> %s\n",
                     static_cast<unsigned long long>(started.capture_id), started.job_id.c_str(),
                     started.agents, started.path.c_str());
      if (o->no_wait) {
        std::printf("%s\n", started.path.c_str());
        return 0;
      }
      for (;;) {
        f = c.read(-1);
        if (f && f->type == daemon::MsgType::CaptureDone) break;
      }
      auto done = daemon::decode_capture_done(f->payload);
      if (!o->quiet)
        std::fprintf(stderr, "capture %llu complete: %lld records, %lld dropped, %u of %u processes lost%s%s\n",
                     static_cast<unsigned long long>(done.capture_id),
                     static_cast<long long>(done.records), static_cast<long long>(done.dropped),
                     done.agents_lost, done.agents, done.detail.empty() ? "" : "; ",
                     done.detail.c_str());
      std::printf("%s\n", done.path.c_str());
      return done.agents_lost ? 1 : 0;
    };
  });
}

static const VerbRegistration kRegister{71, "trigger", register_trigger};

}  // namespace braid::cli

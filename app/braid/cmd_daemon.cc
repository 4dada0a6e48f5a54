// braid daemon: the headless per-node capture daemon (capture/daemon/daemon.h).
#include <csignal>
#include <cstdio>
#include <ctime>
#include <sys/stat.h>

#include "app/braid/cli.h"
#include "capture/daemon/daemon.h"
#include "trace/error.h"

namespace braid::cli {

namespace {
daemon::Daemon* g_daemon = nullptr;
extern "C" void on_stop_signal(int) {
  if (g_daemon) g_daemon->stop();
}
}  // namespace

void register_daemon(CLI::App& app, Action& run) {
  struct Opts {
    std::string socket, out = ".";
    int64_t grace_ms = 10000;
    int64_t close_max_ms = 120000;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "daemon",
      "Run the per-node capture daemon in the foreground (no GUI). The processes of jobs started\n"
      "with `braid record --attach` register with it over a Unix socket (the protocol of\n"
      "docs/daemon-protocol.md); `braid trigger` opens a capture window in every registered\n"
      "process of a job and the daemon writes one .braid per job and capture into --out. The\n"
      "socket and the files are owner-only; only the daemon's user and root may connect (checked\n"
      "with peer credentials). There is no network listener: fan out to many nodes with ssh, pdsh\n"
      "or srun (docs/daemon.md). SIGINT/SIGTERM stop it; captures in progress are finished with\n"
      "what arrived.");
  cmd->add_option("--socket", o->socket,
                  "Unix socket (default: $XDG_RUNTIME_DIR/braid/daemon.sock, /run/braid/daemon.sock "
                  "for root, else /tmp/braid-<uid>/daemon.sock)");
  cmd->add_option("--out", o->out, "Directory for capture files")->capture_default_str();
  cmd->add_option("--grace-ms", o->grace_ms,
                  "After a window closes, how long an agent may stay silent before it counts as "
                  "lost (each batch it sends restarts the wait)")
      ->capture_default_str();
  cmd->add_option("--close-max-ms", o->close_max_ms,
                  "After a window closes, the longest the daemon waits for agents still sending")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o->quiet, "No log lines on stderr");
  cmd->callback([o, &run] {
    run = [o] {
      umask(0077);  // owner-only captures, whatever the caller's umask
      daemon::DaemonOptions opts;
      opts.socket_path = o->socket;
      opts.out_dir = o->out;
      opts.close_grace_ms = o->grace_ms;
      opts.close_max_ms = o->close_max_ms;
      if (!o->quiet)
        opts.log = [](const std::string& line) {
          std::time_t t = std::time(nullptr);
          char ts[32];
          std::strftime(ts, sizeof ts, "%H:%M:%S", std::localtime(&t));
          std::fprintf(stderr, "braid daemon %s: %s\n", ts, line.c_str());
        };
      daemon::Daemon d(opts);
      g_daemon = &d;
      std::signal(SIGINT, on_stop_signal);
      std::signal(SIGTERM, on_stop_signal);
      std::signal(SIGPIPE, SIG_IGN);
      d.run();
      g_daemon = nullptr;
      return 0;
    };
  });
}

static const VerbRegistration kRegister{70, "daemon", register_daemon};

}  // namespace braid::cli

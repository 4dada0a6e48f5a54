// braid status: what a node's capture daemon is doing.
#include <simdjson.h>

#include <cstdio>

#include "app/braid/cli.h"
#include "capture/daemon/client.h"
#include "capture/daemon/daemon.h"
#include "trace/error.h"

namespace braid::cli {

void register_status(CLI::App& app, Action& run) {
  struct Opts {
    std::string socket;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "status",
      "List the processes registered with this node's capture daemon, the captures in progress\n"
      "and the last completed ones.");
  cmd->add_option("--socket", o->socket, "The daemon's socket (default: as `braid daemon`)");
  cmd->add_flag("--json", o->json, "The daemon's JSON status as is");
  cmd->callback([o, &run] {
    run = [o] {
      std::string sock = o->socket.empty() ? daemon::default_socket_path() : o->socket;
      daemon::ClientConnection c(sock);
      c.send(daemon::frame(daemon::MsgType::StatusRequest, ""));
      auto f = c.read(10000);
      if (!f || f->type != daemon::MsgType::Status)
        throw Error(ErrorCode::Io, sock + ": no status from the daemon");
      std::string text = daemon::decode_text(f->payload);
      if (o->json) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return 0;
      }
      simdjson::dom::parser p;
      simdjson::dom::element doc;
      if (p.parse(text).get(doc)) throw Error(ErrorCode::BadFormat, sock + ": unreadable status");
      std::printf("daemon pid %lld on %s, captures to %s\n",
                  static_cast<long long>(int64_t(doc["daemon"]["pid"])),
                  std::string(std::string_view(doc["daemon"]["socket"])).c_str(),
                  std::string(std::string_view(doc["daemon"]["out"])).c_str());
      simdjson::dom::array agents = doc["agents"];
      std::printf("%zu registered processes\n", agents.size());
      for (auto a : agents)
        std::printf("  job %-16s rank %4lld  pid %-8lld host %s %s\n",
                    std::string(std::string_view(a["job"])).c_str(),
                    static_cast<long long>(int64_t(a["rank"])),
                    static_cast<long long>(int64_t(a["pid"])),
                    std::string(std::string_view(a["host"])).c_str(),
                    std::string(std::string_view(a["devices"])).c_str());
      simdjson::dom::array caps = doc["captures"];
      std::printf("%zu captures in progress\n", caps.size());
      for (auto c2 : caps)
        std::printf("  capture %lld job %s (%s): %lld records, %lld of %lld processes still "
                    "sending -> %s\n",
                    static_cast<long long>(int64_t(c2["id"])),
                    std::string(std::string_view(c2["job"])).c_str(),
                    std::string(std::string_view(c2["window"])).c_str(),
                    static_cast<long long>(int64_t(c2["records"])),
                    static_cast<long long>(int64_t(c2["pending"])),
                    static_cast<long long>(int64_t(c2["agents"])),
                    std::string(std::string_view(c2["path"])).c_str());
      simdjson::dom::array done = doc["completed"];
      if (done.size()) std::printf("last completed captures\n");
      for (auto c2 : done)
        std::printf("  capture %lld job %s: %lld records, %lld dropped, %lld lost -> %s\n",
                    static_cast<long long>(int64_t(c2["id"])),
                    std::string(std::string_view(c2["job"])).c_str(),
                    static_cast<long long>(int64_t(c2["records"])),
                    static_cast<long long>(int64_t(c2["dropped"])),
                    static_cast<long long>(int64_t(c2["lost"])),
                    std::string(std::string_view(c2["path"])).c_str());
      return 0;
    };
  });
}

static const VerbRegistration kRegister{72, "status", register_status};

}  // namespace braid::cli

// Temporary outputs are removed when the process is interrupted (SIGINT, SIGTERM, SIGHUP), so
// an interrupted command leaves no half-written file behind. Writers register the one temporary
// file they are filling; the CLI installs the handler once.
#pragma once

#include <string>

namespace braid {

void install_temp_cleanup_on_signal();
void register_temp_for_cleanup(const std::string& path);
void unregister_temp_for_cleanup();

}  // namespace braid

// What is left of a process group, for the tests of braid-view's child processes.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace braid::test {

// Processes of process group `pgid` that still run (zombies not counted: they have ended, and
// whether init has reaped them yet is up to init).
inline int live_in_group(pid_t pgid) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3 &&
        pgrp == pgid && state != 'Z')
      ++n;
  }
  return n;
}

}  // namespace braid::test

#!/usr/bin/env bash
# Installs the Debian packages Braid needs (only the missing ones), then configures and builds.
# Used by scripts/demo.sh and scripts/test.sh; safe to run again (incremental).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BRAID_BUILD_DIR:-$root/build}

packages=(
  cmake ninja-build g++ pkg-config
  libsqlite3-dev zlib1g-dev libsimdjson-dev
  libprotobuf-dev protobuf-compiler libarchive-dev
  libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_WERROR=$werror >/dev/null
else
  cmake "$build" -DBRAID_WERROR=$werror >/dev/null
fi
# Two cores: keep the link steps from running out of memory while compiling in parallel.
cmake --build "$build" -j "${BRAID_JOBS:-$(nproc)}"

#!/usr/bin/env bash
# Installs the Debian packages Braid needs (only the missing ones), then configures and builds.
# Used by scripts/demo.sh and scripts/test.sh; safe to run again (incremental).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BRAID_BUILD_DIR:-$root/build}

packages=(
  cmake ninja-build g++ pkg-config clang-format
  libsqlite3-dev zlib1g-dev libsimdjson-dev
  libprotobuf-dev protobuf-compiler libarchive-dev
  libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libimgui-dev libstb-dev libglfw3-dev libgl-dev libgl1-mesa-dri libpng-dev xvfb xauth
  openmpi-bin libopenmpi-dev
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

# scripts/sanitize.sh configures and builds its own directory.
[ "${BRAID_SETUP_NO_BUILD:-}" = 1 ] && exit 0

# CI builds with warnings as errors; otherwise keep whatever the build directory was configured
# with, so switching between the demo and the tests never forces a full rebuild.
args=()
[ "${CI:-}" = "true" ] && args+=(-DBRAID_WERROR=ON)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${args[@]}" >/dev/null
elif ((${#args[@]})); then
  cmake "$build" "${args[@]}" >/dev/null
fi
# Two cores: keep the link steps from running out of memory while compiling in parallel.
cmake --build "$build" -j "${BRAID_JOBS:-$(nproc)}"

#!/usr/bin/env bash
# The main job: set up (packages, build) and run `braid demo` on its built-in default.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
exec "${BRAID_BUILD_DIR:-$root/build}/app/braid" demo "$@"

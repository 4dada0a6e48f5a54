#!/usr/bin/env bash
# The whole test suite: set up (packages, build) and run every test with CTest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "${BRAID_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${BRAID_JOBS:-$(nproc)}" "$@"

#!/usr/bin/env bash
# Regenerates docs/images/explorer.png and docs/images/replay.png (docs/gui.md): braid-view's
# explorer on a small tp-sp step (the simulated baseline and fused steps as runs A and B), and
# its Replay tab after `braid ab --backend sim` of the fused schedule.
#   bash scripts/view_explorer_screenshots.sh
# Needs a built tree (scripts/setup.sh) and xvfb-run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BRAID_BUILD_DIR:-$root/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$root/docs/images"
"$build/app/braid" synth --preset tp-sp --tp 4 --layers 2 --hidden 256 --seq 128 -q \
  -o "$tmp/step.braid" >/dev/null
xvfb-run -a -s "-screen 0 1920x1080x24" "$build/app/view/braid-view" "$tmp/step.braid" \
  --size 1600x900 --screenshot "$root/docs/images/explorer.png"
"$build/app/braid" fuse "$tmp/step.braid" >/dev/null
xvfb-run -a -s "-screen 0 1920x1080x24" "$build/app/view/braid-view" "$tmp/step.braid" \
  --replay sim --size 1600x900 --screenshot "$root/docs/images/replay.png"

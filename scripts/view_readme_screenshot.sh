#!/usr/bin/env bash
# Regenerates docs/images/compare.png, the README's picture of braid-view's compare mode.
#   bash scripts/view_readme_screenshot.sh                 # two real runs: HTA's trace-diff pair
#   bash scripts/view_readme_screenshot.sh job.braid 1 2   # any two runs of a .braid file
# Needs a built tree (scripts/setup.sh) and xvfb-run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BRAID_BUILD_DIR:-$root/build}
out=$root/docs/images/compare.png
if [ $# -ge 3 ]; then
  file=$1 a=$2 b=$3
else
  traces=${BRAID_TRACES_DIR:-$root/../shared/data/traces}/hta/tests/data/trace_diff
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  file=$tmp/trace_diff.braid a=1 b=2
  "$build/app/braid" import "$traces/control/control.json.gz" -o "$file" >/dev/null
  "$build/app/braid" import --append "$traces/test/test.json.gz" -o "$file" >/dev/null
fi
mkdir -p "$(dirname "$out")"
xvfb-run -a -s "-screen 0 1920x1080x24" "$build/app/view/braid-view" "$file" \
  --compare "$a" "$b" --tab compare --size 1600x900 --screenshot "$out"

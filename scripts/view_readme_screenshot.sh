#!/usr/bin/env bash
# Regenerates braid-view's pictures in the docs:
#   docs/images/compare.png  the README's picture of compare mode (two runs, the Compare tab)
#   docs/images/metrics.png  docs/gui.md's picture of the Metrics tab (HTA's two-rank
#                            trace_filter pair, after `braid analyze`)
#   bash scripts/view_readme_screenshot.sh                 # two real runs: HTA's trace-diff pair
#   bash scripts/view_readme_screenshot.sh job.braid 1 2   # compare.png from any two runs
# Needs a built tree (scripts/setup.sh) and xvfb-run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BRAID_BUILD_DIR:-$root/build}
out=$root/docs/images/compare.png
traces=${BRAID_TRACES_DIR:-$root/../shared/data/traces}/hta/tests/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ $# -ge 3 ]; then
  file=$1 a=$2 b=$3
else
  file=$tmp/trace_diff.braid a=1 b=2
  "$build/app/braid" import "$traces/trace_diff/control/control.json.gz" -o "$file" >/dev/null
  "$build/app/braid" import --append "$traces/trace_diff/test/test.json.gz" -o "$file" >/dev/null
fi
mkdir -p "$(dirname "$out")"
xvfb-run -a -s "-screen 0 1920x1080x24" "$build/app/view/braid-view" "$file" \
  --compare "$a" "$b" --tab compare --size 1600x900 --screenshot "$out"
if [ $# -lt 3 ]; then
  pair=$tmp/trace_filter.braid
  "$build/app/braid" import "$traces/trace_filter/sampled_rank-0.json.gz" \
    "$traces/trace_filter/sampled_rank-1.json.gz" -o "$pair" >/dev/null
  "$build/app/braid" analyze "$pair" >/dev/null
  xvfb-run -a -s "-screen 0 1920x1080x24" "$build/app/view/braid-view" "$pair" \
    --tab metrics --size 1600x900 --screenshot "$root/docs/images/metrics.png"
fi

#!/bin/sh
# Rank classes at scale (issue 33; docs/BENCHMARKS.md, "Rank classes at 16,384 ranks"): per DP
# degree D, `braid synth --preset tp-sp --tp 8 --layers 8 --dp D` (stored as rank classes), then
# `braid fuse --dry-run`, `braid fuse` and `braid ab --backend sim --no-data-check --no-store`,
# each RUNS times (default 3) under /usr/bin/time: the median wall time and the largest peak RSS.
# Prints one markdown row per D (default: 8 2048, i.e. 64 and 16,384 ranks).
# Usage: bench/rank_classes.sh BUILD_DIR [D ...]
set -eu
build=${1:?usage: bench/rank_classes.sh BUILD_DIR [D ...]}
shift
dps=${*:-8 2048}
runs=${RUNS:-3}
braid=$(cd "$(dirname "$build/app/braid")" && pwd)/braid
[ -x "$braid" ] || { echo "rank_classes: $braid: not built" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "rank_classes: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# measure PREP CMD...: runs PREP (a shell command, may be :) then CMD `runs` times; prints
# "MEDIAN_S s, MAX_MB MB".
measure() {
  prep=$1
  shift
  : >"$out/times"
  i=0
  while [ "$i" -lt "$runs" ]; do
    sh -c "$prep"
    /usr/bin/time -f '%e %M' -o "$out/t" "$@" >"$out/cmd.txt" 2>&1 || {
      echo "rank_classes: $*: $(tail -1 "$out/cmd.txt")" >&2; exit 1; }
    cat "$out/t" >>"$out/times"
    i=$((i + 1))
  done
  sort -n "$out/times" | awk '{s[NR] = $1; if ($2 > m) m = $2}
    END {printf "%.2f s, %d MB", s[int((NR + 1) / 2)], (m + 1023) / 1024}'
}

echo "host: $(nproc) cores, $(uname -m); $runs runs each, median wall time, largest peak RSS; $(date -u +%F)"
echo "| ranks (dp) | rank classes | synth | fuse --dry-run | fuse (stores) | ab --backend sim --no-data-check |"
echo "|---|---|---|---|---|---|"
for d in $dps; do
  f=$out/s$d.braid
  synth=$(measure "rm -f $f $f-wal $f-shm" "$braid" synth --preset tp-sp --tp 8 --layers 8 --dp "$d" -o "$f")
  classes=$(sed -n 's/^[0-9]* ranks in \([0-9]*\) rank classes.*/\1/p' "$out/cmd.txt" | head -1)
  dry=$(measure : "$braid" fuse --dry-run "$f")
  fuse=$(measure : "$braid" fuse "$f")
  ab=$(measure : "$braid" ab --backend sim --no-data-check --no-store "$f")
  echo "| $((8 * d)) ($d) | ${classes:-none} | $synth | $dry | $fuse | $ab |"
done

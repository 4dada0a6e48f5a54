#!/bin/sh
# Peak RSS of `braid ab --backend sim` (with its data check) on every preset at its default size
# (docs/BENCHMARKS.md, docs/replay.md "Real sizes in bounded memory"). Per preset: `braid synth`,
# `braid fuse`, then `braid ab --backend sim` under /usr/bin/time -v; every command runs under an
# address-space limit (LIMIT_KB, default 2000000 = 2 GB) so a regression fails instead of
# swapping the host. Prints one markdown row per preset.
# Usage: bench/check_memory.sh BUILD_DIR [PRESET ...]   (default: all presets)
set -eu
build=${1:?usage: bench/check_memory.sh BUILD_DIR [PRESET ...]}
shift
presets=${*:-tp-sp tp-ep tp-pp pp-ep pp-sp sp-ep dense moe}
limit=${LIMIT_KB:-2000000}
braid=$(cd "$(dirname "$build/app/braid")" && pwd)/braid
[ -x /usr/bin/time ] || { echo "check_memory: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "host: $(nproc) cores, $(uname -m); address-space limit $limit KB; $(date -u +%F)"
echo "| preset | ranks | fuse (s) | ab (s) | data check | peak RSS of ab |"
echo "|---|---|---|---|---|---|"
status=0
for p in $presets; do
  f=$out/$p.braid
  (ulimit -v "$limit" && "$braid" synth --preset "$p" -o "$f") >"$out/synth.txt" 2>&1 || {
    echo "| $p | synth failed: $(tail -1 "$out/synth.txt") |"; status=1; continue; }
  # "N ranks, ..." or "N ranks in K rank classes ..." (braid synth's summary)
  ranks=$(sed -n 's/^\([0-9]*\) ranks[ ,].*/\1/p' "$out/synth.txt" | head -1)
  (ulimit -v "$limit" && /usr/bin/time -f '%e' -o "$out/fuse.time" "$braid" fuse "$f") \
    >"$out/fuse.txt" 2>&1 || { echo "| $p | $ranks | fuse failed: $(tail -1 "$out/fuse.txt") |"; status=1; continue; }
  rc=0
  (ulimit -v "$limit" && /usr/bin/time -v -o "$out/ab.time" "$braid" ab "$f" --backend sim --no-store \
    --json) >"$out/ab.json" 2>"$out/ab.txt" || rc=$?
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$out/ab.time")
  secs=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$out/ab.time")
  # the data check from ab's --json (docs/cli.md), or its one-line error
  check=$(python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))["data_check"]
f = c["fused_vs_baseline"]
print("%s: %d (%d), d %s, %.1f G elements, %d differ" % (c["status"], f["elements"],
      f["buffers"], f["scale"], f["full_elements"] / 1e9, f["mismatches"]))' "$out/ab.json" 2>/dev/null ||
    tail -1 "$out/ab.txt")
  [ "$rc" = 0 ] || status=1
  echo "| $p | $ranks | $(cat "$out/fuse.time") | $secs | $check | $((rss / 1024)) MiB |"
done
exit $status

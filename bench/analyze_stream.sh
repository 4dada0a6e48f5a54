#!/bin/sh
# `braid analyze` of one large file, the whole run in memory (--no-stream) against rank by rank
# and a batch of steps at a time (--stream; issue 33, item 3; docs/BENCHMARKS.md, "braid analyze
# of one large file"): RANKS synthetic Kineto traces of MB megabytes each (braid-gen-kineto, one
# per rank, same seed), imported one file per rank and merged into one file (kept as FILE when
# given, and reused when it exists), then `braid analyze FILE --no-store` each way, RUNS times
# (default 1): wall time, peak RSS, and whether the two reports are the same byte for byte.
# Prints one markdown row per way.
# Usage: bench/analyze_stream.sh BUILD_DIR [RANKS [MB [FILE]]]   (default 64 ranks, 325 MB)
set -eu
. "$(dirname "$0")/common.sh"
build=${1:?usage: bench/analyze_stream.sh BUILD_DIR [RANKS [MB [FILE]]]}
ranks=${2:-64}
mb=${3:-325}
runs=${RUNS:-1}
braid=$(cd "$(dirname "$build/app/braid")" && pwd)/braid
gen=$(cd "$(dirname "$build/bench/braid-gen-kineto")" && pwd)/braid-gen-kineto
for p in "$braid" "$gen"; do [ -x "$p" ] || { echo "analyze_stream: $p: not built" >&2; exit 1; }; done
[ -x /usr/bin/time ] || { echo "analyze_stream: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
job=${4:-$out/job.braid}

if [ ! -e "$job" ]; then
  kineto_job_files "$gen" "$braid" "$ranks" "$mb" "$out"
  "$braid" merge $files -o "$job" >/dev/null
  rm -f $files
fi
counts=$(python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n = sum(db.execute("SELECT COUNT(*) FROM %s" % t).fetchone()[0]
        for t in ("kernels", "memcpys", "api_calls", "nvtx_ranges", "collectives"))
c = db.execute("SELECT COUNT(*) FROM collectives").fetchone()[0]
s = db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
r = db.execute("SELECT COUNT(*) FROM ranks").fetchone()[0]
print("%d ranks, %d events (%d collectives, %d steps)" % (r, n, c, s))' "$job")
echo "host: $(nproc) cores, $(uname -m); $counts, $(($(wc -c <"$job") / 1048576)) MiB; $(date -u +%F)"
echo "| way | wall | peak RSS | report |"
echo "|---|---|---|---|"
for way in --no-stream --stream; do
  i=0
  : >"$out/walls"
  : >"$out/rss"
  while [ "$i" -lt "$runs" ]; do
    /usr/bin/time -f '%e %M' -o "$out/t" "$braid" analyze "$way" "$job" --no-store >"$out/$way.txt"
    cut -d' ' -f1 "$out/t" >>"$out/walls"
    cut -d' ' -f2 "$out/t" >>"$out/rss"
    i=$((i + 1))
  done
  same=$(cmp -s "$out/$way.txt" "$out/--no-stream.txt" && echo "identical" || echo "DIFFERS")
  python3 -c 'import statistics, sys
walls = [float(x) for x in open(sys.argv[1] + "/walls")]
rss = max(int(x) for x in open(sys.argv[1] + "/rss"))
print("| %s | %.1f s | %d MiB | %s |" % (sys.argv[2], statistics.median(walls), rss // 1024, sys.argv[3]))' \
    "$out" "$way" "$same"
done

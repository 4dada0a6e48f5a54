#!/bin/sh
# `braid analyze` of a job stored one file per rank, by one process and spread over
# `mpirun -np N` processes (issue 33, item 3; docs/BENCHMARKS.md, "A job in several files"):
# RANKS synthetic Kineto traces of MB megabytes each (braid-gen-kineto, one per rank, same
# seed) imported one file per rank, then `braid analyze FILES... --json --no-store` by one
# process and under mpirun at each N of NPS, RUNS times each (default 3): the median wall time,
# the largest peak RSS of one process, and whether the report is the single process's byte for
# byte. Prints one markdown row per process count.
# Usage: bench/analyze_spread.sh BUILD_DIR [RANKS [MB [NPS]]]   (default 16 ranks, 200 MB, "2 4")
set -eu
. "$(dirname "$0")/common.sh"
build=${1:?usage: bench/analyze_spread.sh BUILD_DIR [RANKS [MB [NPS]]]}
ranks=${2:-16}
mb=${3:-200}
nps=${4:-2 4}
runs=${RUNS:-3}
braid=$(cd "$(dirname "$build/app/braid")" && pwd)/braid
gen=$(cd "$(dirname "$build/bench/braid-gen-kineto")" && pwd)/braid-gen-kineto
for p in "$braid" "$gen"; do [ -x "$p" ] || { echo "analyze_spread: $p: not built" >&2; exit 1; }; done
[ -x /usr/bin/time ] || { echo "analyze_spread: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "analyze_spread: no mpirun (apt-get install openmpi-bin)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

kineto_job_files "$gen" "$braid" "$ranks" "$mb" "$out"
counts=$(python3 -c 'import sqlite3, sys
n = c = s = 0
for f in sys.argv[1:]:
    db = sqlite3.connect(f)
    for t in ("kernels", "memcpys", "api_calls", "nvtx_ranges", "collectives"):
        n += db.execute("SELECT COUNT(*) FROM %s" % t).fetchone()[0]
    c += db.execute("SELECT COUNT(*) FROM collectives").fetchone()[0]
    s += db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
print("%d events (%d collectives, %d steps)" % (n, c, s))' $files)
bytes=$(cat $files | wc -c)
echo "host: $(nproc) cores, $(uname -m); $ranks files, $counts, $((bytes / 1048576)) MiB; $(date -u +%F)"
echo "| processes | wall (median of $runs) | peak RSS of one process | report |"
echo "|---|---|---|---|"

# row NP: NP=1 runs braid alone, else under mpirun; each process writes its own time file.
row() {
  np=$1
  : >"$out/walls"
  i=0
  while [ "$i" -lt "$runs" ]; do
    rm -f "$out"/t.*
    start=$(date +%s.%N)
    if [ "$np" = 1 ]; then
      /usr/bin/time -f '%M' -o "$out/t.0" "$braid" analyze $files --json --no-store >"$out/np.json"
    else
      mpirun --oversubscribe --allow-run-as-root -np "$np" sh -c \
        '/usr/bin/time -f %M -o "$0/t.$OMPI_COMM_WORLD_RANK" "$@"' "$out" \
        "$braid" analyze $files --json --no-store >"$out/np.json"
    fi
    python3 -c 'import sys, time; print(time.time() - float(sys.argv[1]))' "$start" >>"$out/walls"
    i=$((i + 1))
  done
  [ "$np" = 1 ] && cp "$out/np.json" "$out/one.json"
  same=$(cmp -s "$out/np.json" "$out/one.json" && echo "identical" || echo "DIFFERS")
  python3 -c 'import glob, statistics, sys
walls = [float(x) for x in open(sys.argv[1] + "/walls")]
rss = max(int(open(f).read().split()[-1]) for f in glob.glob(sys.argv[1] + "/t.*"))
print("| %s | %.2f s | %d MiB | %s |" % (sys.argv[2], statistics.median(walls), rss // 1024, sys.argv[3]))' \
    "$out" "$np" "$same"
}

row 1
for np in $nps; do row "$np"; done

#!/usr/bin/env bash
# Peer comparison for the Kineto import: `braid import` (parse + link + SQLite with indexes)
# against Python's json.load of the same file (parse only; the first step of Python tools such
# as Holistic Trace Analysis). Interleaved runs, medians of wall time and peak RSS.
#   bench/import_vs_python_json.sh [SIZE_MB] [RUNS]      (after scripts/setup.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BRAID_BUILD_DIR:-$root/build}
size=${1:-300}
runs=${2:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin/bench/braid-gen-kineto" --size-mb "$size" -o "$dir/t.json" >/dev/null 2>&1
bytes=$(stat -c %s "$dir/t.json")
for ((i = 0; i < runs; i++)); do
  /usr/bin/time -f "braid %e %M" "$bin/app/braid" import -q --force "$dir/t.json" -o "$dir/t.braid" 2>>"$dir/times"
  /usr/bin/time -f "python %e %M" python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$dir/t.json" 2>>"$dir/times"
done
python3 - "$dir/times" "$bytes" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0] in ("braid", "python")]
mb = int(sys.argv[2]) / 1e6
med = {}
for tool in ("braid", "python"):
    t = statistics.median(float(r[1]) for r in rows if r[0] == tool)
    m = statistics.median(int(r[2]) for r in rows if r[0] == tool) / 1024
    med[tool] = t
    print(f"{tool:7s} median {t:6.2f} s  {mb / t:7.1f} MB/s  peak RSS {m:7.0f} MB")
print(f"braid import is {med['python'] / med['braid']:.1f}x faster than json.load alone on {mb:.0f} MB")
PY

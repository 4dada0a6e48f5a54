#!/bin/sh
# The capture agent's no-crash, no-lost-record check (issue 19, docs/BENCHMARKS.md "Capture
# overhead"): N empty kernel launches (default 10 million) under `braid record` must exit 0, print
# what the program printed, and leave exactly N kernels in the recorded file. Prints one line,
# "10M launches: exit 0, launches 10000000, kernels stored: 10000000 (86.2 s)", and exits 1 when
# the check fails. Needs a GPU machine and the built tree; uses only sh, awk and python3.
# Usage: bench/capture_launches.sh BUILD_DIR [N] [OUT_DIR]
set -eu
. "$(dirname "$0")/common.sh"
bench_dirs "bench/capture_launches.sh BUILD_DIR [N] [OUT_DIR]" "$@"
n=${2:-10000000}
capture_tools
need_built capture_launches -x "$ops" "$braid"
label="$((n / 1000000))M launches"
[ "$n" -ge 1000000 ] || label="$n launches"

rm -f "$out"/launches.*
t0=$(date +%s.%N)
rc=0
"$braid" record -q -o "$out/launches.braid" -- "$ops" launches "$n" >"$out/launches.out" \
  2>"$out/launches.err" || rc=$?
t1=$(date +%s.%N)
secs=$(elapsed "$t0" "$t1" 1)
stored=$(python3 - "$out" <<'PY'
import glob, sqlite3, sys
files = sorted(glob.glob(sys.argv[1] + "/launches.rank*.braid") +
               glob.glob(sys.argv[1] + "/launches.pid*.braid"))
if not files:
    print("no file")
    sys.exit(0)
db = sqlite3.connect(files[0])
print(db.execute("SELECT COUNT(*) FROM kernels k JOIN strings s ON s.id = k.name_id "
                 "WHERE s.text LIKE '%braid_empty%'").fetchone()[0])
PY
)
echo "$label: exit $rc, $(cat "$out/launches.out"), kernels stored: $stored ($secs s)"
[ "$rc" = 0 ] && [ "$stored" = "$n" ] || { sed -n '1,5p' "$out/launches.err" >&2; exit 1; }

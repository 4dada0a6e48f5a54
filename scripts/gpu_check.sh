#!/bin/sh
# Everything the lent GPU machine is for, in one command (issue 32): the GPU tests
# (capture_gpu_test, and replay_nccl_test where it was built), the capture overhead benchmark
# (bench/capture_overhead.sh) and the 10-million-launch check (bench/capture_launches.sh), then a
# dated Markdown table for docs/BENCHMARKS.md: date, machine, command, result, and the benchmark's
# medians. It needs the built tree only, and sh, awk and python3 (the GPU machine has no bc, no
# cmake/ctest, no Debian dev tools): the test binaries run directly. Where capture is not possible
# (no driver, no GPU, no agent built) it prints one line saying why and exits 0.
# Each part runs under `timeout` (BRAID_GPU_CHECK_PART_S seconds, default 600) so that a part that
# hangs costs its own row, not the machine's remaining minutes.
# Exit status: 0 when every part passed (or nothing could run), 1 when one failed, 2 on bad usage.
# Usage: [BRAID_GPU_CHECK_PART_S=S] bash scripts/gpu_check.sh BUILD_DIR [RUNS] [OUT_DIR]
#   RUNS: benchmark repetitions (default 5); OUT_DIR: where the logs go (default: a new temp dir).
set -u
usage="usage: scripts/gpu_check.sh BUILD_DIR [RUNS] [OUT_DIR]"
[ $# -ge 1 ] && [ -n "$1" ] || { echo "$usage" >&2; exit 2; }
build=$1
runs=${2:-5}
case $runs in '' | *[!0-9]*) echo "gpu_check: RUNS must be a positive number, got '$runs'" >&2; exit 2 ;; esac
part_s=${BRAID_GPU_CHECK_PART_S:-600}
case $part_s in '' | *[!0-9]*) echo "gpu_check: BRAID_GPU_CHECK_PART_S must be a number of seconds, got '$part_s'" >&2; exit 2 ;; esac
[ -d "$build" ] || { echo "gpu_check: $build: no such build directory" >&2; exit 2; }
braid=$build/app/braid
[ -x "$braid" ] || { echo "gpu_check: $braid: not built (cmake --build $build --target braid)" >&2; exit 2; }
out=${3:-$(mktemp -d)}
mkdir -p "$out" || exit 2
root=$(cd "$(dirname "$0")/.." && pwd)

# The same probe `braid record` makes: driver, cuInit, a visible GPU, the agent.
"$braid" record -q -f -o "$out/probe.braid" -- true >/dev/null 2>"$out/probe.err"
why=$(sed -n 's/^braid record: nothing captured: \(.*\); the command ran without capture$/\1/p' "$out/probe.err")
if [ -n "$why" ]; then
  echo "gpu_check: skipped, no GPU to check on: $why"
  exit 0
fi

# The machine, from the driver itself (python3's ctypes; nvidia-smi is not needed).
machine=$(python3 - <<'PY' 2>/dev/null || uname -n
import ctypes, os, platform
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuInit(0)
n, dev, ver = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
cuda.cuDeviceGetCount(ctypes.byref(n))
cuda.cuDeviceGet(ctypes.byref(dev), 0)
name = ctypes.create_string_buffer(256)
cuda.cuDeviceGetName(name, 256, dev)
cuda.cuDriverGetVersion(ctypes.byref(ver))
print("%dx %s, CUDA driver %d.%d, %d CPUs, %s" % (n.value, name.value.decode(), ver.value // 1000,
      ver.value % 1000 // 10, os.cpu_count(), platform.node()))
PY
)
day=$(date -u +%F)
rows=$out/rows
: >"$rows"
status=0

# limited CMD...: CMD under timeout's limit (exit 124 when it ran out); as is where there is no
# timeout(1).
limited() {
  if command -v timeout >/dev/null 2>&1; then timeout -k 10 "$part_s" "$@"; else "$@"; fi
}
# why_failed RC: " (timed out after S s)" for timeout's exit status, else nothing.
why_failed() { [ "$1" = 124 ] || [ "$1" = 137 ] && printf ' (timed out after %s s)' "$part_s"; }
now() { date +%s.%N; }
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.0f", e - s }'; }
# row COMMAND RESULT: one line of the table.
row() { printf '| %s | %s | `%s` | %s |\n' "$day" "$machine" "$1" "$2" >>"$rows"; }

# A GoogleTest binary run directly: "N passed, M failed, K skipped (exit S, T s)".
gtest() {
  bin=$build/tests/$1
  shown=${bin#"$build"/}
  if [ ! -x "$bin" ]; then
    row "$shown" "not in this build (it needs nvcc and NCCL at build time)"
    return
  fi
  t=$(now)
  limited "$bin" >"$out/$(basename "$bin").log" 2>&1
  rc=$?
  summary=$(awk '
    /^\[  PASSED  \] [0-9]+ test/ { p = $4 }
    /^\[  FAILED  \] [0-9]+ test/ { f = $4 }
    /^\[  SKIPPED \] [0-9]+ test/ { s = $4 }
    END { printf "%d passed, %d failed, %d skipped", p, f, s }' "$out/$(basename "$bin").log")
  failed=$(sed -n 's/^\[  FAILED  \] \([A-Za-z0-9_.\/]*\)$/\1/p' "$out/$(basename "$bin").log" |
    awk 'NF { printf "%s%s", sep, $1; sep = ", " }')
  [ -n "$failed" ] && summary="$summary: $failed"
  row "$shown" "$summary (exit $rc$(why_failed "$rc"), $(elapsed "$t") s)"
  [ "$rc" = 0 ] || status=1
}

echo "gpu_check: $machine; logs in $out" >&2
gtest capture/capture_gpu_test
gtest replay/replay_nccl_test

# The overhead benchmark, then the launch check on its own (each has its row, whatever the other
# did).
t=$(now)
limited env BRAID_BENCH_SKIP_LAUNCHES=1 sh "$root/bench/capture_overhead.sh" "$build" "$runs" "$out/overhead" \
  >"$out/overhead.log" 2>&1
orc=$?
if [ "$orc" = 0 ]; then
  row "bench/capture_overhead.sh $build $runs" "medians below (exit 0, $(elapsed "$t") s)"
else
  row "bench/capture_overhead.sh $build $runs" "failed (exit $orc$(why_failed "$orc"), $(elapsed "$t") s): $(tail -1 "$out/overhead.log")"
  status=1
fi
t=$(now)
launches=$(limited sh "$root/bench/capture_launches.sh" "$build" 10000000 "$out/launches" 2>"$out/launches.err")
lrc=$?
[ -n "$launches" ] || launches="no result: $(tail -1 "$out/launches.err")"
row "bench/capture_launches.sh $build" "$launches (exit $lrc$(why_failed "$lrc"))"
[ "$lrc" = 0 ] || status=1

echo "### GPU check, $day"
echo
echo "| date | machine | command | result |"
echo "|---|---|---|---|"
cat "$rows"
if [ "$orc" = 0 ]; then
  echo
  echo "Medians of $runs interleaved runs (\`bench/capture_overhead.sh $build $runs\`):"
  echo
  grep '^|' "$out/overhead.log"
fi
exit "$status"

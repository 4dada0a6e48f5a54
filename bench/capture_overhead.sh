#!/bin/sh
# Overhead of `braid record` on a GPU machine: runs the capture test job (tests/capture/cuda/
# streams_nccl.cu) STEPS steps, RUNS times without and with capture (whole-run window, and a
# window that never opens, i.e. an idle attached agent), and prints the median wall times.
# Usage: bench/capture_overhead.sh BUILD_DIR [STEPS] [RUNS]
set -eu
build=${1:?usage: bench/capture_overhead.sh BUILD_DIR [STEPS] [RUNS]}
steps=${2:-200}
runs=${3:-5}
prog=$build/tests/capture/capture_cuda_streams_nccl
braid=$build/app/braid
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
timeit() {  # prints seconds of one run of "$@"
  s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N)
  echo "$e - $s" | bc -l
}
run() {  # label, command...
  label=$1; shift
  i=0; : >"$out/t"
  while [ $i -lt "$runs" ]; do timeit "$@" >>"$out/t"; i=$((i + 1)); done
  printf '%-28s median %.3f s over %d runs\n' "$label" "$(median <"$out/t")" "$runs"
}

"$braid" record -q -f -o "$out/probe.braid" -- true 2>"$out/why" || true
if grep -q "nothing captured" "$out/why"; then cat "$out/why"; exit 1; fi
run "no capture" "$prog" "$steps"
run "braid record (whole run)" "$braid" record -q -f -o "$out/all.braid" -- "$prog" "$steps"
run "braid record (idle window)" "$braid" record -q -f --nvtx never-opened -o "$out/idle.braid" -- "$prog" "$steps"

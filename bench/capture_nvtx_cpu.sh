#!/bin/sh
# The agent's own NVTX path on CPU (issue 32, item 3; docs/BENCHMARKS.md "Capture overhead"): the
# cost of an NVTX push/pop pair through the agent's handlers, measured without a GPU on the CUPTI
# call recorder and its NVTX model (tests/capture/fake_cupti.cc) with the model program's
# `nvtxbench` (tests/capture/fake_cuda_job.cc). Configurations, interleaved RUNS times:
#   none         no NVTX tool (NVTX's slots empty)
#   cupti        NVTX handed to the recorder's CUPTI alone (its handlers, no MARKER records): the
#                floor the agent's handlers add to
#   braid        `braid record`'s agent (whole-run window): the agent's handler, then CUPTI's
#   braid_nvtx   the agent with a window on another range name (--nvtx other)
#   braid_steps  the agent with a steps window (--steps 1000000-1000001: never opens)
# Each run is 5 rounds of PAIRS pairs after a warm-up round, with a pause of 50 ms after each
# round, and the agent's writer drains every 10 ms (BRAID_CAPTURE_FLUSH_MS): at a pace it keeps up
# with, so a round measures the handlers on warm log chunks, not the writer's throughput. Prints the
# medians (ns per pair) and braid - cupti, twice: wall time, and the benchmark thread's own CPU
# time (CLOCK_THREAD_CPUTIME_ID: what the handlers cost, without the time the thread waits for a
# core while the agent's writer thread or another process runs). Needs the built tree (the capture
# tests' fake libraries), sh and awk.
# Usage: bench/capture_nvtx_cpu.sh BUILD_DIR [RUNS] [PAIRS]
set -eu
build=${1:?usage: bench/capture_nvtx_cpu.sh BUILD_DIR [RUNS] [PAIRS]}
runs=${2:-5}
pairs=${3:-20000}
job=$build/tests/capture/capture_fake_cuda_job
cupti=$build/tests/capture/libbraid_fake_cupti.so
agent=$build/tests/capture/libbraid_capture_fakecupti.so
. "$(dirname "$0")/common.sh"
need_built capture_nvtx_cpu -e "$job" "$cupti" "$agent"
out=$(out_dir)
m=$out/measurements
: >"$m"
run() {  # CONFIG [VAR=VALUE ...]: one round set of the given configuration
  config=$1
  shift
  env -u BRAID_CAPTURE_OUTPUT -u BRAID_CAPTURE_WINDOW -u NVTX_INJECTION64_PATH \
    -u CUDA_INJECTION64_PATH "$@" "$job" nvtxbench "$pairs" 5 50 | sed "s/^nvtx /$config /" >>"$m"
}
i=0
while [ "$i" -lt "$runs" ]; do
  run none
  run cupti NVTX_INJECTION64_PATH="$cupti"
  for w in all nvtx:other steps:1000000-1000001; do
    case $w in all) c=braid ;; nvtx:*) c=braid_nvtx ;; *) c=braid_steps ;; esac
    run "$c" CUDA_INJECTION64_PATH="$agent" NVTX_INJECTION64_PATH="$agent" \
      BRAID_CAPTURE_OUTPUT="$out/j.braid" BRAID_CAPTURE_WINDOW="$w" BRAID_CAPTURE_FLUSH_MS=10 RANK=0
    rm -f "$out"/j.*
  done
  i=$((i + 1))
done
awk '
  { v[$1] = v[$1] " " $2; c[$1] = c[$1] " " $3 }
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    print "| NVTX push/pop pair, ns | none | cupti | braid | braid - cupti | braid, --nvtx other | braid, --steps |"
    print "|---|---|---|---|---|---|---|"
    k = split(v["braid"], x, " ")
    row("wall", v, k)
    row("thread CPU", c, k)
  }
  function row(what, s, k,   n, f, b) {
    n = median(s["none"]); f = median(s["cupti"]); b = median(s["braid"])
    printf "| %s, median of %d rounds | %.1f | %.1f | %.1f | %+.1f | %.1f | %.1f |\n", what, k, n, f, b, b - f, median(s["braid_nvtx"]), median(s["braid_steps"])
  }' "$m"
rm -rf "$out"

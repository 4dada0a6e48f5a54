#!/bin/sh
# Capture overhead on a GPU machine (issue 19's table, docs/BENCHMARKS.md "Capture overhead"):
#  - per operation (braid-bench-capture-ops): empty launch + sync, 4 KB copy + sync, NVTX
#    push/pop, one-rank all-reduce + sync; without capture, with CUPTI's floor and under
#    `braid record`;
#  - a PyTorch step (bench/capture_torch_step.py, launch-bound and compute-bound, when python3 has
#    a CUDA torch): without capture, with the floor, under `braid record`, and with torch.profiler;
#  - the whole run of capture_cuda_streams_nccl without capture, with the floor, under `braid
#    record`, and with a window that never opens (an idle agent);
# each configuration RUNS times, interleaved (none, floor, braid, torch, none, ...), so drifts of
# the machine hit all alike. CUPTI's floor (bench/cupti_floor.cc, libbraid_cupti_floor.so,
# injected as braid's agent is) enables what braid enables and reads nothing: braid - floor is
# braid's own cost. Then the no-crash check (bench/capture_launches.sh): 10 million launches
# under `braid record` exit 0 with every kernel stored; BRAID_BENCH_SKIP_LAUNCHES=1 leaves it out
# (scripts/gpu_check.sh runs it on its own). Prints the table of medians
# (braid-bench-capture-summary) and leaves the raw measurements in OUT_DIR/measurements.
# Runs on the lent GPU machine: only sh, awk and python3 beyond the built tree (no bc).
# BRAID_BENCH_ONLY=ops keeps the per-operation rows only (no PyTorch or whole-run rows).
# Usage: [BRAID_RECORD_ARGS="--trace cuda"] [BRAID_BENCH_ONLY=ops] bench/capture_overhead.sh
#        BUILD_DIR [RUNS] [OUT_DIR]
set -eu
. "$(dirname "$0")/common.sh"
bench_dirs "bench/capture_overhead.sh BUILD_DIR [RUNS] [OUT_DIR]" "$@"
runs=${2:-5}
capture_tools
summary=$build/bench/braid-bench-capture-summary
floor_lib=$build/bench/libbraid_cupti_floor.so
prog=$build/tests/capture/capture_cuda_streams_nccl
here=$(cd "$(dirname "$0")" && pwd)
m=$out/measurements
: >"$m"
need_built capture_overhead -x "$ops" "$summary" "$prog" "$braid"
need_built capture_overhead -f "$floor_lib"

"$braid" record -q -f -o "$out/probe.braid" -- true 2>"$out/why" || true
if grep -q "nothing captured" "$out/why"; then cat "$out/why"; exit 1; fi
have_torch=0
python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && have_torch=1

# BRAID_RECORD_ARGS: more `braid record` options for the braid rows, e.g. "--trace cuda,api"; the
# floor asks for the same subset.
rec() { "$braid" record -q -f ${BRAID_RECORD_ARGS:-} -o "$out/rec.braid" -- "$@"; }
floor_trace=$(echo " ${BRAID_RECORD_ARGS:-} " | sed -n 's/.* --trace[ =]\([^ ]*\) .*/\1/p')
floor() {
  CUDA_INJECTION64_PATH=$floor_lib NVTX_INJECTION64_PATH=$floor_lib \
    BRAID_CAPTURE_TRACE=${floor_trace:-all} "$@"
}
# Wall seconds of a command (awk's doubles: microseconds are kept at today's epoch).
seconds() {
  s=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || return $?
  elapsed "$s" "$(date +%s.%N)" 6
}
# measure CONFIG WORKLOAD CMD...: one whole-run measurement; a command that fails stops the run
# (an empty value would only be refused later by the summary).
measure() {
  config=$1 workload=$2
  shift 2
  v=$(seconds "$@") || { echo "capture_overhead: $config $workload: '$*' failed (exit $?)" >&2; exit 1; }
  echo "$config $workload $v" >>"$m"
}

i=0
while [ "$i" -lt "$runs" ]; do
  for op in launch_sync copy4k nvtx allreduce; do
    "$ops" "$op" 20000 1 | sed 's/^/none /' >>"$m"
    floor "$ops" "$op" 20000 1 | sed 's/^/floor /' >>"$m"
    rec "$ops" "$op" 20000 1 | sed 's/^/braid /' >>"$m"
  done
  # BRAID_BENCH_ONLY=ops: the per-operation rows alone, e.g. once per --trace subset (the PyTorch
  # rows, each starting Python and torch, take most of a run: three runs took over 240 s on an
  # H100).
  [ "${BRAID_BENCH_ONLY:-}" = ops ] && { i=$((i + 1)); continue; }
  if [ "$have_torch" = 1 ]; then
    for kind in launch compute; do
      python3 "$here/capture_torch_step.py" "$kind" 50 | sed 's/^/none /' >>"$m"
      floor python3 "$here/capture_torch_step.py" "$kind" 50 | sed 's/^/floor /' >>"$m"
      rec python3 "$here/capture_torch_step.py" "$kind" 50 | sed 's/^/braid /' >>"$m"
      python3 "$here/capture_torch_step.py" "$kind" 50 --torch-profiler | sed 's/^/torch /' >>"$m"
    done
  fi
  measure none whole_run_s "$prog" 200
  measure floor whole_run_s floor "$prog" 200
  measure braid whole_run_s rec "$prog" 200
  measure braid idle_window_s "$braid" record -q -f --nvtx never-opened -o "$out/idle.braid" -- "$prog" 200
  i=$((i + 1))
done
"$summary" "$m"

# No crash and no lost record at 10 million launches.
[ "${BRAID_BENCH_SKIP_LAUNCHES:-0}" = 1 ] || sh "$here/capture_launches.sh" "$build" 10000000 "$out"

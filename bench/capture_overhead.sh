#!/bin/sh
# Capture overhead on a GPU machine (issue 19's table, docs/BENCHMARKS.md "Capture overhead"):
#  - per operation (braid-bench-capture-ops): empty launch + sync, 4 KB copy + sync, NVTX
#    push/pop, one-rank all-reduce + sync; without capture and under `braid record`;
#  - a PyTorch step (bench/capture_torch_step.py, launch-bound and compute-bound, when python3 has
#    a CUDA torch): without capture, under `braid record`, and with torch.profiler;
#  - the whole run of capture_cuda_streams_nccl without capture, under `braid record`, and with
#    a window that never opens (an idle agent);
# each configuration RUNS times, interleaved (none, braid, torch, none, ...), so drifts of the
# machine hit all alike. Then the no-crash check: 10 million launches under `braid record` exit 0
# with every kernel stored. Prints the table of medians (braid-bench-capture-summary) and leaves
# the raw measurements in OUT_DIR/measurements.
# Usage: [BRAID_RECORD_ARGS="--trace cuda"] bench/capture_overhead.sh BUILD_DIR [RUNS] [OUT_DIR]
set -eu
build=${1:?usage: bench/capture_overhead.sh BUILD_DIR [RUNS] [OUT_DIR]}
runs=${2:-5}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
ops=$build/bench/braid-bench-capture-ops
summary=$build/bench/braid-bench-capture-summary
prog=$build/tests/capture/capture_cuda_streams_nccl
braid=$build/app/braid
here=$(cd "$(dirname "$0")" && pwd)
m=$out/measurements
: >"$m"

"$braid" record -q -f -o "$out/probe.braid" -- true 2>"$out/why" || true
if grep -q "nothing captured" "$out/why"; then cat "$out/why"; exit 1; fi
have_torch=0
python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && have_torch=1

# BRAID_RECORD_ARGS: more `braid record` options for the braid rows, e.g. "--trace cuda,api".
rec() { "$braid" record -q -f ${BRAID_RECORD_ARGS:-} -o "$out/rec.braid" -- "$@"; }
seconds() { s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc -l; }

i=0
while [ "$i" -lt "$runs" ]; do
  for op in launch_sync copy4k nvtx allreduce; do
    "$ops" "$op" 20000 1 | sed 's/^/none /' >>"$m"
    rec "$ops" "$op" 20000 1 | sed 's/^/braid /' >>"$m"
  done
  if [ "$have_torch" = 1 ]; then
    for kind in launch compute; do
      python3 "$here/capture_torch_step.py" "$kind" 50 | sed 's/^/none /' >>"$m"
      rec python3 "$here/capture_torch_step.py" "$kind" 50 | sed 's/^/braid /' >>"$m"
      python3 "$here/capture_torch_step.py" "$kind" 50 --torch-profiler | sed 's/^/torch /' >>"$m"
    done
  fi
  echo "none whole_run_s $(seconds "$prog" 200)" >>"$m"
  echo "braid whole_run_s $(seconds rec "$prog" 200)" >>"$m"
  echo "braid idle_window_s $(seconds "$braid" record -q -f --nvtx never-opened -o "$out/idle.braid" -- "$prog" 200)" >>"$m"
  i=$((i + 1))
done
"$summary" "$m"

# No crash and no lost record at 10 million launches.
n=10000000
rm -f "$out"/launches.*
"$braid" record -q -o "$out/launches.braid" -- "$ops" launches "$n" >"$out/launches.out"
stored=$(python3 -c "import glob, sqlite3, sys; f = glob.glob(sys.argv[1] + '/launches.rank*.braid') + glob.glob(sys.argv[1] + '/launches.pid*.braid'); print(sqlite3.connect(f[0]).execute(\"SELECT COUNT(*) FROM kernels k JOIN strings s ON s.id = k.name_id WHERE s.text LIKE '%braid_empty%'\").fetchone()[0])" "$out")
echo "10M launches: exit 0, $(cat "$out/launches.out"), kernels stored: $stored"
[ "$stored" = "$n" ]

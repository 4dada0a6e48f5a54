#!/bin/sh
# How well the sim, calibrated on this host, predicts the mpi backend's step time, for every
# preset at its own degrees (docs/BENCHMARKS.md). Per preset and run: a calibration job
# (`braid replay --calibrate --backend mpi`), then a replay job with that profile (FLOW=file, the
# default), or one job that calibrates first (FLOW=job, `--calibrate-first`); prints each run's
# measured/predicted and the median over the runs. The shape is the replay tests'
# timing shape: layers = PP stages, hidden 1024, sequence 512, FFN 4 x hidden, 4 experts top-2
# for MoE presets, PP micro-batches = stages, H100 compute durations times SCALE.
# SHARE=1 calibrates with --share-cores (the sim shares the host's cores between collectives).
# Usage: bench/simfit.sh BUILD_DIR [RUNS] [PRESET ...]   (default: all presets, 3 runs)
set -eu
build=${1:?usage: bench/simfit.sh BUILD_DIR [RUNS] [PRESET ...]}
runs=${2:-3}
[ $# -ge 2 ] && shift 2 || shift $#
presets=${*:-tp-sp tp-ep pp-ep pp-sp sp-ep tp-pp dense moe}
scale=${SCALE:-20}
flow=${FLOW:-file}
share=""; [ "${SHARE:-0}" = 1 ] && share="--share-cores"
case $flow in file | job) ;; *) echo "simfit: FLOW must be file or job" >&2; exit 2 ;; esac
braid=$build/app/braid
command -v mpirun >/dev/null || { echo "simfit: mpirun not found" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "host: $(nproc) cores, $(uname -m); $runs runs per preset; compute scale $scale; flow $flow${share:+; $share}"
printf '%-6s %5s  %-40s %s\n' preset ranks "measured / predicted per run (measured ms)" median
for p in $presets; do
  # The preset's degrees: world size and PP stages, MoE or dense.
  line=$("$braid" synth --list-presets | awk -v p="$p" '$1 == p')
  [ -n "$line" ] || { echo "simfit: unknown preset $p" >&2; exit 1; }
  deg() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
  tp=$(deg tp); pp=$(deg pp); dp=$(deg dp); experts=$(deg experts)
  np=$((tp * pp * dp))
  moe=""; [ "$experts" != 0 ] && moe="--experts 4 --top-k 2"
  "$braid" synth --preset "$p" --layers "$pp" --hidden 1024 --heads 8 --seq 512 --micro-batch 1 \
    --ffn 0 --micro-batches "$pp" $moe --json "$out/s.json" -q >/dev/null
  mpi="mpirun --oversubscribe --allow-run-as-root -np $np"
  i=0; : >"$out/ratios"; cells=""
  while [ "$i" -lt "$runs" ]; do
    if [ "$flow" = file ]; then
      $mpi "$braid" replay --calibrate $share --backend mpi -o "$out/cal.json" >"$out/cal.log" 2>&1 ||
        { cat "$out/cal.log" >&2; exit 1; }
      predict="--profile $out/cal.json"
    else
      predict="--calibrate-first $share"
    fi
    $mpi "$braid" replay "$out/s.json" --backend mpi --compute-scale "$scale" --warmup 2 \
      --steps 11 $predict --no-store --json >"$out/rep.json" 2>"$out/rep.log" ||
      { cat "$out/rep.log" "$out/rep.json" >&2; exit 1; }
    # measured/predicted and the measured median (ms), from replay's --json (docs/cli.md)
    read -r r m <<EOF
$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("%.3f %.3f" % (d["median_ns"] / d["sim_prediction_ns"], d["median_ns"] / 1e6))' "$out/rep.json")
EOF
    echo "$r" >>"$out/ratios"
    cells="$cells $r ($m)"
    i=$((i + 1))
  done
  printf '%-6s %5s %-41s %s\n' "$p" "$np" "$cells" "$(median <"$out/ratios")"
done

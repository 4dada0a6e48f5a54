#!/usr/bin/env bash
# `braid fuse` at the shapes of Chimera's experiments (issue 22) on the RTX 4080 PCIe profile:
# synthesizes each preset at its shape, then times `braid fuse` (wall seconds, peak RSS) and
# prints its fixed point and prediction. Usage: bench/fuse_chimera_shapes.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
braid=$build/app/braid
profile=$root/assets/profiles/rtx4080-pcie4.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common="--hidden 2048 --heads 16 --seq 8192 --micro-batches 1 --dtype float32 --profile $profile"
moe="--experts 8 --top-k 1"
declare -A shape=(
  [tp-pp]="--tp 4 --pp 2 --dp 1 --micro-batch 64 --layers 2"
  [tp-ep]="--tp 4 --dp 2 --ep 2 --micro-batch 128 --layers 1 $moe"
  [sp-ep]="--tp 4 --dp 2 --ep 2 --micro-batch 128 --layers 1 $moe"
  [pp-ep]="--tp 1 --pp 2 --dp 4 --ep 4 --micro-batch 64 --layers 2 $moe"
  [pp-sp]="--tp 4 --pp 2 --dp 1 --micro-batch 112 --layers 2"
)
printf '| preset | fuse wall s | peak MB | fixed point | prediction |\n|---|---|---|---|---|\n'
for p in tp-pp tp-ep sp-ep pp-ep pp-sp; do
  f=$work/$p.braid
  # shellcheck disable=SC2086
  "$braid" synth --preset "$p" ${shape[$p]} $common -q -o "$f" >/dev/null
  /usr/bin/time -f '%e %M' -o "$work/time" "$braid" fuse "$f" --profile "$profile" >"$work/out"
  read -r secs kb <"$work/time"
  fixed=$(grep -o 'fixed point after [0-9]* applied ([^)]*)' "$work/out" | sed 's/ in [0-9]* rounds\?//g; s/[a-z-]* 0, //g; s/, [a-z-]* 0//g')
  pred=$(grep -o 'predicted step time.*' "$work/out" | sed 's/predicted step time (simulated, profile [^)]*): //')
  printf '| %s | %s | %d | %s | %s |\n' "$p" "$secs" $((kb / 1024)) "$fixed" "$pred"
done

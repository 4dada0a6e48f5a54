#!/usr/bin/env bash
# Triggers a capture of one job on many nodes at once through the node daemons, using pdsh when
# it is installed and parallel ssh otherwise. Under Slurm prefer:
#   srun --nodes N --ntasks-per-node 1 braid trigger --job JOB --duration 5s
# Usage: braid-trigger-all.sh --hosts "n1,n2,n3" [--braid /path/to/braid] -- <braid trigger args>
set -euo pipefail
hosts="" braid="braid"
while (($#)); do
  case "$1" in
    --hosts) hosts="$2"; shift 2 ;;
    --braid) braid="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n 2,6p "$0"; exit 0 ;;
    *) echo "braid-trigger-all: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$hosts" ] || { echo "braid-trigger-all: --hosts is required" >&2; exit 2; }
(($#)) || { echo "braid-trigger-all: give the braid trigger arguments after --" >&2; exit 2; }
args=$(printf '%q ' "$@")
if command -v pdsh >/dev/null; then
  exec pdsh -w "$hosts" "$braid trigger -q $args"
fi
status=0
pids=()
IFS=, read -ra list <<<"$hosts"
for h in "${list[@]}"; do
  ssh -o BatchMode=yes "$h" "$braid trigger -q $args" | sed "s/^/$h: /" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status

# Sourced by the capture and analysis benchmarks (bench/capture_*.sh, bench/analyze_*.sh) after
# `set -eu`: the pieces each of them starts with. POSIX sh.

# bench_dirs USAGE ARGS...: the benchmark's arguments "BUILD_DIR [X] [OUT_DIR]": sets `build` to
# the first and `out` to the third (a new temporary folder when absent), created; without a first
# argument prints USAGE and exits 2.
bench_dirs() {
  [ -n "${2:-}" ] || { echo "usage: $1" >&2; exit 2; }
  build=$2
  out=$(out_dir "${4:-}")
}

# capture_tools: the built programs the GPU benchmarks drive, under $build: `ops`
# (braid-bench-capture-ops) and `braid` (the CLI).
capture_tools() {
  ops=$build/bench/braid-bench-capture-ops
  braid=$build/app/braid
}

# need_built WHO TEST FILE...: exits 1 with "WHO: FILE: not built" unless `test TEST FILE` holds
# for every FILE (TEST: -x for programs, -e or -f for libraries).
need_built() {
  who=$1 t=$2
  shift 2
  for f in "$@"; do
    test "$t" "$f" || { echo "$who: $f: not built" >&2; exit 1; }
  done
}

# out_dir [DIR]: prints DIR (a new temporary folder when empty), created.
out_dir() {
  d=${1:-}
  [ -n "$d" ] || d=$(mktemp -d)
  mkdir -p "$d"
  echo "$d"
}

# elapsed START END DECIMALS: END - START (date +%s.%N stamps) with DECIMALS decimals (awk's
# doubles keep microseconds at today's epoch; sh has no floating point).
elapsed() {
  awk -v s="$1" -v e="$2" -v p="$3" 'BEGIN { printf("%." p "f\n", e - s) }'
}

# kineto_job_files GEN BRAID RANKS MB DIR: a RANKS-rank job of synthetic Kineto traces of MB
# megabytes each (GEN: braid-gen-kineto, one per rank, same seed), each imported by BRAID into
# DIR/rankR.braid; sets `files` to their paths, in rank order.
kineto_job_files() {
  files=""
  r=0
  while [ "$r" -lt "$3" ]; do
    "$1" --size-mb "$4" --rank "$r" --world "$3" --seed 7 -o "$5/rank.json" >/dev/null 2>&1
    "$2" import "$5/rank.json" -o "$5/rank$r.braid" -q
    rm -f "$5/rank.json"
    files="$files $5/rank$r.braid"
    r=$((r + 1))
  done
}

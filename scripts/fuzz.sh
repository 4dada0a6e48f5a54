#!/usr/bin/env bash
# Longer fuzzing of the importers (docs/testing.md): each target under ASan + UBSan for at least
# SECONDS and at least MIN inputs, with a fixed seed, in the sanitized build of
# scripts/sanitize.sh (built here if needed).
#
#   bash scripts/fuzz.sh [--seconds S] [--min-inputs N] [--seed K] [TARGET...]
#
# TARGET: kineto, nsys, chakra (default: all three). A crash, a hang over 20 s, a sanitizer report
# or a stored time outside 1970-2100 stops the run with the failing input's path; put that input
# under tests/data/fuzz/TARGET/ and it is replayed by the suite from then on.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BRAID_SANITIZE_BUILD_DIR:-$root/build-sanitize}
seconds=120 min=10000 seed=2026
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift ;;
    --min-inputs) min=$2; shift ;;
    --seed) seed=$2; shift ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    kineto|nsys|chakra) targets+=("$1") ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
((${#targets[@]})) || targets=(kineto nsys chakra)

BRAID_SETUP_NO_BUILD=1 bash "$root/scripts/setup.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DBRAID_SANITIZE=ON -DBRAID_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$build" -j "${BRAID_JOBS:-$(nproc)}" --target "${targets[@]/%/_fuzz}"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/scripts/sanitize.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
for t in "${targets[@]}"; do
  "$build/tests/${t}_fuzz" "$seconds" "$seed" --min-inputs "$min"
done

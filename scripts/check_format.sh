#!/usr/bin/env bash
# Formatting check (.clang-format, docs/architecture.md): the C++ lines changed since BASE must be
# as clang-format writes them. BASE: the first argument, else the merge base with `main` when
# HEAD is not main itself, else HEAD~1 (the last commit). Exit 1 listing the diff clang-format
# wants; `--fix` applies it instead. Untouched lines are not checked (older code is formatted
# when it is next changed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fix=0
if [ "${1:-}" = "--fix" ]; then fix=1; shift; fi
base=${1:-}
if [ -z "$base" ]; then
  if git rev-parse -q --verify main >/dev/null && [ "$(git rev-parse main)" != "$(git rev-parse HEAD)" ]; then
    base=$(git merge-base HEAD main)
  else
    base=HEAD~1
  fi
  if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
    echo "check_format: no commit before HEAD here (a shallow clone?): nothing to compare; name a BASE"
    exit 0
  fi
fi
command -v git-clang-format >/dev/null || { echo "check_format: git-clang-format not found (apt-get install clang-format)" >&2; exit 2; }
if [ "$fix" = 1 ]; then
  git clang-format --force --extensions cc,h,cu "$base" || true
  exit 0
fi
out=$(git clang-format --diff --extensions cc,h,cu "$base" -- 2>&1 || true)
case "$out" in
  *"no modified files to format"*|*"clang-format did not modify any files"*|"") echo "check_format: changes since $(git rev-parse --short "$base") are formatted"; exit 0 ;;
esac
echo "$out"
echo "check_format: the C++ lines changed since $(git rev-parse --short "$base") are not formatted (scripts/check_format.sh --fix applies the diff above)" >&2
exit 1

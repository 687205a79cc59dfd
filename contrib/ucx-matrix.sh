#!/bin/bash
# The component against every UCX version the project supports, by hand (CI runs a part of
# it: contrib/test.sh): for each, contrib/ucx-check.sh (built against it, loaded natively,
# its own UCT tests, ucx_info, UCP lane selection and tag offload, ucx_perftest UCT and UCP)
# and UCX's own gtest suite as CI runs it (contrib/ucx-gtest.sh ci). Logs go to
# $PORTALS_UCX_CACHE/matrix-<version>.log; a summary table is printed at the end.
#
#   contrib/ucx-matrix.sh [SOURCE...]    default: installed, ../shared/ucx/ucx-1.18.1.tar.gz,
#                                        ../shared/ucx/ucx-1.22.0.tar.gz
#   UCX_MATRIX_GTEST=n contrib/ucx-matrix.sh    without the gtest suites
set -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
cache=${PORTALS_UCX_CACHE:-$HOME/.cache/portals-ucx}
releases=${PORTALS_UCX_RELEASES:-$top/../shared/ucx}
[ $# -gt 0 ] || set -- installed "$releases/ucx-1.18.1.tar.gz" "$releases/ucx-1.22.0.tar.gz"
mkdir -p "$cache"
summary=()
status=0
for src in "$@"; do
  name=$(basename "$src" .tar.gz)
  log=$cache/matrix-$name.log
  check=FAILED
  gtest=skipped
  "$here/ucx-check.sh" "$src" > "$log" 2>&1 && check=passed || status=1
  if [ "${UCX_MATRIX_GTEST:-y}" != n ]; then
    gtest=FAILED
    if "$here/ucx-gtest.sh" --ucx "$src" ci >> "$log" 2>&1; then
      gtest="passed ($(grep -c '^\[       OK \]' "$log") OK, $(grep -c '^\[  SKIPPED \]' "$log") skipped)"
    else
      status=1
    fi
  fi
  version=$(sed -n 's/^ucx-check: UCX \([0-9.]*\):.*/\1/p' "$log" | head -1)
  summary+=("$(printf '%-10s check %-7s gtest %s  (%s)' "${version:-$name}" "$check" "$gtest" "$log")")
done
printf '%s\n' "${summary[@]}"
exit $status

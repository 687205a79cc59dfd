#!/bin/sh
# Runs the multi-process suite under ptlrun with 2 and 4 ranks; each run has a time bound.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
ptlrun="$b/ptlrun"
mp="$b/test/mp_tests"
[ -x "$mp" ] || mp="$b/test/.libs/mp_tests"
for n in 2 4; do
  echo "== ptlrun -n $n mp_tests"
  "$ptlrun" -n $n --timeout 120 "$mp" --gtest_filter=-Job.EarlyExit* --gtest_brief=1
  echo "== ptlrun -n $n mp_tests (early exit)"
  "$ptlrun" -n $n --timeout 60 "$mp" --gtest_filter=Job.EarlyExit* --gtest_brief=1
done

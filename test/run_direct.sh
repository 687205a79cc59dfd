#!/bin/sh
# Runs the direct-path suite (test/direct_test.cc) under ptlrun with 2 ranks and
# PTL_PROGRESS=manual: the target's CPU does nothing for a peer's operation unless the target
# calls in. Over the tcp wire the same programs must pass on the message path, where the tests
# whose target never calls in cannot: they are skipped there (README: tcp keeps the message path).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
ptlrun="$b/ptlrun"
t="$b/test/direct_tests"
[ -x "$t" ] || t="$b/test/.libs/direct_tests"
# The dead-target test ends both processes (its target exits): alone, or the tests after it
# would never run.
last="*DeadTarget*"
echo "== PTL_PROGRESS=manual ptlrun -n 2 direct_tests (shm)"
PTL_PROGRESS=manual "$ptlrun" -n 2 --timeout 120 "$t" --gtest_brief=1 "--gtest_filter=-$last"
PTL_PROGRESS=manual "$ptlrun" -n 2 --timeout 120 "$t" --gtest_brief=1 "--gtest_filter=$last"
echo "== PTL_DIRECT=0 ptlrun -n 2 direct_tests: the message path keeps every rule (same target)"
PTL_DIRECT=0 PTL_PROGRESS=manual "$ptlrun" -n 2 --timeout 120 "$t" --gtest_brief=1 --gtest_filter=-*NeverCallsIn*:*U4_*:*X_*:*A5_*:*F1_*
echo "== PTL_WAKE=socket PTL_WAIT_SPIN_US=0 ptlrun -n 2 direct_tests: waits sleep at once, woken by the wake socket"
PTL_WAKE=socket PTL_WAIT_SPIN_US=0 PTL_PROGRESS=manual "$ptlrun" -n 2 --timeout 120 "$t" --gtest_brief=1 "--gtest_filter=-$last"
PTL_WAKE=socket PTL_WAIT_SPIN_US=0 PTL_PROGRESS=manual "$ptlrun" -n 2 --timeout 120 "$t" --gtest_brief=1 "--gtest_filter=$last"

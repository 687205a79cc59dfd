#!/bin/sh
# Runs the multi-process suite under ptlrun with 2 and 4 ranks, over the shared-memory wire
# and again over the tcp wire (PTL_WIRE=tcp: same host, real sockets); each run has a time bound.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
ptlrun="$b/ptlrun"
mp="$b/test/mp_tests"
[ -x "$mp" ] || mp="$b/test/.libs/mp_tests"
for wire in shm tcp; do
  for n in 2 4; do
    echo "== PTL_WIRE=$wire ptlrun -n $n mp_tests"
    PTL_WIRE=$wire "$ptlrun" -n $n --timeout 120 "$mp" --gtest_filter=-Job.EarlyExit* --gtest_brief=1
    echo "== PTL_WIRE=$wire ptlrun -n $n mp_tests (early exit)"
    PTL_WIRE=$wire "$ptlrun" -n $n --timeout 60 "$mp" --gtest_filter=Job.EarlyExit* --gtest_brief=1
  done
done
# Rings of different sizes: rank 1's holds messages of 4 KiB at most (64 cells), the others'
# 512 KiB; every put and get still arrives, a volatile one with the bytes of its call.
echo "== ptlrun -n 2 mp_tests, rank 1 with PTL_SHM_CELLS=64"
"$ptlrun" -n 2 --timeout 120 sh -c '[ "$PTLRT_RANK" != 1 ] || export PTL_SHM_CELLS=64; exec "$0" "$@"' "$mp" \
  --gtest_filter='Job.PutsAndGetsOfEverySize*:Job.VolatilePuts*:Job.MatchedSends*:Job.NoAckPuts*' --gtest_brief=1
# Memory peers cannot map, both ways whatever PTL_SHM_COPY_MAX=auto chose on this machine:
# through the ring up to 256 KiB, and by cross-memory attach above PTL_RNDV_THRESH.
for limit in 262144 0; do
  echo "== PTL_SHM_COPY_MAX=$limit ptlrun -n 2 mp_tests (bulk data of heap buffers, puts and gets of every size)"
  PTL_SHM_COPY_MAX=$limit "$ptlrun" -n 2 --timeout 120 "$mp" \
    --gtest_filter='Job.UnmappableBulk*:Job.PutsAndGetsOfEverySize*' --gtest_brief=1
done
# Waits that sleep at once (no spin), woken through the wake socket (PTL_WAKE=socket, the
# verbs wire's default) instead of the futex. (PTL_PROGRESS=manual: run_direct.sh.)
echo "== PTL_WAKE=socket PTL_WAIT_SPIN_US=0 PTL_WIRE=tcp ptlrun -n 4 mp_tests"
PTL_WAKE=socket PTL_WAIT_SPIN_US=0 PTL_WIRE=tcp "$ptlrun" -n 4 --timeout 120 "$mp" --gtest_filter=-Job.EarlyExit* \
  --gtest_brief=1

#!/bin/sh
# Kills one rank of a two-rank job with SIGKILL while the other has a large put, a large get
# and a rendezvous put in flight to it (test/peer_failure_test.cc); the survivor must see
# failures within the bound and finalize cleanly. Runs over each wire on this host, or with
# the ranks on two hosts when PTL_TEST_LAUNCH names a wrapper (contrib/netns-exec-rank.sh).
# ptlrun reports the victim's status 137 (128 + SIGKILL); any other rank status is a failure.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
ptlrun="$b/ptlrun"
prog="$b/test/peer_failure_test"
wires=${PTL_TEST_WIRES:-shm tcp}
rc=0
for wire in $wires; do
  echo "== PTL_WIRE=$wire ptlrun -n 2 ${PTL_TEST_LAUNCH:-} peer_failure_test"
  log=$(mktemp)
  PTL_WIRE=$wire "$ptlrun" -n 2 --timeout 60 ${PTL_TEST_LAUNCH:-} "$prog" --gtest_brief=1 >"$log" 2>&1
  status=$?
  cat "$log"
  if [ $status -ne 137 ] || ! grep -q "rank 0 exited with status 137" "$log" ||
     grep -q "rank 1 exited" "$log" || ! grep -q "peer failure noticed" "$log"; then
    echo "FAIL: PTL_WIRE=$wire (ptlrun status $status; want the victim's 137 and a clean survivor)"
    rc=1
  fi
  rm -f "$log"
done
exit $rc

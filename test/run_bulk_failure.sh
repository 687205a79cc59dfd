#!/bin/sh
# A peer killed in the middle of an RDMA read, then of an RDMA write (test/bulk_failure_test.cc):
# two ranks on the first two hosts of contrib/guest-rxe-hosts.sh, the transfer deadline
# PTL_VERBS_BULK_TIMEOUT_MS lowered to 3 s. The victim (rank 0) must die by its own SIGKILL
# (ptlrun reports 137), the survivor see the transfer fail within twice the deadline and
# finish cleanly.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
# shellcheck source=test/victim_check.sh
. "$top/test/victim_check.sh"
set -- ${NETNS_HOSTS:?run_bulk_failure: run under contrib/guest-rxe-hosts.sh}
rc=0
for case in Read Write; do
  echo "== a peer killed during an RDMA $case (ptlrun -n 2, hosts $1 and $2)"
  stamp=$(mktemp) log=$(mktemp)
  NETNS_HOSTS="$1 $2" PTL_VERBS_BULK_TIMEOUT_MS=3000 PTL_TEST_KILL_STAMP=$stamp \
    "$b/ptlrun" -n 2 --timeout 120 "$top/contrib/netns-exec-rank.sh" "$b/test/bulk_failure_test" \
    --gtest_brief=1 --gtest_filter="*KilledDuringRdma$case*" >"$log" 2>&1
  status=$?
  cat "$log"
  if ! victim_died_alone $status "$log"; then
    echo "FAIL: killed during an RDMA $case (ptlrun status $status; want the victim's 137 and a clean survivor)"
    rc=1
  fi
  rm -f "$stamp" "$log"
done
exit $rc

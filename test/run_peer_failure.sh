#!/bin/sh
# Kills one rank of a two-rank job with SIGKILL while the other has operations in flight to
# it; the survivor must see failures within the bound and finish cleanly. Runs over each wire
# on this host, or with the ranks on two hosts when PTL_TEST_LAUNCH names a wrapper
# (contrib/netns-exec-rank.sh):
#   peer_failure_test       libportals4: a large put, a large get and a rendezvous put
#   ucp_peer_failure_test   UCP in peer-failure mode over UCX_TLS=portals: a 64 MiB tagged
#                           send (rendezvous) and eager sends; the ep's error callback fires
# ptlrun reports the victim's status 137 (128 + SIGKILL); any other rank status is a failure.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
# shellcheck source=test/victim_check.sh
. "$top/test/victim_check.sh"
ptlrun="$b/ptlrun"
wires=${PTL_TEST_WIRES:-shm tcp}
rc=0

# run_case LABEL PROGRAM [ARGS...]
run_case() {
  label=$1
  shift
  for wire in $wires; do
    echo "== PTL_WIRE=$wire ptlrun -n 2 ${PTL_TEST_LAUNCH:-} $label"
    log=$(mktemp)
    PTL_WIRE=$wire "$ptlrun" -n 2 --timeout 60 ${PTL_TEST_LAUNCH:-} "$@" >"$log" 2>&1
    status=$?
    cat "$log"
    if ! victim_died_alone $status "$log"; then
      echo "FAIL: $label, PTL_WIRE=$wire (ptlrun status $status; want the victim's 137 and a clean survivor)"
      rc=1
    fi
    rm -f "$log"
    # A victim that cut its host's link (PTL_TEST_CUT_LINK) leaves it down: up for the next case.
    if [ -n "${PTL_TEST_CUT_LINK:-}" ]; then
      for h in ${NETNS_HOSTS:-}; do ip -n "$h" link set eth0 up; done
    fi
  done
}

run_case peer_failure_test "$b/test/peer_failure_test" --gtest_brief=1

if [ -n "${SANITIZE_FLAGS:-}" ]; then
  echo "== UCP peer failure: skipped in the sanitizer build (uninstrumented libucp and the preload)"
elif [ -x "$b/test/ucp_peer_failure_test" ] && [ -f "$b/env.sh" ]; then
  # shellcheck source=/dev/null
  . "$b/env.sh"
  UCX_TLS=portals run_case ucp_peer_failure_test "$b/test/ucp_peer_failure_test"
else
  echo "== UCP peer failure: skipped (the UCT component is not built)"
fi
exit $rc

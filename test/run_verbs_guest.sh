#!/bin/sh
# The verbs wire on real verbs: boots a guest on Debian's kernel (contrib/guest-run.sh), makes
# four hosts there with a soft-RoCE device each (contrib/guest-rxe-hosts.sh) and runs the
# multi-host suite (test/run_multihost.sh) in it, so every process on another host is reached
# over RDMA: the multi-process suite, peer failure (a killed peer, a silent host), ucx_perftest
# over UCX_TLS=portals, mpirun/oshrun/Hydra jobs; the direct path's suite (test/direct_test.cc)
# with the target on another host, where puts and gets are RDMA writes and reads, 64-bit
# sums and compare-and-swaps device atomics, and an access with a revoked key fails; a peer
# killed in the middle of an RDMA read and of an RDMA write (test/run_bulk_failure.sh); a
# host's RDMA port going down and coming back (test/port_failure_test.cc); a 16-rank
# all-to-all across two hosts, also with at most 2 QPs per process (PTL_VERBS_MAX_QPS). Then checks
# that each device carried RDMA traffic, so a silent fallback to tcp fails the test.
#   test/run_verbs_guest.sh [BUILD_DIR]   (default: _build)
# Exit status 77 (skipped) where no virtual machine can run.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/_build}" && pwd)
[ -f "$build/test/mp_tests" ] || { echo "run_verbs_guest: $build has no test/mp_tests (make check first)" >&2; exit 1; }
grep -q PTL_HAVE_VERBS "$build/Makefile" ||
  { echo "run_verbs_guest: $build was configured without the verbs wire (libibverbs-dev)" >&2; exit 1; }

inner=$(mktemp "${TMPDIR:-/tmp}/verbs-guest.XXXXXX")
trap 'rm -f "$inner"' EXIT
cat > "$inner" <<EOF
set -e
# Where the emulated guest's time goes: its boot (uptime), then each stage's start.
echo "== guest up (uptime \$(cut -d" " -f1 /proc/uptime) s)"
export abs_top_builddir=$build PTL_TEST_HOSTS=4 PTL_TEST_LAUNCH_TIMEOUT=900
# Help messages of ranks in full, not aggregated (a failure says why).
export PTL_TEST_OMPI_FLAGS="--mca orte_base_help_aggregate 0"
$top/contrib/guest-rxe-hosts.sh 4 sh -c '
  at() { echo "== \$* (guest uptime \$(cut -d" " -f1 /proc/uptime) s)"; }
  at "the multi-host suite (run_multihost.sh) over RDMA"
  $top/test/run_multihost.sh || exit 1
  set -- \$NETNS_HOSTS
  at "PTL_PROGRESS=manual direct_tests (all; those that need one host skip), 2 ranks on 2 hosts: puts, gets, counted puts and atomics land by RDMA while the target never calls in"
  # The dead-target test ends both processes: alone. Several holders sit in a barrier while
  # their target revokes (they never answer): a shorter bound than the default 2 s.
  for filter in "-*DeadTarget*" "*DeadTarget*"; do
    NETNS_HOSTS="\$1 \$2" PTL_PROGRESS=manual PTL_DIRECT_REVOKE_MS=500 $build/ptlrun -n 2 --timeout 300 $top/contrib/netns-exec-rank.sh \
      $build/test/direct_tests --gtest_brief=1 "--gtest_filter=\$filter" || exit 1
  done
  $top/test/run_bulk_failure.sh || exit 1
  at "PTL_BULK_HOLD_MAX=2: small puts queued behind an RDMA pull past the bound withhold the initiator credits, and still land in order"
  NETNS_HOSTS="\$1 \$2" PTL_BULK_HOLD_MAX=2 PTL_VERBS_STATS=1 $build/ptlrun -n 2 --timeout 300 $top/contrib/netns-exec-rank.sh \
    $build/test/mp_tests --gtest_brief=1 --gtest_filter="Job.G11*" > /tmp/hold.log 2>&1 || { cat /tmp/hold.log; exit 1; }
  grep -q "[1-9][0-9]* credit withholds" /tmp/hold.log ||
    { grep "verbs wire on" /tmp/hold.log; echo "run_verbs_guest: no credits were withheld"; exit 1; }
  at "the RDMA port of the first host down and up again (port_failure_test, 2 ranks on 2 hosts): error events, then reconnection"
  NETNS_HOSTS="\$1 \$2" $build/ptlrun -n 2 --timeout 300 $top/contrib/netns-exec-rank.sh $build/test/port_failure_test \
    --gtest_brief=1 || exit 1
  at "16 ranks on 2 hosts, 8 RDMA peers each: mp_tests all-to-all puts, atomics and tagged sends into one rank, zero-copy ring"
  NETNS_HOSTS="\$1 \$2" $build/ptlrun -n 16 --timeout 600 $top/contrib/netns-exec-rank.sh $build/test/mp_tests \
    --gtest_brief=1 --gtest_filter="Job.NoAckPuts*:Job.AtomicsContention*:Job.MatchedSends*:Job.LargeZeroCopy*" || exit 1
  at "the same 16 ranks with PTL_VERBS_MAX_QPS=2: idle connections close (in band) and reopen when next used"
  NETNS_HOSTS="\$1 \$2" PTL_VERBS_MAX_QPS=2 $build/ptlrun -n 16 --timeout 600 $top/contrib/netns-exec-rank.sh $build/test/mp_tests \
    --gtest_brief=1 --gtest_filter="Job.RdmaConnections*:Job.NoAckPuts*:Job.MatchedSends*:Job.AtomicsContention*" || exit 1
  at "RDMA traffic per device"
  rdma statistic show | sed -n "s/^link \([^ ]*\) .* rdma_sends \([0-9]*\) rdma_recvs \([0-9]*\).*/\1 \2 \3/p" > /tmp/rdma.stats
  cat /tmp/rdma.stats
  [ "\$(wc -l < /tmp/rdma.stats)" -eq 4 ] || { echo "run_verbs_guest: expected 4 rxe devices"; exit 1; }
  while read -r dev sends recvs; do
    [ "\$sends" -gt 1000 ] && [ "\$recvs" -gt 1000 ] ||
      { echo "run_verbs_guest: \$dev carried almost no RDMA traffic: the verbs wire was not used"; exit 1; }
  done < /tmp/rdma.stats
  at "guest suite passed"
'
EOF
# The trees are shared read-write: tests write their logs there.
case $build in
  "$top"/*) share="--rw $top" ;;
  *) share="--rw $top --rw $build" ;;
esac
# shellcheck disable=SC2086
"$top/contrib/guest-run.sh" $share --timeout "${PTL_GUEST_TIMEOUT:-2700}" -- sh "$inner"

#!/bin/sh
# Multi-host tests: the ranks of one job on different "hosts", network namespaces joined by a
# bridge (contrib/netns-hosts.sh), so traffic between hosts takes the tcp wire over real
# veth links while ranks sharing a host use shared memory. Needs root and `ip netns`; exits
# 77 (skipped) with a message where they are missing.
#   1. the multi-process suite, 4 ranks on 2 hosts (shm and tcp in one job) and on 4 hosts
#   2. a peer killed with a large put, get and rendezvous in flight, survivor on another host;
#      then a peer whose host goes silent (link cut), noticed within PTL_TCP_TIMEOUT_MS
#   3. ucx_perftest over UCX_TLS=portals between two hosts (UCT active messages, UCP tags)
#   4. launchers across hosts: Open MPI's mpirun (PMIx) and Hydra (PMI-1) start ranks on two
#      hosts through contrib/netns-rsh.sh; the multi-process suite, and the MPI and OpenSHMEM
#      programs of run_integration.sh over UCX_TLS=portals with 2 ranks on each host
# PTL_TEST_LAUNCH_TIMEOUT (default 120 s) bounds each launcher job (an emulated guest needs more).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
if [ -z "${NETNS_HOSTS:-}" ]; then
  exec "$top/contrib/netns-hosts.sh" "${PTL_TEST_HOSTS:-4}" "$0" "$@"
fi
set -- $NETNS_HOSTS
[ $# -ge 4 ] || { echo "run_multihost: needs 4 hosts, got $#" >&2; exit 1; }
two="$1 $2"
rank_on_host="$top/contrib/netns-exec-rank.sh"
ptlrun="$b/ptlrun"
mp="$b/test/mp_tests"

echo "== 4 ranks on 2 hosts: mp_tests"
NETNS_HOSTS=$two "$ptlrun" -n 4 --timeout 120 "$rank_on_host" "$mp" --gtest_filter=-Job.EarlyExit* --gtest_brief=1
NETNS_HOSTS=$two "$ptlrun" -n 4 --timeout 60 "$rank_on_host" "$mp" --gtest_filter=Job.EarlyExit* --gtest_brief=1
echo "== 4 ranks on 4 hosts: mp_tests"
"$ptlrun" -n 4 --timeout 120 "$rank_on_host" "$mp" --gtest_filter=-Job.EarlyExit* --gtest_brief=1
"$ptlrun" -n 4 --timeout 60 "$rank_on_host" "$mp" --gtest_filter=Job.EarlyExit* --gtest_brief=1

echo "== peer killed on another host"
NETNS_HOSTS=$two PTL_TEST_WIRES=auto PTL_TEST_LAUNCH="$rank_on_host" "$top/test/run_peer_failure.sh"
# Hosts 3 and 4: the victim's host goes silent (its link cut, then the process killed), so
# only PTL_TCP_TIMEOUT_MS can tell the survivor; 3 s here, failures due within 8 s. (The UCP
# case has nothing unacknowledged on the wire: the idle connection's keepalive finds it.)
echo "== peer host goes silent (link cut)"
NETNS_HOSTS="$3 $4" PTL_TEST_WIRES=auto PTL_TEST_LAUNCH="$rank_on_host" PTL_TEST_CUT_LINK=1 \
  PTL_TCP_TIMEOUT_MS=3000 PTL_TEST_FAILURE_BOUND_S=8 "$top/test/run_peer_failure.sh"

# A host whose only network is loopback: the nid falls back to 127.0.0.1, and the tcp wire
# must still listen and carry the job there.
echo "== a host with loopback only: PTL_WIRE=tcp mp_tests"
unshare --net sh -c "ip link set lo up && PTL_WIRE=tcp $ptlrun -n 2 --timeout 60 $mp --gtest_filter=Runtime.*:Job.Matched* --gtest_brief=1"

if [ -n "${SANITIZE_FLAGS:-}" ]; then
  # A sanitizer-built module cannot be preloaded into the stock ucx_perftest.
  echo "== ucx_perftest between hosts: skipped in the sanitizer build"
elif [ -f "$b/env.sh" ] && command -v ucx_perftest >/dev/null 2>&1; then
  server_host=$1 client_host=$2
  server_addr=${NETNS_ADDRS%% *}
  . "$b/env.sh"
  export UCX_TLS=portals
  # Server on host 1, client on host 2 (contrib/perftest-pair.sh); prints the result line.
  # netns-rsh.sh gives each side its host's RDMA device in the guest (guest-rxe-hosts.sh); a
  # verbs connection that fails there would fall back to tcp silently, so its message fails
  # the test.
  perf_pair() {
    server_log=$(mktemp)
    status=0
    out=$(PERFTEST_ADDR=$server_addr PERFTEST_SERVER_PREFIX="$top/contrib/netns-rsh.sh $server_host" \
      PERFTEST_CLIENT_PREFIX="$top/contrib/netns-rsh.sh $client_host" PERFTEST_SERVER_LOG=$server_log \
      "$top/contrib/perftest-pair.sh" "$@" 2>&1) || status=$?
    refused=$( (cat "$server_log"; echo "$out") | grep "portals: verbs connection" || true)
    rm -f "$server_log"
    if [ $status -ne 0 ]; then
      echo "$out"
      echo "run_multihost: ucx_perftest $* failed" >&2
      return 1
    elif [ -n "$refused" ]; then
      echo "$refused"
      echo "run_multihost: ucx_perftest $*: a verbs connection failed (the job fell back to tcp)" >&2
      return 1
    fi
    echo "$out" | grep Final
  }
  echo "== ucx_perftest between hosts, UCX_TLS=portals"
  perf_pair -t am_lat -x portals -d eth0 -n 20000
  perf_pair -t put_bw -x portals -d eth0 -D zcopy -s 65536 -n 2000
  perf_pair -t tag_lat -n 20000
  perf_pair -t tag_bw -s 1048576 -n 500
  # Without the progress thread the iface offers no wake-up, so UCP never arms it (it used to
  # abort on a failed arm).
  (export PTL_PROGRESS=manual && perf_pair -t tag_lat -n 2000)
else
  echo "== ucx_perftest between hosts: skipped (the UCT component is not built)"
fi
# Launchers run on host 1 and start their daemons on hosts 1 and 2 through netns-rsh.sh, as
# they would through ssh; ranks alternate between the hosts.
rsh="$top/contrib/netns-rsh.sh"
. "$top/test/launcher_env.sh"
hostfile=$(mktemp) stats=$(mktemp)
trap 'rm -f "$hostfile" "$stats"' EXIT
host1=$1 host2=$2
# Runs a command with the UCT component preloaded and UCX_TLS=portals,self.
on_portals() {
  (. "$b/env.sh" && export UCX_TLS=portals,self && "$@")
}
# The job's output must show two ranks that passed on each host.
two_ranks_per_host() {
  echo "$1"
  for h in "$host1" "$host2"; do
    [ "$(echo "$1" | grep -c " on $h: ok")" = 2 ] || { echo "run_multihost: expected 2 ranks ok on $h" >&2; exit 1; }
  done
}
if command -v "$OMPI_MPIRUN" >/dev/null 2>&1; then
  printf '%s slots=2\n%s slots=2\n' "$1" "$2" > "$hostfile"
  ompi="timeout ${PTL_TEST_LAUNCH_TIMEOUT:-120} $OMPI_MPIRUN ${PTL_TEST_OMPI_FLAGS:-} --hostfile $hostfile --mca plm_rsh_agent $rsh --map-by node -n 4"
  echo "== mpirun across 2 hosts: mp_tests (PMIx)"
  "$rsh" "$1" "PTL_TEST_EXPECT_LAUNCHER=pmix $ompi -x PTL_TEST_EXPECT_LAUNCHER $mp --gtest_filter=-Job.EarlyExit* --gtest_brief=1" </dev/null
  "$rsh" "$1" "$ompi $mp --gtest_filter=Job.EarlyExit* --gtest_brief=1" </dev/null
  if [ -n "$MPI_PROGRAMS" ]; then
    for p in p2p coll rma; do
      echo "== mpirun across 2 hosts: Open MPI $p over UCX_TLS=portals"
      out=$(on_portals "$rsh" "$1" "$ompi $OMPI_UCX_FLAGS $MPI_PROGRAMS/$p" </dev/null)
      two_ranks_per_host "$out"
    done
    echo "== mpirun across 2 hosts: Open MPI tag_offload (UCX_PORTALS_STATS=y)"
    on_portals "$rsh" "$1" "UCX_PORTALS_STATS=y $ompi $OMPI_UCX_FLAGS -x UCX_PORTALS_STATS $MPI_PROGRAMS/tag_offload" \
      </dev/null >"$stats" 2>&1 || { cat "$stats"; exit 1; }
    check_offload 4 "$stats"
  else
    echo "== Open MPI across hosts: skipped ($MPI_SKIP)"
  fi
  if [ -n "$SHMEM_PROGRAMS" ]; then
    oshrun="timeout ${PTL_TEST_LAUNCH_TIMEOUT:-120} $OSHRUN --hostfile $hostfile --mca plm_rsh_agent $rsh --map-by node -n 4"
    for p in rma atomics coll; do
      echo "== oshrun across 2 hosts: OpenSHMEM $p over UCX_TLS=portals"
      out=$(on_portals "$rsh" "$1" "$oshrun $OMPI_UCX_FLAGS $SHMEM_PROGRAMS/$p" </dev/null)
      two_ranks_per_host "$out"
    done
  else
    echo "== OpenSHMEM across hosts: skipped ($SHMEM_SKIP)"
  fi
else
  echo "== mpirun across hosts: skipped (Open MPI not installed)"
fi
if command -v "$HYDRA_MPIEXEC" >/dev/null 2>&1; then
  echo "== mpiexec.hydra across 2 hosts: mp_tests (PMI-1)"
  # -genvnone: ranks take their environment from their host's proxy, which netns-rsh.sh
  # started with that host's RDMA device; Hydra would otherwise give every rank the
  # device of the host mpiexec runs on (their QPs then time out and tcp carries the job).
  hydra="timeout ${PTL_TEST_LAUNCH_TIMEOUT:-120} $HYDRA_MPIEXEC -launcher rsh -launcher-exec $rsh -iface eth0 -genvnone -hosts $1,$2 -n 4"
  "$rsh" "$1" "PTL_TEST_EXPECT_LAUNCHER=pmi1 $hydra $mp --gtest_filter=-Job.EarlyExit* --gtest_brief=1" </dev/null
  "$rsh" "$1" "$hydra $mp --gtest_filter=Job.EarlyExit* --gtest_brief=1" </dev/null
  if [ -n "$MPICH_PROGRAMS" ]; then
    for p in p2p coll; do
      echo "== mpiexec.hydra across 2 hosts: MPICH $p over UCX_TLS=portals"
      out=$(on_portals "$rsh" "$1" "$hydra $MPICH_PROGRAMS/$p" </dev/null)
      two_ranks_per_host "$out"
    done
  else
    echo "== MPICH across hosts: skipped ($MPICH_SKIP)"
  fi
else
  echo "== mpiexec.hydra across hosts: skipped (MPICH not installed)"
fi
echo "multi-host tests passed"

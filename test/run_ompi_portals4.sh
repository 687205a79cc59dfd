#!/bin/sh
# Open MPI's own Portals 4 components as a client of libportals4: Open MPI 4.1.4 built from
# Debian's source with only --with-portals4=<prefix> (contrib/ompi-build.sh, cached), and the
# MPI suites of test/integration/mpi (p2p, collectives, one-sided) run with
#   mtl:  pml cm + mtl portals4, osc portals4, coll portals4 (chosen by its priority: checked)
#   btl:  pml ob1 + btl portals4 (osc pt2pt over it; osc portals4 and coll portals4 need the mtl)
# at 2 and 4 ranks on this host, then with ranks on two network-namespace hosts (tcp wire).
# One exception: with btl portals4, one-sided runs with 2 ranks only. Open MPI 4.1.4's osc pt2pt
# answers a compare-and-swap with a blocking send while holding its accumulate lock; btl
# portals4 has no immediate send (btl_sendi), so ob1 waits in opal_progress, which hands the
# next compare-and-swap to osc pt2pt again, and that one spins on the lock its caller holds.
# With 3 or more ranks contending (rma.c's lock) every run deadlocks so (gdb: cswap_start ->
# mca_pml_ob1_send -> opal_progress -> process_frag -> accumulate lock), over any Portals
# library; btl tcp and vader complete small sends inline and never re-enter.
# The library under test is BUILD_DIR's, found first through LD_LIBRARY_PATH.
#   test/run_ompi_portals4.sh BUILD_DIR [OMPI_TREE]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
b=$(cd "${1:?usage: run_ompi_portals4.sh BUILD_DIR [OMPI_TREE]}" && pwd)
tree=${2:-}
[ -n "$tree" ] || tree=$("$top/contrib/ompi-build.sh" "$b")
O=$tree/prefix
export LD_LIBRARY_PATH="$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Nothing of the installed Open MPI's configuration or of UCX may leak into these runs.
unset OMPI_MCA_pml OMPI_MCA_osc OMPI_MCA_btl OMPI_MCA_mtl UCX_TLS

progs=$(mktemp -d)
trap 'rm -rf "$progs"' EXIT
for p in p2p coll rma; do
  "$O/bin/mpicc" -O2 -g -Wall -I"$top/test/integration" -o "$progs/$p" "$top/test/integration/mpi/$p.c"
done

MTL="--mca pml cm --mca mtl portals4 --mca osc portals4"
BTL="--mca pml ob1 --mca btl portals4,self --mca osc pt2pt --mca coll ^portals4"
# 4 ranks on 2 cores; help messages unaggregated so a failure says what it is.
LOCAL="--oversubscribe --mca orte_base_help_aggregate 0"

# What the ranks' engines did (PTL_TRACE): per rank, the first and last of what was dropped,
# held, refused or failed, and its last lines.
trace_digest() {
  for f in "$1"/ptl-trace.*; do
    [ -f "$f" ] || continue
    echo "-- trace $(basename "$f"): $(grep -ac . "$f") lines; dropped, held, refused, failed (first, last):"
    grep -a -e dropped -e "held:" -e "waits longer" -e refused -e "disabled" -e undeliverable -e failed "$f" |
      sort >"$f.notable"
    head -10 "$f.notable"
    [ "$(wc -l <"$f.notable")" -le 10 ] || { echo "   ..."; tail -10 "$f.notable"; }
    echo "-- its last lines:"
    grep -ah . "$f" | sort | tail -12
  done
}

# run LABEL N FLAGS PROGRAM [MPIRUN-PREFIX...]: every rank must report ok.
run() {
  label=$1 n=$2 flags=$3 prog=$4
  shift 4
  echo "== $label: $prog, $n ranks"
  rc=0
  [ -z "${PTL_TRACE:-}" ] || rm -rf "$PTL_TRACE"
  out=$("$@" timeout 180 "$O/bin/mpirun" $LOCAL $flags -n "$n" "$progs/$prog" </dev/null 2>&1) || rc=$?
  # Across hosts one job in a few dozen has failed in CI, without a word from any rank
  # (status 124 would be the 180 s bound) or after a held message was refused: a known,
  # not yet understood intermittent failure (Portals pid 0, fixed since, explains some). It is
  # reported in full, with the ranks' traces, and given one more try; a second failure fails
  # the test.
  if [ $rc != 0 ] && [ -n "${NETNS_HOSTS:-}" ]; then
    echo "run_ompi_portals4: INTERMITTENT: $label $prog with $n ranks failed (status $rc), trying once more; it said:"
    echo "$out" | tail -40
    [ -z "${PTL_TRACE:-}" ] || trace_digest "$PTL_TRACE"
    [ -z "${PTL_TRACE:-}" ] || rm -rf "$PTL_TRACE"
    rc=0
    out=$("$@" timeout 180 "$O/bin/mpirun" $LOCAL $flags -n "$n" "$progs/$prog" </dev/null 2>&1) || rc=$?
  fi
  [ $rc = 0 ] || { echo "$out"; echo "run_ompi_portals4: $label $prog with $n ranks failed (status $rc)" >&2; exit 1; }
  [ "$(echo "$out" | grep -c ": rank .* ok")" = "$n" ] ||
    { echo "$out"; echo "run_ompi_portals4: not every rank reported ok" >&2; exit 1; }
}

if [ -z "${NETNS_HOSTS:-}" ]; then
  for n in 2 4; do
    for p in p2p coll rma; do run "mtl+osc+coll portals4" $n "$MTL" $p; done
    for p in p2p coll; do run "btl portals4" $n "$BTL" $p; done
    [ $n = 2 ] && run "btl portals4" $n "$BTL" rma
  done
  # A rank whose OS pid is a multiple of PTL_PID_MAX (1024): PTL_PID_ANY once gave it Portals
  # pid 0, which coll portals4 takes for its mtl's mark of logical addressing; it then
  # disqualified itself on that rank alone, and the job hung in its first collective (one
  # job in ~250 at 4 ranks). The kernel's next pid is set just below such a multiple
  # (ns_last_pid: root only) until a rank gets one; each rank records its pid before it
  # becomes the program (exec keeps it).
  if [ -w /proc/sys/kernel/ns_last_pid ]; then
    echo "== mtl+osc+coll portals4: rma, 4 ranks, one with an OS pid that is a multiple of 1024"
    hit=
    for before in 9 8 10 7 11 6 12 5 13 14; do
      m=$((($(cat /proc/sys/kernel/ns_last_pid) / 1024 + 2) * 1024))
      [ $m -lt "$(cat /proc/sys/kernel/pid_max)" ] || m=2048
      : >"$progs/pids"
      echo $((m - before)) >/proc/sys/kernel/ns_last_pid
      rc=0
      out=$(timeout 180 "$O/bin/mpirun" $LOCAL $MTL -n 4 sh -c 'echo $$ >>"$0"; exec "$1"' "$progs/pids" \
        "$progs/rma" </dev/null 2>&1) || rc=$?
      for pid in $(cat "$progs/pids"); do [ $((pid % 1024)) = 0 ] && hit=$pid; done
      [ -n "$hit" ] && break
      [ $rc = 0 ] || { echo "$out"; echo "run_ompi_portals4: rma with 4 ranks failed (status $rc)" >&2; exit 1; }
    done
    if [ -z "$hit" ]; then
      echo "   (no rank got such a pid in 10 tries: other processes took them; not checked)"
    else
      [ $rc = 0 ] && [ "$(echo "$out" | grep -c ": rank .* ok")" = 4 ] || {
        echo "$out"
        echo "run_ompi_portals4: the job with a rank of OS pid $hit failed (status $rc)" >&2
        exit 1
      }
      echo "   ok (a rank had OS pid $hit)"
    fi
  fi
  # The collectives really went through coll portals4 (priority 100 beats tuned's 30).
  echo "== coll portals4 selected"
  timeout 120 "$O/bin/mpirun" $LOCAL $MTL --mca coll_base_verbose 20 -n 2 "$progs/coll" </dev/null \
    >"$progs/coll.log" 2>&1 || { cat "$progs/coll.log"; exit 1; }
  grep -q "component available: portals4, priority: 100" "$progs/coll.log" ||
    { echo "run_ompi_portals4: coll portals4 was not selected" >&2; exit 1; }
  if [ "${PTL_OMPI_MULTIHOST:-yes}" = yes ]; then
    rc=0
    PTL_OMPI_TREE=$tree "$top/contrib/netns-hosts.sh" 2 "$0" "$b" "$tree" || rc=$?
    [ $rc = 77 ] && echo "== two hosts: skipped (no network namespaces here)" && rc=0
    exit $rc
  fi
  exit 0
fi

# Two "hosts": daemons started through netns-rsh.sh, ranks alternating, tcp between hosts.
set -- $NETNS_HOSTS
hostfile=$progs/hosts
printf '%s slots=2\n%s slots=2\n' "$1" "$2" >"$hostfile"
host1=$1
# Every rank traced (README: PTL_TRACE), so that a failure says what each engine did.
export PTL_TRACE="$progs/trace" PTL_TRACE_MB=4
REMOTE="--hostfile $hostfile --map-by node --prefix $O --mca plm_rsh_agent $top/contrib/netns-rsh.sh -x LD_LIBRARY_PATH"
REMOTE="$REMOTE -x PTL_TRACE -x PTL_TRACE_MB"
for n in 2 4; do
  for p in p2p coll rma; do LOCAL="$REMOTE" run "two hosts, mtl+osc+coll portals4" $n "$MTL" $p \
    "$top/contrib/netns-rsh.sh" "$host1"; done
  for p in p2p coll; do LOCAL="$REMOTE" run "two hosts, btl portals4" $n "$BTL" $p \
    "$top/contrib/netns-rsh.sh" "$host1"; done
  [ $n = 2 ] && LOCAL="$REMOTE" run "two hosts, btl portals4" $n "$BTL" rma "$top/contrib/netns-rsh.sh" "$host1"
done
echo "run_ompi_portals4: Open MPI's portals4 components passed"

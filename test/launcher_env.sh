# Sourced by the launcher and integration tests (with $b, the build directory, set): which
# launchers to use and how, where the MPI and OpenSHMEM programs are, and the check of the
# engine's tag-matching counters.
# Open MPI refuses to run as root without both variables; the tests run as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MPIRUN=${OMPI_MPIRUN:-mpirun.openmpi}
OSHRUN=${OSHRUN:-oshrun}
HYDRA_MPIEXEC=${HYDRA_MPIEXEC:-mpiexec.hydra}
# 4 ranks on a 2-core machine.
OMPI_LOCAL_FLAGS="--oversubscribe"
# pml/osc/spml ucx are required (the job fails instead of falling back to another
# component); osc ucx also avoids osc rdma, whose finalize crashes oshmem jobs in Debian's
# Open MPI 4.1.4 whatever the transport. env.sh opens Open MPI's UCX transport filter; -x
# forwards the preload and UCX_TLS to other hosts' ranks.
OMPI_UCX_FLAGS="--mca pml ucx --mca osc ucx --mca spml ucx -x LD_PRELOAD -x UCX_TLS"
# Programs: a directory, or empty with the reason in *_SKIP.
MPI_PROGRAMS="" SHMEM_PROGRAMS="" MPICH_PROGRAMS=""
if [ -n "${SANITIZE_FLAGS:-}" ]; then
  MPI_SKIP="a sanitizer-built module cannot be preloaded into uninstrumented MPI programs"
  SHMEM_SKIP=$MPI_SKIP MPICH_SKIP=$MPI_SKIP
elif [ ! -f "$b/env.sh" ]; then
  MPI_SKIP="the UCT component is not built" SHMEM_SKIP="the UCT component is not built"
  MPICH_SKIP="the UCT component is not built"
else
  MPI_SKIP="the Open MPI programs are not built (apt-get install libopenmpi-dev)"
  SHMEM_SKIP="the OpenSHMEM programs are not built (apt-get install libopenmpi-dev)"
  MPICH_SKIP="the MPICH programs are not built (apt-get install libmpich-dev)"
  if [ -x "$b/test/integration/mpi/p2p" ]; then MPI_PROGRAMS="$b/test/integration/mpi"; fi
  if [ -x "$b/test/integration/shmem/rma" ]; then SHMEM_PROGRAMS="$b/test/integration/shmem"; fi
  if [ -x "$b/test/integration/mpich/p2p" ]; then MPICH_PROGRAMS="$b/test/integration/mpich"; fi
fi

# Each rank of tag_offload receives 1000 messages into receives posted before they were
# sent: all of them must have been matched in the engine, and few messages (the warm-up and
# the MPI library's own) may have gone to UCP's software matching.
check_offload() {  # ranks file
  awk -v want="$1" '
    /^portals stats:/ {
      for (i = 1; i < NF; ++i) {
        if ($i == "engine") matched[$4] += $(i + 1)
        if ($i == "unexpected") unexpected[$4] += $(i + 1)
      }
    }
    END {
      bad = 0
      for (p in matched) {
        ++n
        if (matched[p] < 1000 || unexpected[p] > 100) bad = 1
        printf "  pid %s: %d tagged messages matched in the engine, %d by UCP in software\n", p, matched[p], unexpected[p]
      }
      if (n != want) { printf "  %d ranks reported engine counters, want %d\n", n, want; bad = 1 }
      exit bad
    }' "$2" || { echo "tag offload was not used:" >&2; cat "$2" >&2; exit 1; }
}

# Issue 58: the adoption counters of a run (UCX_PORTALS_STATS=y lines), summed over the job's
# processes (every iface of a process prints the same process-wide figures: the largest
# counts): "<pages adopted> <peer files mapped>".
adoption_counts() {  # file
  awk '/^portals stats:/ {
    pid = $4
    for (i = 1; i < NF; ++i) {
      if ($i == "adopted" && $(i + 1) + 0 > a[pid]) a[pid] = $(i + 1) + 0
      if ($i == "mapped" && $(i + 1) + 0 > m[pid]) m[pid] = $(i + 1) + 0
    }
  }
  END { for (p in a) { ta += a[p]; tm += m[p] } printf "%d %d\n", ta, tm }' "$1"
}

# A page-aligned ping-pong (aligned_pingpong) with 10 and with 200 round trips per size: the
# pages adopted and the peers' files mapped may not grow with the round trips. The extra
# 3,420 messages of the longer run (190 round trips x 9 sizes) may add at most 16 to either
# count (a registration dropped by UCX's cache as it grows a region, seen at 3), where an
# adoption or a mapping per message would add thousands.
check_no_adoption_per_message() {  # label run-command... (the command gets the iterations last)
  label=$1
  shift
  few_out=$(mktemp) many_out=$(mktemp)
  UCX_PORTALS_STATS=y "$@" 10 </dev/null >"$few_out" 2>&1 || { cat "$few_out"; rm -f "$few_out" "$many_out"; return 1; }
  UCX_PORTALS_STATS=y "$@" 200 </dev/null >"$many_out" 2>&1 || { cat "$many_out"; rm -f "$few_out" "$many_out"; return 1; }
  set -- $(adoption_counts "$few_out") $(adoption_counts "$many_out")
  rm -f "$few_out" "$many_out"
  echo "$label: pages adopted $1, peer files mapped $2 with 10 round trips per size; $3 and $4 with 200"
  if [ "$1" -eq 0 ] || [ "$3" -gt $(($1 + 16)) ] || [ "$4" -gt $(($2 + 16)) ]; then
    echo "$label: adoption or mapping grows with the messages (or none was seen)" >&2
    return 1
  fi
}

# The same ping-pong from 4 to 16 KiB (the eager sizes), 20 and 2,000 round trips per size,
# each rank's main thread under `strace -c` (test/strace_rank.sh, given before the program):
# its system calls may not grow with the round trips. The 11,880 extra messages may add at
# most 1,200 (one per 10 messages; seen within +-50, also with two CPU hogs beside it), where
# a system call every few messages (an idle tcp wire's epoll_wait every 20 us: +6,200 under
# Open MPI, +7,900 under MPICH here) adds thousands. UCX's shared memory makes none either.
# sched_yield is not counted: a rank yields while its peer, descheduled in the middle of a
# copy into its ring, finishes it (wire/arriving.cc), which other load on the host multiplies
# (+1,771 in a run beside two valgrind processes and a build), not the messages.
# Skipped without strace.
syscall_total() {  # directory of strace -c outputs
  cat "$1"/rank.* | awk 'NF == 2 && $2 != "total" && $2 != "sched_yield" {n += $1} END {print n + 0}'
}
check_no_syscalls_per_message() {  # label run-command... (it gets the iterations and largest size last)
  label=$1
  shift
  if ! command -v strace >/dev/null; then
    echo "$label: system calls not counted (no strace)"
    return 0
  fi
  few=$(mktemp -d) many=$(mktemp -d) log=$(mktemp)
  SYSCALL_COUNT_DIR=$few "$@" 20 16384 </dev/null >"$log" 2>&1 &&
    SYSCALL_COUNT_DIR=$many "$@" 2000 16384 </dev/null >"$log" 2>&1 || { cat "$log"; rm -rf "$few" "$many" "$log"; return 1; }
  set -- "$(syscall_total "$few")" "$(syscall_total "$many")" "$(ls "$many" | wc -l)"
  echo "$label: the ranks made $1 system calls with 20 round trips per size, $2 with 2000"
  status=0
  if [ "$3" -lt 2 ] || [ "$2" -gt $(($1 + 1200)) ]; then
    echo "$label: system calls grow with the messages (4-16 KiB ping-pong), or no rank was counted" >&2
    cat "$many"/rank.* | awk 'NF == 2 && $2 != "total" && $1 + 0 > 0 {n[$2] += $1} END {for (s in n) print n[s], s}' |
      sort -rn | head -8 >&2
    status=1
  fi
  rm -rf "$few" "$many" "$log"
  return $status
}

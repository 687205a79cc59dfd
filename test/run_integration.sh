#!/bin/sh
# Real MPI and OpenSHMEM stacks over UCX_TLS=portals on this host, 2 and 4 ranks:
#   Open MPI (pml ucx, osc ucx): point-to-point, collectives, one-sided;
#   Open MPI's OpenSHMEM (spml ucx): put/get, atomics, collectives, and UCP must pick native
#     rma and amo lanes on portals (not atomics emulated over active messages);
#   MPICH (ch4:ucx): point-to-point and collectives (one-sided with 2 ranks: MPICH's passive
#     target needs the target to poll, which takes 10 s oversubscribed with any transport);
#   tag offload: receives posted before their messages (1 KiB to 1 MiB) are matched by the
#     Portals engine, as its counters (UCX_PORTALS_STATS=y) show, under both MPIs;
#   page-aligned buffers: a ping-pong neither adopts pages nor maps a peer's file per message
#     (issue 58), and makes no system call per message from 4 to 16 KiB, under both MPIs.
# A stack that is not installed is skipped with a message; 77 if none is.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
. "$top/test/launcher_env.sh"
if [ -z "$MPI_PROGRAMS$SHMEM_PROGRAMS$MPICH_PROGRAMS" ]; then
  echo "== MPI and OpenSHMEM over UCX_TLS=portals: skipped ($MPI_SKIP; $SHMEM_SKIP; $MPICH_SKIP)"
  exit 77
fi
. "$b/env.sh"
export UCX_TLS=portals,self
out=$(mktemp)
trap 'rm -f "$out"' EXIT

if [ -n "$MPI_PROGRAMS" ]; then
  for n in 2 4; do
    for p in p2p coll rma; do
      echo "== Open MPI -n $n $p"
      timeout 180 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS $OMPI_UCX_FLAGS -n $n "$MPI_PROGRAMS/$p" </dev/null
    done
    echo "== Open MPI -n $n tag_offload (UCX_PORTALS_STATS=y)"
    UCX_PORTALS_STATS=y timeout 120 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS $OMPI_UCX_FLAGS -x UCX_PORTALS_STATS \
      -n $n "$MPI_PROGRAMS/tag_offload" </dev/null >"$out" 2>&1 || { cat "$out"; exit 1; }
    check_offload $n "$out"
  done
  echo "== Open MPI -n 2 aligned_pingpong (UCX_PORTALS_STATS=y)"
  check_no_adoption_per_message "Open MPI aligned_pingpong" timeout 120 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS \
    $OMPI_UCX_FLAGS -x UCX_PORTALS_STATS -n 2 "$MPI_PROGRAMS/aligned_pingpong"
  echo "== Open MPI -n 2 aligned_pingpong 4-16 KiB (system calls, strace)"
  check_no_syscalls_per_message "Open MPI aligned_pingpong" timeout 180 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS \
    $OMPI_UCX_FLAGS -x SYSCALL_COUNT_DIR -n 2 "$top/test/strace_rank.sh" "$MPI_PROGRAMS/aligned_pingpong"
else
  echo "== Open MPI: skipped ($MPI_SKIP)"
fi

if [ -n "$SHMEM_PROGRAMS" ]; then
  for n in 2 4; do
    for p in rma atomics coll; do
      echo "== oshrun -n $n shmem $p"
      timeout 120 "$OSHRUN" $OMPI_LOCAL_FLAGS $OMPI_UCX_FLAGS -n $n "$SHMEM_PROGRAMS/$p" </dev/null
    done
  done
  echo "== OpenSHMEM lanes: rma and amo on portals"
  UCX_LOG_LEVEL=info timeout 120 "$OSHRUN" $OMPI_LOCAL_FLAGS $OMPI_UCX_FLAGS -x UCX_LOG_LEVEL -n 2 \
    "$SHMEM_PROGRAMS/atomics" </dev/null >"$out" 2>&1 || { cat "$out"; exit 1; }
  grep -o 'ep_cfg\[[0-9]*\]: rma(portals/[^)]*) amo(portals/[^)]*)' "$out" | sort -u ||
    { echo "run_integration: no ep with native rma and amo lanes on portals" >&2; grep ep_cfg "$out" >&2; exit 1; }
else
  echo "== OpenSHMEM: skipped ($SHMEM_SKIP)"
fi

if [ -n "$MPICH_PROGRAMS" ]; then
  for n in 2 4; do
    for p in p2p coll; do
      echo "== MPICH -n $n $p"
      timeout 180 "$HYDRA_MPIEXEC" -n $n "$MPICH_PROGRAMS/$p" </dev/null
    done
  done
  echo "== MPICH -n 2 rma"
  timeout 120 "$HYDRA_MPIEXEC" -n 2 "$MPICH_PROGRAMS/rma" </dev/null
  echo "== MPICH -n 2 tag_offload (UCX_PORTALS_STATS=y)"
  UCX_PORTALS_STATS=y timeout 120 "$HYDRA_MPIEXEC" -n 2 "$MPICH_PROGRAMS/tag_offload" </dev/null >"$out" 2>&1 ||
    { cat "$out"; exit 1; }
  check_offload 2 "$out"
  echo "== MPICH -n 2 aligned_pingpong (UCX_PORTALS_STATS=y)"
  check_no_adoption_per_message "MPICH aligned_pingpong" timeout 120 "$HYDRA_MPIEXEC" -n 2 \
    "$MPICH_PROGRAMS/aligned_pingpong"
  echo "== MPICH -n 2 aligned_pingpong 4-16 KiB (system calls, strace)"
  check_no_syscalls_per_message "MPICH aligned_pingpong" timeout 180 "$HYDRA_MPIEXEC" -n 2 \
    "$top/test/strace_rank.sh" "$MPICH_PROGRAMS/aligned_pingpong"
else
  echo "== MPICH: skipped ($MPICH_SKIP)"
fi
echo "MPI and OpenSHMEM over UCX_TLS=portals passed"

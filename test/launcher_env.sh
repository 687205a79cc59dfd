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

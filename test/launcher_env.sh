# Sourced by the launcher tests (with $b, the build directory, set): which launchers to use
# and how, and where the MPI programs are.
# Open MPI refuses to run as root without both variables; the tests run as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MPIRUN=${OMPI_MPIRUN:-mpirun.openmpi}
HYDRA_MPIEXEC=${HYDRA_MPIEXEC:-mpiexec.hydra}
# 4 ranks on a 2-core machine.
OMPI_LOCAL_FLAGS="--oversubscribe"
# pml ucx is required (the job fails instead of falling back to another pml); env.sh opens
# Open MPI's UCX transport filter; -x forwards the preload and UCX_TLS to other hosts' ranks.
OMPI_UCX_FLAGS="--mca pml ucx -x LD_PRELOAD -x UCX_TLS"
MPI_PROGRAMS=""
if [ -n "${SANITIZE_FLAGS:-}" ]; then
  MPI_SKIP_REASON="a sanitizer-built module cannot be preloaded into uninstrumented MPI programs"
elif [ ! -f "$b/env.sh" ]; then
  MPI_SKIP_REASON="the UCT component is not built"
elif [ ! -x "$b/test/integration/mpi/p2p" ]; then
  MPI_SKIP_REASON="the MPI programs are not built (apt-get install libopenmpi-dev)"
else
  MPI_PROGRAMS="$b/test/integration/mpi"
fi

#!/bin/sh
# The runtime under the launchers HPC sites use, on this host: the multi-process suite started
# by Open MPI's mpirun (PMIx) and by MPICH's Hydra (PMI-1), 2 and 4 ranks, each rank checking
# it was launched through the expected one (MPI jobs: run_integration.sh). A launcher that is
# not installed is skipped with a message; 77 if none is.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
mp="$b/test/mp_tests"
. "$top/test/launcher_env.sh"
ran=0

if command -v "$OMPI_MPIRUN" >/dev/null 2>&1; then
  for n in 2 4; do
    echo "== mpirun -n $n mp_tests (PMIx)"
    PTL_TEST_EXPECT_LAUNCHER=pmix timeout 120 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS -n $n "$mp" --gtest_filter=-Job.EarlyExit* --gtest_brief=1 </dev/null
    timeout 60 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS -n $n "$mp" --gtest_filter=Job.EarlyExit* --gtest_brief=1 </dev/null
  done
  ran=1
else
  echo "== mpirun (Open MPI) not installed: skipped (apt-get install openmpi-bin)"
fi

if command -v "$HYDRA_MPIEXEC" >/dev/null 2>&1; then
  for n in 2 4; do
    echo "== mpiexec.hydra -n $n mp_tests (PMI-1)"
    PTL_TEST_EXPECT_LAUNCHER=pmi1 timeout 120 "$HYDRA_MPIEXEC" -n $n "$mp" --gtest_filter=-Job.EarlyExit* --gtest_brief=1 </dev/null
    timeout 60 "$HYDRA_MPIEXEC" -n $n "$mp" --gtest_filter=Job.EarlyExit* --gtest_brief=1 </dev/null
  done
  ran=1
else
  echo "== mpiexec.hydra (MPICH) not installed: skipped (apt-get install mpich)"
fi
[ "$ran" = 1 ] || exit 77
echo "launcher tests passed"

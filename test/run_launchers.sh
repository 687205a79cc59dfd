#!/bin/sh
# The runtime under the launchers HPC sites use, on this host: the multi-process suite started
# by Open MPI's mpirun (PMIx) and by MPICH's Hydra (PMI-1), 2 and 4 ranks, each rank checking
# it was launched through the expected one (MPI jobs: run_integration.sh); and the PMI-1
# client of libportals_runtime (portals4/pmi.h) under each of them, ptlrun and no launcher.
# A launcher that is not installed is skipped with a message.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
mp="$b/test/mp_tests"
pmi="$b/test/pmi_client"
. "$top/test/launcher_env.sh"

echo "== PMI-1 client: no launcher, ptlrun -n 3"
PTLRT_TIMEOUT=30 "$pmi" 1 none
PTLRT_TIMEOUT=30 timeout 60 "$b/ptlrun" -n 3 "$pmi" 3 ptlrun

if command -v "$OMPI_MPIRUN" >/dev/null 2>&1; then
  for n in 2 4; do
    echo "== mpirun -n $n mp_tests (PMIx)"
    PTL_TEST_EXPECT_LAUNCHER=pmix timeout 120 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS -n $n "$mp" --gtest_filter=-Job.EarlyExit* --gtest_brief=1 </dev/null
    timeout 60 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS -n $n "$mp" --gtest_filter=Job.EarlyExit* --gtest_brief=1 </dev/null
    echo "== mpirun -n $n pmi_client (PMI-1 over PMIx)"
    timeout 60 "$OMPI_MPIRUN" $OMPI_LOCAL_FLAGS -n $n "$pmi" $n pmix </dev/null
  done
else
  echo "== mpirun (Open MPI) not installed: skipped (apt-get install openmpi-bin)"
fi

if command -v "$HYDRA_MPIEXEC" >/dev/null 2>&1; then
  for n in 2 4; do
    echo "== mpiexec.hydra -n $n mp_tests (PMI-1)"
    PTL_TEST_EXPECT_LAUNCHER=pmi1 timeout 120 "$HYDRA_MPIEXEC" -n $n "$mp" --gtest_filter=-Job.EarlyExit* --gtest_brief=1 </dev/null
    timeout 60 "$HYDRA_MPIEXEC" -n $n "$mp" --gtest_filter=Job.EarlyExit* --gtest_brief=1 </dev/null
    echo "== mpiexec.hydra -n $n pmi_client (PMI-1)"
    timeout 60 "$HYDRA_MPIEXEC" -n $n "$pmi" $n pmi1 </dev/null
  done
else
  echo "== mpiexec.hydra (MPICH) not installed: skipped (apt-get install mpich)"
fi
echo "launcher tests passed"

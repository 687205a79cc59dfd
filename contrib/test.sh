#!/bin/sh
# Everything a newcomer or CI needs: install dependencies, build, run `make check`; then the
# UCT component against each UCX it supports (contrib/ucx-check.sh: built against that UCX,
# loaded natively from its module list, its own tests, ucx_perftest UCT and UCP): the
# installed 1.13.1 also with UCX's own gtest suite (contrib/ucx-gtest.sh), the newest
# release (1.22.0, from ../shared/ucx) too; then the project's suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer and the threaded tests under
# ThreadSanitizer (separate build trees in _build-*); Open MPI's own Portals 4 components
# (mtl, osc, coll, btl) built from Debian's source against this libportals4 and run through
# the MPI suites (test/run_ompi_portals4.sh); the multi-host suite over the verbs wire in a
# guest on Debian's kernel with soft-RoCE (test/run_verbs_guest.sh); and a bounded fuzzing run of the tcp
# wire's input path (contrib/fuzz.sh). make check includes the multi-host tests over
# network namespaces (root and iproute2; skipped elsewhere). UCX and Open MPI trees are built
# once into $PORTALS_UCX_CACHE (default ~/.cache/portals-ucx), keyed on everything that makes them.
set -e
cd "$(dirname "$0")/.."
start=$(date +%s)
stage() { echo "== test.sh: $* (at $(($(date +%s) - start)) s)"; }
stage "dependencies, build"
./contrib/install-deps.sh
./contrib/build.sh
stage "make check"
make -C _build -j"$(nproc)" check || { ./contrib/failed-test-logs.sh _build; exit 1; }
stage "UCX 1.13.1 (installed): the component natively, ucx_perftest"
./contrib/ucx-check.sh installed
stage "UCX 1.13.1: UCX's gtest"
./contrib/ucx-gtest.sh ci
releases=${PORTALS_UCX_RELEASES:-../shared/ucx}
if [ -f "$releases/ucx-1.22.0.tar.gz" ]; then
  stage "UCX 1.22.0: the component natively, ucx_perftest"
  ./contrib/ucx-check.sh "$releases/ucx-1.22.0.tar.gz"
else
  echo "test.sh: $releases/ucx-1.22.0.tar.gz not found: the check against UCX 1.22.0 is skipped"
fi
stage "Open MPI's portals4 components (mtl, osc, coll, btl)"
./test/run_ompi_portals4.sh _build
stage "the verbs wire on soft-RoCE in a guest (multi-host suite over RDMA)"
set +e
./test/run_verbs_guest.sh _build
rc=$?
set -e
case $rc in
  0) ;;
  77) echo "test.sh: no virtual machine can run here: the verbs wire's tests are skipped" ;;
  *) exit "$rc" ;;
esac
stage "sanitizers"
make -C _build check-sanitizers
# The tcp wire's input path under libFuzzer (clang, ASan+UBSan) for a bounded time.
stage "fuzzing"
PTL_FUZZ_SECONDS=${PTL_FUZZ_SECONDS:-60} ./contrib/fuzz.sh
stage "all tests passed"

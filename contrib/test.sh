#!/bin/sh
# Everything a newcomer or CI needs: install dependencies, build, run `make check` and UCX's
# own gtest suite against the component (contrib/ucx-gtest.sh), a UCX that loads the
# component natively (contrib/build-ucx-native.sh), then the project's suite
# again under AddressSanitizer + UndefinedBehaviorSanitizer and the threaded tests under
# ThreadSanitizer (separate build trees in _build-*), and a bounded fuzzing run of the tcp
# wire's input path (contrib/fuzz.sh). make check includes the multi-host tests over
# network namespaces (root and iproute2; skipped elsewhere).
set -e
cd "$(dirname "$0")/.."
./contrib/install-deps.sh
./contrib/build.sh
make -C _build -j"$(nproc)" check
# UCX's own gtest suite against the component (built once into ~/.cache/portals-ucx).
./contrib/ucx-gtest.sh ci
# UCX built with portals in its module list loads the component without LD_PRELOAD (UCX
# cached in ~/.cache/portals-ucx/ucx-native; the script checks ucx_info lists portals).
./contrib/build-ucx-native.sh
make -C _build check-sanitizers
# The tcp wire's input path under libFuzzer (clang, ASan+UBSan) for a bounded time.
PTL_FUZZ_SECONDS=${PTL_FUZZ_SECONDS:-60} ./contrib/fuzz.sh
echo "all tests passed"

#!/bin/sh
# Everything a newcomer or CI needs: install dependencies, build, run `make check` and UCX's
# own gtest suite against the component (contrib/ucx-gtest.sh), then the project's suite
# again under AddressSanitizer + UndefinedBehaviorSanitizer and the threaded tests under
# ThreadSanitizer (separate build trees in _build-*).
set -e
cd "$(dirname "$0")/.."
./contrib/install-deps.sh
./contrib/build.sh
make -C _build -j"$(nproc)" check
# UCX's own gtest suite against the component (built once into ~/.cache/portals-ucx).
./contrib/ucx-gtest.sh ci
make -C _build check-sanitizers
echo "all tests passed"

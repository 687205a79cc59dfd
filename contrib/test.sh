#!/bin/sh
# Everything a newcomer or CI needs: install dependencies, build, run `make check`, then the
# same suite again under AddressSanitizer + UndefinedBehaviorSanitizer and the threaded
# tests under ThreadSanitizer (separate build trees in _build-*).
set -e
cd "$(dirname "$0")/.."
./contrib/install-deps.sh
./contrib/build.sh
make -C _build -j"$(nproc)" check
make -C _build check-sanitizers
echo "all tests passed"

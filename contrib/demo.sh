#!/bin/sh
# The main job: install dependencies, build, and run the libportals4 ping-pong between two
# processes on this host through ptlrun (shared-memory wire).
set -e
cd "$(dirname "$0")/.."
./contrib/install-deps.sh
./contrib/build.sh
./_build/ptlrun -n 2 --timeout 120 ./_build/bench/ptl_pingpong --quick

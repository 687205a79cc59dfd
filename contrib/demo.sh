#!/bin/sh
# The main job: install dependencies, build (libportals4 and the UCT component), then show
# UCX running over the Portals engine between two processes on this host: ucx_perftest UCT
# active-message latency with -x portals, and UCP tagged latency with UCX_TLS=portals; then
# the libportals4 ping-pong through ptlrun.
set -e
cd "$(dirname "$0")/.."
./contrib/install-deps.sh
./contrib/build.sh
. ./_build/env.sh
echo "== ucx_perftest -t am_lat -x portals (UCT, 8 bytes)"
./contrib/perftest-pair.sh -t am_lat -x portals -d lo -n 100000 | grep -E "^Final|^\+|latency|Stage"
echo "== UCX_TLS=portals ucx_perftest -t tag_lat (UCP, 1 KiB: tag offload)"
UCX_TLS=portals UCX_NET_DEVICES=lo ./contrib/perftest-pair.sh -t tag_lat -s 1024 -n 100000 | grep -E "^Final|latency|Stage"
echo "== libportals4 ping-pong (ptlrun -n 2)"
unset LD_PRELOAD
./_build/ptlrun -n 2 --timeout 120 ./_build/bench/ptl_pingpong --quick

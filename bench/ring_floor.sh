#!/bin/bash
# Where portals' shm latency goes: the ring alone (bench/ring_pingpong, no engine), UCX
# posix's am_lat and portals' UCT am_lat, measured back to back ROUNDS times (the machine
# flips between a fast and a slow mode; compare within one round only). Per round prints
# the three one-way medians and portals' time above the ring floor.
#   bench/ring_floor.sh [BUILD_DIR] [ROUNDS] > bench/ring_floor_report.txt
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/_build}
rounds=${2:-5}
module=$build/.libs/libuct_portals.so
ring=$build/bench/ring_pingpong
for f in "$module" "$ring"; do
  [ -e "$f" ] || { echo "ring_floor: no $f (build first)" >&2; exit 1; }
done
pair=$top/contrib/perftest-pair.sh
iters=200000

am_lat() { # TL DEVICE [env...]
  local tl=$1 dev=$2
  shift 2
  env -u UCX_TLS "$@" UCX_NET_DEVICES=lo,memory "$pair" -t am_lat -s 8 -n $iters -x "$tl" -d "$dev" 2>/dev/null |
    awk '/^Final:/ {print $3}'
}

echo "# portals-ucx: shm latency against the ring floor, $(date +%F), $(nproc) CPUs"
echo "# one-way us (medians); ring = bench/ring_pingpong (72-byte header + 8 bytes, no engine)"
printf '%-6s %10s %10s %10s %14s %14s\n' round ring posix portals "portals-ring" "portals/posix"
for r in $(seq "$rounds"); do
  ring_us=$("$ring" $iters | sed -n 's/.* p50 \([0-9.]*\) .*/\1/p')
  posix_us=$(am_lat posix memory)
  portals_us=$(am_lat portals lo LD_PRELOAD="$module")
  awk -v r="$r" -v a="$ring_us" -v b="$posix_us" -v c="$portals_us" 'BEGIN {
    if (a == "" || b == "" || c == "") { printf "%-6s measurement failed\n", r; exit }
    printf "%-6s %10.3f %10.3f %10.3f %14.3f %14.2f\n", r, a, b, c, c - a, c / b }'
done

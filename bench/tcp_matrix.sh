#!/bin/bash
# Portals over its tcp wire next to UCX's own tcp transport, same run, back to back:
# UCT am_lat and put_bw (-x portals|tcp), UCP tag_lat and tag_bw (UCX_TLS=portals|tcp), in
# two settings: both processes on this host (portals with PTL_WIRE=tcp, over the kernel's
# loopback path) and on two hosts made of network namespaces joined by a veth bridge
# (contrib/netns-hosts.sh; needs root). "portals x" is how many times faster portals is
# (latency: theirs/ours; bandwidth, rate: ours/theirs; > 1 means portals wins).
#   bench/tcp_matrix.sh [BUILD_DIR] > bench/tcp_report.txt
# BENCH_QUICK=1 runs a tenth of the iterations (a smoke run, not a measurement).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/_build}
build=$(cd "$build" && pwd)
module=$build/.libs/libuct_portals.so
[ -f "$module" ] || { echo "tcp_matrix: no $module (run contrib/build.sh)" >&2; exit 1; }
scale=1
[ "${BENCH_QUICK:-0}" = 1 ] && scale=10

if [ -z "${NETNS_HOSTS:-}" ]; then
  if [ "$(id -u)" = 0 ]; then
    exec "$top/contrib/netns-hosts.sh" 2 "$0" "$build"
  fi
  echo "tcp_matrix: not root: the two-host rows are skipped" >&2
fi

# pair SETTING TL LEVEL ARGS...: one ucx_perftest measurement (contrib/perftest-pair.sh);
# prints the client's Final line.
pair() {
  local setting=$1 tl=$2 level=$3
  shift 3
  local env=(env -u UCX_TLS -u LD_PRELOAD PTL_WIRE=tcp)
  [ "$tl" = portals ] && env+=(LD_PRELOAD="$module")
  [ "$level" = ucp ] && env+=(UCX_TLS="$tl")
  local dev=lo
  if [ "$setting" = hosts ]; then
    local h0 h1
    read -r h0 h1 _ <<<"$NETNS_HOSTS"
    dev=eth0
    env+=(UCX_NET_DEVICES=eth0 PERFTEST_ADDR="${NETNS_ADDRS%% *}" PERFTEST_SERVER_PREFIX="ip netns exec $h0"
      PERFTEST_CLIENT_PREFIX="ip netns exec $h1")
  else
    env+=(UCX_NET_DEVICES=lo)
  fi
  local args=("$@")
  [ "$level" = uct ] && args+=(-x "$tl" -d "$dev")
  "${env[@]}" "$top/contrib/perftest-pair.sh" "${args[@]}" 2>/dev/null | awk '/^Final:/'
}

measure() { # SETTING TL LEVEL METRIC ITERS ARGS...
  local setting=$1 tl=$2 level=$3 metric=$4 iters=$(($5 / scale))
  shift 5
  local out
  out=$(pair "$setting" "$tl" "$level" "$@" -n "$iters")
  [ -n "$out" ] || { echo n/a; return; }
  case $metric in
    lat) echo "$out" | awk '{print $3}' ;;
    bw) echo "$out" | awk '{print $7}' ;;
    rate) echo "$out" | awk '{printf "%.3f\n", $9 / 1e6}' ;;
  esac
}

row() { # SETTING LEVEL LABEL METRIC ITERS ARGS...
  local setting=$1 level=$2 label=$3 metric=$4
  shift 4
  local ours theirs
  ours=$(measure "$setting" portals "$level" "$metric" "$@")
  theirs=$(measure "$setting" tcp "$level" "$metric" "$@")
  printf "%-28s %12s %12s" "$label" "$ours" "$theirs"
  awk -v a="$ours" -v b="$theirs" -v m="$metric" 'BEGIN {
    if (a == "n/a" || b == "n/a" || a + 0 == 0 || b + 0 == 0) { print "        -"; exit }
    printf " %8.2f\n", (m == "lat") ? b / a : a / b }'
}

table() { # SETTING TITLE
  echo
  echo "## $2"
  printf "%-28s %12s %12s %8s\n" "test (unit)" "portals" "tcp" "portals x"
  row "$1" uct "am_lat 8B (us)" lat 20000 -t am_lat -s 8
  row "$1" uct "put_bw 64KiB zcopy (MB/s)" bw 2000 -t put_bw -s 65536 -D zcopy
  row "$1" ucp "tag_lat 8B (us)" lat 20000 -t tag_lat -s 8
  row "$1" ucp "tag_lat 1MiB (us)" lat 200 -t tag_lat -s 1048576
  row "$1" ucp "tag_bw 8B (Mmsg/s)" rate 200000 -t tag_bw -s 8
  row "$1" ucp "tag_bw 1MiB (MB/s)" bw 500 -t tag_bw -s 1048576
}

echo "# portals-ucx: portals over its tcp wire vs UCX tcp, $(date +%Y-%m-%d), $(nproc) CPUs, UCX $(ucx_info -v | awk '/Version/ {print $3; exit}')"
echo "# latency = median one-way us (50.0%ile), bw = MB/s, rate = M msg/s; portals x > 1: portals wins"
echo "# command: bench/tcp_matrix.sh > bench/tcp_report.txt"
table local "one host (portals: PTL_WIRE=tcp; UCX tcp on lo)"
[ -n "${NETNS_HOSTS:-}" ] && table hosts "two hosts: network namespaces on a veth bridge (eth0)"
exit 0

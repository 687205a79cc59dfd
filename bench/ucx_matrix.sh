#!/bin/bash
# The ucx_perftest matrix of issue 3 for portals next to UCX's own transports, measured in
# the same run, back to back, with the same sizes: UCT tests with -x <tl> (portals and tcp
# on lo, posix/sysv/cma on memory) and UCP tests with UCX_TLS=<tl>. Server and client are
# two processes on this host (contrib/perftest-pair.sh). Prints one table per level with
# each transport's number and "portals x": how many times faster portals is (latency:
# theirs/ours; bandwidth and rate: ours/theirs; > 1 means portals wins). A cell reads n/a
# when the transport lacks the operation (e.g. cma has no active messages).
#   bench/ucx_matrix.sh [BUILD_DIR] > bench/ucx_matrix_report.txt
# BENCH_QUICK=1 runs a tenth of the iterations (a smoke run, not a measurement).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/_build}
module=$build/.libs/libuct_portals.so
[ -f "$module" ] || { echo "ucx_matrix: no $module (run contrib/build.sh)" >&2; exit 1; }
pair=$top/contrib/perftest-pair.sh
scale=1
[ "${BENCH_QUICK:-0}" = 1 ] && scale=10

uct_tls=(portals posix sysv cma tcp)
ucp_tls=(portals posix sysv cma tcp)

uct_device() {
  case $1 in portals | tcp) echo lo ;; *) echo memory ;; esac
}

# One measurement; prints the number or n/a. Latency: the median (ucx_perftest's 50.0%ile,
# robust on this bimodal machine); bandwidth: overall MB/s; rate: overall M msg/s.
measure() { # LEVEL TL METRIC TEST SIZE ITERS [LAYOUTS...]
  local level=$1 tl=$2 metric=$3 test=$4 size=$5 iters=$(($6 / scale))
  shift 6
  local layouts=("$@")
  [ ${#layouts[@]} -eq 0 ] && layouts=(default)
  local env=(env -u UCX_TLS -u LD_PRELOAD UCX_NET_DEVICES=lo,memory)
  local args=(-t "$test" -s "$size" -n "$iters")
  [ "$tl" = portals ] && env+=(LD_PRELOAD="$module")
  if [ "$level" = uct ]; then
    args+=(-x "$tl" -d "$(uct_device "$tl")")
  else
    env+=(UCX_TLS="$tl")
  fi
  local layout out
  for layout in "${layouts[@]}"; do
    local extra=()
    [ "$layout" != default ] && extra=(-D "$layout")
    if out=$("${env[@]}" "$pair" "${args[@]}" "${extra[@]}" 2>/dev/null | awk '/^Final:/'); then
      [ -n "$out" ] || continue
      case $metric in
        lat) echo "$out" | awk '{print $3}' ;;
        bw) echo "$out" | awk '{print $7}' ;;
        rate) echo "$out" | awk '{printf "%.3f\n", $9 / 1e6}' ;;
      esac
      return
    fi
  done
  echo n/a
}

row() { # LEVEL LABEL METRIC TEST SIZE ITERS [LAYOUTS...]
  local level=$1 label=$2 metric=$3
  shift 3
  local tls
  if [ "$level" = uct ]; then tls=("${uct_tls[@]}"); else tls=("${ucp_tls[@]}"); fi
  local values=() tl
  for tl in "${tls[@]}"; do
    values+=("$(measure "$level" "$tl" "$metric" "$@")")
  done
  printf "%-26s" "$label"
  local v
  for v in "${values[@]}"; do printf " %10s" "$v"; done
  local ours=${values[0]} i
  last_portals=$ours
  for ((i = 1; i < ${#values[@]}; i++)); do
    awk -v a="$ours" -v b="${values[$i]}" -v m="$metric" 'BEGIN {
      if (a == "n/a" || b == "n/a" || a + 0 == 0 || b + 0 == 0) { printf " %8s", "-"; exit }
      printf " %8.2f", (m == "lat") ? b / a : a / b }'
  done
  echo
}

header() { # LEVEL
  local tls tl
  if [ "$1" = uct ]; then tls=("${uct_tls[@]}"); else tls=("${ucp_tls[@]}"); fi
  printf "%-26s" "test (unit)"
  for tl in "${tls[@]}"; do printf " %10s" "$tl"; done
  for tl in "${tls[@]:1}"; do printf " %8s" "x$tl"; done
  echo
}

echo "# portals-ucx: ucx_perftest matrix, $(date -u +%Y-%m-%d), $(nproc) CPUs," \
  "UCX $(ucx_info -v | awk '/Version/ {print $3; exit}')"
echo "# two processes on one host; latency = median one-way us (50.0%ile), bw = MB/s,"
echo "# rate = M msg/s; xTL = how many times faster portals is than TL (> 1: portals wins)"
[ "$scale" = 1 ] || echo "# BENCH_QUICK: a tenth of the iterations, not a measurement"
echo
echo "## UCT (ucx_perftest -x TL; portals/tcp on lo, posix/sysv/cma on memory)"
header uct
row uct "am_lat 8B (us)" lat am_lat 8 20000
row uct "am_bw 8B (Mmsg/s)" rate am_bw 8 500000
uct_am_rate=$last_portals
row uct "am_bw 64KiB bcopy (MB/s)" bw am_bw 65536 20000 bcopy zcopy
row uct "put_lat 8B (us)" lat put_lat 8 20000
row uct "put_bw 8B (Mmsg/s)" rate put_bw 8 500000
row uct "put_bw 1MiB (MB/s)" bw put_bw 1048576 2000 zcopy bcopy
row uct "get_lat 8B (us)" lat get 8 20000 bcopy zcopy
row uct "get_bw 1MiB (MB/s)" bw get 1048576 2000 zcopy bcopy
row uct "add_lat 8B (us)" lat add_lat 8 20000
row uct "fadd_lat 8B (us)" lat fadd 8 20000
row uct "swap_lat 8B (us)" lat swap 8 20000
row uct "cswap_lat 8B (us)" lat cswap 8 20000
echo
echo "## UCP (UCX_TLS=TL ucx_perftest)"
header ucp
row ucp "tag_lat 8B (us)" lat tag_lat 8 20000
row ucp "tag_lat 4KiB (us)" lat tag_lat 4096 20000
row ucp "tag_lat 1MiB (us)" lat tag_lat 1048576 1000
row ucp "tag_bw 8B (Mmsg/s)" rate tag_bw 8 200000
row ucp "tag_bw 1MiB (MB/s)" bw tag_bw 1048576 2000
row ucp "ucp_put_lat 8B (us)" lat ucp_put_lat 8 20000
row ucp "ucp_get 8B (us)" lat ucp_get 8 20000
row ucp "ucp_add 8B (us)" lat ucp_add 8 20000

# The engine alone, in the same run: what the UCT face's message rate is held against.
echo
echo "## The engine alone (libportals4: ptlrun -n 2 bench/ptl_pingpong, 8 B puts, CT-counted)"
engine_rate=n/a
if [ -x "$build/ptlrun" ] && [ -x "$build/bench/ptl_pingpong" ]; then
  engine_rate=$("$build/ptlrun" -n 2 --timeout 300 "$build/bench/ptl_pingpong" --iters $((20000 / scale)) \
    --max-size 8 2>/dev/null | awk '$1 == "msg_rate_8B_Mmsgs" {print $2; found=1} END {if (!found) print "n/a"}')
fi
printf "%-26s %10s\n" "libportals4 put 8B (Mmsg/s)" "$engine_rate"
awk -v a="$uct_am_rate" -v b="$engine_rate" 'BEGIN {
  r = (a == "n/a" || b == "n/a" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b)
  printf "%-26s %10s\n", "UCT am_bw 8B / libportals4", r }'

#!/bin/sh
# libportals4 over shm (ptlrun -n 2 bench/ptl_pingpong) next to UCX's own shared-memory
# transports measured in the same run with ucx_perftest (UCT level, server/client on
# 127.0.0.1): posix am_lat (8 B latency), cma put_bw zcopy (bandwidth, one copy like our
# rendezvous), posix am_bw (8 B message rate). Prints a report with ratios.
#   bench/run_shm_bench.sh [BUILD_DIR] > bench/shm_report.txt
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
b=${1:-$top/_build}
port=$((20000 + $$ % 20000))
perf() {  # perf TEST TRANSPORT SIZE ITERS [extra] -> "latency_us bandwidth_MBps msgrate"
  t=$1 tl=$2 s=$3 n=$4; shift 4
  ucx_perftest -p $port -x "$tl" -d memory >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  out=$(timeout 60 ucx_perftest 127.0.0.1 -p $port -t "$t" -x "$tl" -d memory -s "$s" -n "$n" "$@" 2>/dev/null | awk '/^Final:/ {print $4, $7, $9}')
  wait $srv 2>/dev/null || true
  port=$((port + 1))
  echo "$out"
}
ours=$("$b/ptlrun" -n 2 --timeout 300 "$b/bench/ptl_pingpong")
lat=$(echo "$ours" | awk '/^put_lat_8B_us/ {print $2}')
rate=$(echo "$ours" | awk '/^msg_rate_8B_Mmsgs/ {print $2}')
ucx_lat=$(perf am_lat posix 8 100000 | awk '{print $1}')
ucx_rate=$(perf am_bw posix 8 1000000 | awk '{print $3 / 1e6}')
echo "# portals-ucx shm benchmark, $(date -u +%Y-%m-%d), $(nproc) CPUs, UCX $(ucx_info -v | awk '/Version/ {print $3; exit}')"
echo "# ours: ptlrun -n 2 bench/ptl_pingpong (put into an LE, CT completion; PTL_PROGRESS=thread)"
echo "# UCX:  ucx_perftest -x posix/cma -d memory, server and client on 127.0.0.1"
echo
printf "%-28s %12s %12s %8s\n" metric portals-ucx ucx ratio
printf "%-28s %12s %12s %8.2f\n" "latency 8B (us, lower=better)" "$lat" "$ucx_lat" "$(echo "$lat $ucx_lat" | awk '{print $1/$2}')"
printf "%-28s %12s %12s %8.2f\n" "msg rate 8B (M/s)" "$rate" "$ucx_rate" "$(echo "$rate $ucx_rate" | awk '{print $1/$2}')"
echo
printf "%-12s %14s %14s %8s\n" size ours_MBps cma_zcopy_MBps ratio
echo "$ours" | awk '/^[0-9]+ / {print $1, $2}' | while read -r size bw; do
  n=$((4000000000 / size)); [ $n -gt 20000 ] && n=20000; [ $n -lt 200 ] && n=200
  ubw=$(perf put_bw cma "$size" "$n" -D zcopy | awk '{print $2}')
  printf "%-12s %14s %14s %8.2f\n" "$size" "$bw" "$ubw" "$(echo "$bw $ubw" | awk '{ if ($2 > 0) print $1/$2; else print 0 }')"
done

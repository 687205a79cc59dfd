#!/bin/bash
# Portals over its verbs wire next to UCX's rc_verbs and ud_verbs on the same soft-RoCE
# devices, and next to portals over its tcp wire, in one run: two hosts of
# contrib/guest-rxe-hosts.sh (network namespaces, rxe0 and rxe1) in a guest of
# contrib/guest-run.sh. libportals4 put latency, bandwidth and message rate (bench/ptl_pingpong
# under ptlrun), UCT am_lat/am_bw/put_bw (-x portals|rc_verbs|ud_verbs), UCP tag_lat/tag_bw
# (UCX_TLS=portals|rc_verbs,ud_verbs|ud_verbs). Soft-RoCE under emulation is slow and noisy:
# read the ratios, which come from one run ("vs rc": latency rc/ours, bandwidth and rate
# ours/rc; > 1 means portals wins).
#   bench/verbs_matrix.sh [BUILD_DIR] > bench/verbs_report.txt
# BENCH_QUICK=1 runs a tenth of the iterations (a smoke run, not a measurement);
# PORTALS_UCX_BENCH_SECTION=rma only the one-sided rows (UCT put/get/fetch-add latency: the direct path).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/_build}" && pwd)
module=$build/.libs/libuct_portals.so
[ -f "$module" ] && [ -x "$build/bench/ptl_pingpong" ] ||
  { echo "verbs_matrix: no $module or bench/ptl_pingpong in $build (run contrib/build.sh)" >&2; exit 1; }

# A ucx_perftest server opens the device its client names: the UCX rows' servers take the
# other one through this preload (bench/perftest_dev_swap.c says why).
swap=$build/bench/perftest_dev_swap.so
if [ -z "${NETNS_VERBS_DEVICES:-}" ]; then
  cc -O2 -shared -fPIC -o "$swap" "$top/bench/perftest_dev_swap.c" -ldl ||
    { echo "verbs_matrix: cannot build $swap (libucx-dev?)" >&2; exit 1; }
  if [ "$(id -u)" = 0 ] && modprobe rdma_rxe 2>/dev/null; then
    exec "$top/contrib/guest-rxe-hosts.sh" 2 "$0" "$build"
  fi
  case $build in
    "$top"/*) share=(--rw "$top") ;;
    *) share=(--rw "$top" --rw "$build") ;;
  esac
  # Within the guest this script finds rdma_rxe and takes the branch above. The guest's kernel
  # finds its TSCs unsynchronised under nested virtualisation and falls back to the HPET,
  # which makes every clock_gettime a trap to the hypervisor (~2 us): UCX reads the TSC
  # itself, portals asks the clock (a vDSO read on real machines). The TSC clock keeps that
  # artefact out of the ratios (PTL_GUEST_KERNEL_ARGS= empty restores the default).
  export PTL_GUEST_KERNEL_ARGS=${PTL_GUEST_KERNEL_ARGS-tsc=reliable clocksource=tsc}
  exec "$top/contrib/guest-run.sh" "${share[@]}" --timeout 2400 -- bash "$0" "$build"
fi

scale=1
[ "${BENCH_QUICK:-0}" = 1 ] && scale=10
read -r h0 h1 _ <<<"$NETNS_HOSTS"
read -r d0 d1 _ <<<"$NETNS_VERBS_DEVICES"
addr0=${NETNS_ADDRS%% *}

# pair TL LEVEL ARGS...: one ucx_perftest measurement between the hosts; the client's Final
# line. TL portals-verbs and portals-tcp are the component over its two wires.
pair() {
  local tl=$1 level=$2
  shift 2
  local env=(env -u UCX_TLS -u LD_PRELOAD -u UCX_NET_DEVICES PERFTEST_ADDR="$addr0")
  local s_env="" c_env="" s_args="" c_args="" uct_tl=$tl ucp_tls=$tl
  case $tl in
    portals-*)
      env+=(LD_PRELOAD="$module" PTL_WIRE="${tl#portals-}")
      s_env="PTL_VERBS_DEVICE=$d0 UCX_NET_DEVICES=eth0" c_env="PTL_VERBS_DEVICE=$d1 UCX_NET_DEVICES=eth0"
      s_args="-d eth0" c_args="-d eth0" uct_tl=portals ucp_tls=portals ;;
    *)
      s_env="UCX_NET_DEVICES=$d0:1" c_env="UCX_NET_DEVICES=$d1:1"
      [ "$level" = uct ] && s_env="$s_env LD_PRELOAD=$swap PERFTEST_DEV_SWAP=$d1=$d0"
      # UD between these devices gets through only with the link-local GID (index 0; the
      # IPv4 one UCX picks times out), so rows that use ud (UCP wires rc up over ud) take it;
      # UCT rc keeps UCX's own choice, its fastest (am_lat 33 us against 39.5 with GID 0).
      if [ "$tl" = ud_verbs ] || [ "$level" = ucp ]; then
        s_env="$s_env UCX_IB_GID_INDEX=0" c_env="$c_env UCX_IB_GID_INDEX=0"
      fi
      s_args="-d $d0:1" c_args="-d $d1:1"
      [ "$tl" = rc_verbs ] && ucp_tls=rc_verbs,ud_verbs ;;  # UCP wires rc up over ud
  esac
  env+=(PERFTEST_SERVER_PREFIX="ip netns exec $h0 env $s_env"
    PERFTEST_CLIENT_PREFIX="ip netns exec $h1 env $c_env ${PERFTEST_TOOL:-}")
  local args=("$@")
  if [ "$level" = uct ]; then
    args+=(-x "$uct_tl")
    env+=(PERFTEST_SERVER_ARGS="$s_args" PERFTEST_CLIENT_ARGS="$c_args")
  else
    env+=(UCX_TLS="$ucp_tls")
  fi
  "${env[@]}" "$top/contrib/perftest-pair.sh" "${args[@]}" 2>/dev/null | awk '/^Final:/'
}

measure() { # TL LEVEL METRIC ITERS ARGS...
  local tl=$1 level=$2 metric=$3 iters=$(($4 / scale))
  shift 4
  local out
  out=$(pair "$tl" "$level" "$@" -n "$iters")
  [ -n "$out" ] || { echo n/a; return; }
  case $metric in
    lat) echo "$out" | awk '{print $3}' ;;
    bw) echo "$out" | awk '{print $7}' ;;
    rate) echo "$out" | awk '{printf "%.4f\n", $9 / 1e6}' ;;
  esac
}

ratio() { # OURS THEIRS METRIC
  awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN {
    if (a == "n/a" || b == "n/a" || a == "-" || b == "-" || a + 0 == 0 || b + 0 == 0) { printf "%8s", "-"; exit }
    printf "%8.2f", (m == "lat") ? b / a : a / b }'
}

print_row() { # LABEL METRIC VERBS RC UD TCP
  printf "%-30s %11s %11s %11s %11s " "$1" "$3" "$4" "$5" "$6"
  ratio "$3" "$4" "$2"
  ratio "$3" "$6" "$2"
  echo
}

row() { # LEVEL LABEL METRIC ITERS ARGS...
  local level=$1 label=$2 metric=$3
  shift 3
  local v rc ud tcp
  v=$(measure portals-verbs "$level" "$metric" "$@")
  rc=$(measure rc_verbs "$level" "$metric" "$@")
  ud=$(measure ud_verbs "$level" "$metric" "$@")
  tcp=$(measure portals-tcp "$level" "$metric" "$@")
  print_row "$label" "$metric" "$v" "$rc" "$ud" "$tcp"
}

# libportals4 over each wire: ptl_pingpong's put latency, 64 KiB and 1 MiB bandwidth, rate.
pingpong() { # WIRE
  PTL_WIRE=$1 NETNS_HOSTS="$h0 $h1" timeout 600 "$build/ptlrun" -n 2 --timeout 600 "$top/contrib/netns-exec-rank.sh" \
    "$build/bench/ptl_pingpong" --iters $((4000 / scale)) --max-size 1048576 2>/dev/null
}

echo "# portals-ucx: portals over its verbs wire vs UCX rc_verbs/ud_verbs on soft-RoCE, $(date +%Y-%m-%d)"
echo "# guest: $(uname -r), $(nproc) vCPUs ($(grep -q hypervisor /proc/cpuinfo && echo virtualised)), clock $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource), UCX $(ucx_info -v | awk '/Version/ {print $3; exit}'), devices $d0 (host $h0) and $d1 (host $h1)"
echo "# latency = median one-way us, bw = MB/s, rate = M msg/s; vs rc / vs tcp > 1: portals over verbs wins"
echo "# command: bench/verbs_matrix.sh > bench/verbs_report.txt"
echo
printf "%-30s %11s %11s %11s %11s %8s %8s\n" "test (unit)" "portals" "rc_verbs" "ud_verbs" "portals" "vs rc" "vs tcp"
printf "%-30s %11s %11s %11s %11s\n" "" "verbs wire" "" "" "tcp wire"
# One-sided operations: over the verbs wire a put or get to a registered region is an RDMA
# write or read without the target's CPU (the direct path); a fetch-add is a message the
# target's engine answers.
rma_rows() {
  row uct "UCT put_lat 8B (us)" lat 4000 -t put_lat -s 8
  row uct "UCT get_lat 8B bcopy (us)" lat 4000 -t get -D bcopy -s 8
  row uct "UCT fadd_lat 8B (us)" lat 4000 -t fadd -s 8
}
if [ "${PORTALS_UCX_BENCH_SECTION:-all}" = rma ]; then
  rma_rows
  exit 0
fi
pv=$(pingpong verbs)
pt=$(pingpong tcp)
pp() { echo "$1" | awk -v k="$2" '$1 == k {print $2; found=1} END {if (!found) print "n/a"}'; }
print_row "libportals4 put_lat 8B (us)" lat "$(pp "$pv" put_lat_8B_us)" - - "$(pp "$pt" put_lat_8B_us)"
print_row "libportals4 put 64KiB (MB/s)" bw "$(pp "$pv" 65536)" - - "$(pp "$pt" 65536)"
print_row "libportals4 put 1MiB (MB/s)" bw "$(pp "$pv" 1048576)" - - "$(pp "$pt" 1048576)"
print_row "libportals4 put 8B (Mmsg/s)" rate "$(pp "$pv" msg_rate_8B_Mmsgs)" - - "$(pp "$pt" msg_rate_8B_Mmsgs)"
row uct "UCT am_lat 8B (us)" lat 4000 -t am_lat -s 8
row uct "UCT am_bw 8B (Mmsg/s)" rate 20000 -t am_bw -s 8
row uct "UCT put_bw 64KiB zcopy (MB/s)" bw 500 -t put_bw -s 65536 -D zcopy
rma_rows
row ucp "UCP tag_lat 8B (us)" lat 4000 -t tag_lat -s 8
row ucp "UCP tag_bw 8B (Mmsg/s)" rate 20000 -t tag_bw -s 8
row ucp "UCP tag_bw 1MiB (MB/s)" bw 100 -t tag_bw -s 1048576
# Without the engine's progress thread (the application's polls alone): on 2 emulated CPUs
# every wake-up of a helper thread takes a CPU from a process that is polling.
PTL_PROGRESS=manual row uct "UCT am_lat 8B, manual progress" lat 4000 -t am_lat -s 8
PTL_PROGRESS=manual row ucp "UCP tag_lat 8B, manual progress" lat 4000 -t tag_lat -s 8

# Where the time goes: user-space instructions (callgrind) and system calls (perf's count of
# the raw_syscalls:sys_enter tracepoint; strace where perf cannot count them) of the client per
# UCT am_lat iteration, from the difference between runs of N and 3N iterations (start-up and
# wire-up cancel out). The kernel's own work (rxe is software) is in neither. strace slows
# every system call so much that helper threads' timed wake-ups (a parked progress thread's
# 5 ms) counted several times over per iteration: 0.67 futex per iteration under strace -c,
# 0.11 under perf.
per_iteration() { # TL TOOL: prints instructions or system calls per iteration
  local tl=$1 tool=$2 n=$((1500 / scale)) out counts=()
  for iters in "$n" $((3 * n)); do
    out=$(mktemp -d)
    case $tool in
      callgrind) PERFTEST_TOOL="valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$out/cg.%p" ;;
      strace) PERFTEST_TOOL="strace -f -c -o $out/strace.txt" ;;
      perf) PERFTEST_TOOL="perf stat -e raw_syscalls:sys_enter -x , -o $out/perf.txt" ;;
    esac
    PERFTEST_TIMEOUT=900 PERFTEST_TOOL=$PERFTEST_TOOL pair "$tl" uct -t am_lat -s 8 -n "$iters" >/dev/null
    case $tool in
      callgrind) counts+=("$(cat "$out"/cg.* 2>/dev/null | awk '/^summary:/ {s += $2} END {print s + 0}')") ;;
      strace) counts+=("$(awk '$NF == "total" {print $(NF-2)}' "$out/strace.txt" 2>/dev/null)") ;;
      perf) counts+=("$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$out/perf.txt" 2>/dev/null)") ;;
    esac
    rm -rf "$out"
  done
  awk -v a="${counts[0]:-0}" -v b="${counts[1]:-0}" -v n="$n" 'BEGIN {
    if (a + 0 == 0 || b + 0 == 0) print "n/a"; else printf "%.0f\n", (b - a) / (2 * n) }'
}
echo
syscall_tool=strace
mountpoint -q /sys/kernel/tracing 2>/dev/null || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
perf stat -e raw_syscalls:sys_enter -o /dev/null true 2>/dev/null && syscall_tool=perf
if command -v valgrind >/dev/null && command -v $syscall_tool >/dev/null; then
  echo "## client cost per UCT am_lat iteration (one round trip)"
  printf "%-30s %11s %11s %11s %11s\n" "" "portals" "rc_verbs" "ud_verbs" "portals"
  printf "%-30s %11s %11s %11s %11s\n" "" "verbs wire" "" "" "tcp wire"
  for tool in callgrind $syscall_tool; do
    label="instructions (callgrind)"
    [ "$tool" = strace ] && label="system calls (strace)"
    [ "$tool" = perf ] && label="system calls (perf)"
    printf "%-30s" "$label"
    for tl in portals-verbs rc_verbs ud_verbs portals-tcp; do printf " %11s" "$(per_iteration "$tl" "$tool")"; done
    echo
  done
else
  echo "## (no valgrind, or neither perf nor strace here: no instruction and system-call counts)"
fi
echo
echo "== RDMA counters per device after the run (rdma statistic)"
rdma statistic show 2>/dev/null | sed -n 's/^link \([^ ]*\) .* rdma_sends \([0-9]*\) rdma_recvs \([0-9]*\).*/\1 sends \2 recvs \3/p'
exit 0

#!/bin/bash
# Instructions per message of the UCT face, counted by callgrind (stable where times on this
# noisy 2-vCPU machine are not). Each row runs ucx_perftest twice with one side under
# `valgrind --tool=callgrind`, with N1 and N2 iterations, and prints
# (instructions(N2) - instructions(N1)) / (N2 - N1): start-up, wire-up and warm-up cancel out.
# All threads of the process count (the engine's progress thread too). The side under
# callgrind runs ~50x slower, so the other one mostly waits for it and its own polling
# barely shows in the count.
#   bench/callgrind_per_message.sh [BUILD_DIR]     (default: _build)
# Rows: UCT am_bw 8 B (sender, receiver), UCT am_lat 8 B (one side: a round trip per
# iteration), UCP tag_bw 8 B (sender, receiver), UCP tag_lat 8 B; the one-sided operations at
# their initiator (issue 32's direct path): UCT put_bw, get (bcopy), fadd 8 B; libportals4's
# 8 B PtlPut stream (bench/ptl_put_rate, PTL_NO_ACK_REQ, CT-counted) at the sender and the
# target, with logical maps of 2, 4,096 and 262,144 ranks, the two live ranks first or last
# (the cost must not grow with the job: issue 33), and to 4 targets in turn (4 ranks of the
# receiving process: what the engine keeps per target must serve them all).
#   CG_ROWS=uct|ptl|all (default all) picks the groups.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/_build}
module=$build/.libs/libuct_portals.so
[ -f "$module" ] || { echo "callgrind_per_message: no $module (run contrib/build.sh)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "callgrind_per_message: needs valgrind" >&2; exit 1; }
pair=$top/contrib/perftest-pair.sh
n1=${CG_N1:-20000}
n2=${CG_N2:-120000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Total instructions of the run with ITERS iterations, SIDE (client|server) instrumented.
count() { # LEVEL TL SIDE TEST ITERS
  local level=$1 tl=$2 side=$3 test=$4 iters=$5
  rm -f "$tmp"/cg.*
  local env=(env -u UCX_TLS -u LD_PRELOAD UCX_NET_DEVICES=lo,memory PERFTEST_TIMEOUT=600)
  [ "$tl" = portals ] && env+=(LD_PRELOAD="$module")
  local args=(-t "${test%%:*}" -s 8 -n "$iters")
  [[ $test == *:* ]] && args+=(-D "${test#*:}")  # TEST:LAYOUT
  if [ "$level" = uct ]; then
    local dev=memory
    case $tl in portals | tcp) dev=lo ;; esac
    args+=(-x "$tl" -d "$dev")
  else
    env+=(UCX_TLS="$tl")
  fi
  # The prefix runs `timeout ucx_perftest`: follow into the child, one file per process.
  # --smc-check=all: UCM patches libc's mmap family; unseen, the md's registration cache
  # cannot open and every registration would be made for real (bench/callgrind_report.txt).
  local vg="valgrind --tool=callgrind -q --smc-check=all --trace-children=yes --callgrind-out-file=$tmp/cg.%p"
  if [ "$side" = client ]; then
    env+=(PERFTEST_CLIENT_PREFIX="$vg")
  else
    env+=(PERFTEST_SERVER_PREFIX="$vg")
  fi
  "${env[@]}" "$pair" "${args[@]}" >/dev/null 2>"$tmp/err" || { echo "failed: $(tail -2 "$tmp/err")" >&2; return 1; }
  # ucx_perftest is the process with the most instructions (the other is `timeout`).
  awk '/^totals:/ {print $2}' "$tmp"/cg.* | sort -n | tail -1
}

# Total instructions of libportals4's put stream of MSGS puts, RANK (0 sender, 1 target) under
# callgrind, the map MAP ranks with the live ones at AT (first|last), the puts cycling through
# TARGETS ranks of the receiver (default 1).
count_ptl() { # RANK MAP AT MSGS [TARGETS]
  rm -f "$tmp"/cg.*
  local prog=$build/bench/ptl_put_rate
  local vg="valgrind --tool=callgrind -q --trace-children=yes --callgrind-out-file=$tmp/cg.%p"
  # shellcheck disable=SC2016 # expanded by the rank's shell
  "$build/ptlrun" -n 2 --timeout 600 bash -c 'if [ "$PTLRT_RANK" = "$1" ]; then exec $2 "$3" "${@:4}"; else exec "$3" "${@:4}"; fi' \
    bash "$1" "$vg" "$prog" --msgs "$4" --map-ranks "$2" --map-at "$3" --targets "${5:-1}" >/dev/null 2>"$tmp/err" ||
    { echo "failed: $(tail -2 "$tmp/err")" >&2; return 1; }
  awk '/^totals:/ {print $2}' "$tmp"/cg.* | sort -n | tail -1
}

per_message() { # LEVEL TL SIDE TEST
  local a b
  a=$(count "$@" "$n1") && b=$(count "$@" "$n2") || { echo n/a; return; }
  echo $(((b - a) / (n2 - n1)))
}

printf '# instructions per message (callgrind), %s, UCX %s, iterations %d and %d\n' "$(date +%F)" \
  "$(ucx_info -v | awk '/Version/ {print $3; exit}')" "$n1" "$n2"
printf '%-28s %12s %12s\n' "test (side)" portals "${CG_OTHER:-posix}"
# CG_OTHER=none leaves the comparison column out (e.g. for a second build of portals).
row() { # LABEL LEVEL SIDE TEST OTHER_TL
  local other=n/a
  [ "$5" != none ] && other=$(per_message "$2" "$5" "$3" "$4")
  printf '%-28s %12s %12s\n' "$1" "$(per_message "$2" portals "$3" "$4")" "$other"
}
rows=${CG_ROWS:-all}
if [ "$rows" != ptl ]; then
row "uct am_bw 8B (sender)" uct client am_bw "${CG_OTHER:-posix}"
row "uct am_bw 8B (receiver)" uct server am_bw "${CG_OTHER:-posix}"
row "uct am_lat 8B (round trip)" uct client am_lat "${CG_OTHER:-posix}"
row "ucp tag_bw 8B (sender)" ucp client tag_bw "${CG_OTHER:-posix}"
row "ucp tag_bw 8B (receiver)" ucp server tag_bw "${CG_OTHER:-posix}"
row "ucp tag_lat 8B (round trip)" ucp client tag_lat "${CG_OTHER:-posix}"
row "uct put_bw 8B (initiator)" uct client put_bw "${CG_OTHER:-posix}"
row "uct get bcopy 8B (initiator)" uct client get:bcopy "${CG_OTHER:-posix}"
row "uct fadd 8B (initiator)" uct client fadd "${CG_OTHER:-posix}"
fi
if [ "$rows" != uct ]; then
  [ -x "$build/bench/ptl_put_rate" ] || { echo "callgrind_per_message: no $build/bench/ptl_put_rate" >&2; exit 1; }
  for map in 2 4096 262144; do
    for at in first last; do
      for side in 0 1; do
        a=$(count_ptl $side $map $at "$n1") && b=$(count_ptl $side $map $at "$n2") && v=$(((b - a) / (n2 - n1))) || v=n/a
        label="ptl put 8B map $map $at ($([ $side = 0 ] && echo sender || echo target))"
        printf '%-40s %12s\n' "$label" "$v"
      done
    done
  done
  for side in 0 1; do
    a=$(count_ptl $side 5 first "$n1" 4) && b=$(count_ptl $side 5 first "$n2" 4) && v=$(((b - a) / (n2 - n1))) || v=n/a
    printf '%-40s %12s\n' "ptl put 8B 4 targets ($([ $side = 0 ] && echo sender || echo target))" "$v"
  done
fi

#!/bin/bash
# The OpenSHMEM numbers of issue 32, one host, 2 PEs: the same performance-suite programs run
# over Sandia OpenSHMEM on this libportals4, and over Open MPI's OSHMEM on UCX (sm, and
# UCX_TLS=portals through this build's UCT component), interleaved, RUNS rounds (default 3).
# Prints each round's numbers and the ratios the issue asks for (SOS / OSHMEM-sm).
#
#   bench/shmem_matrix.sh SOS_BIN OSHMEM_BIN SOS_LIBDIR [BUILD_DIR [BASE_LIBDIR]]
#
# SOS_BIN and OSHMEM_BIN: directories holding shmem_latency_put_perf, shmem_bw_put_perf and
# shmem_bw_atomics_perf (the shmem_perf_suite of the OpenSHMEM 1.4 test suite), compiled by
# hand with each library's own oshcc; CI cannot fetch either source, so nothing here builds
# them. SOS_LIBDIR: SOS's lib directory. BUILD_DIR (default _build): its .libs/libportals4 runs
# under SOS, its libuct_portals.so under OSHMEM. BASE_LIBDIR: another libportals4's directory
# to run SOS on as well (a "before" column).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
sos_bin=${1:?SOS_BIN}
osh_bin=${2:?OSHMEM_BIN}
sos_lib=${3:?SOS_LIBDIR}
build=${4:-$top/_build}
base_lib=${5:-}
runs=${RUNS:-3}
module=$build/.libs/libuct_portals.so
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Runs one program of one stack; prints its output.
run() { # STACK PROGRAM ARGS...
  local stack=$1 prog=$2
  shift 2
  case $stack in
    sos) LD_LIBRARY_PATH=$build/.libs:$sos_lib timeout 300 mpirun --oversubscribe -x LD_LIBRARY_PATH -np 2 \
      "$sos_bin/$prog" "$@" 2>&1 ;;
    sos-base) LD_LIBRARY_PATH=$base_lib:$sos_lib timeout 300 mpirun --oversubscribe -x LD_LIBRARY_PATH -np 2 \
      "$sos_bin/$prog" "$@" 2>&1 ;;
    oshmem-sm) timeout 300 oshrun --oversubscribe --mca spml ucx -x UCX_TLS=sm,self -np 2 "$osh_bin/$prog" "$@" 2>&1 ;;
    oshmem-portals) LD_PRELOAD=$module timeout 300 oshrun --oversubscribe --mca spml ucx -x LD_PRELOAD \
      -x UCX_TLS=portals,self -np 2 "$osh_bin/$prog" "$@" 2>&1 ;;
  esac
}

# The five figures of one stack, space-separated: long_p ping-pong us, putmem 8 B M msg/s,
# atomic fetch latency us, fetch-add latency us, atomic add M ops/s ("-" where the program
# failed: Open MPI 4.1.4's OSHMEM aborts at the suite's cswap, before its fetch-add).
figures() { # STACK
  local lat bw at fetch fadd add
  lat=$(run "$1" shmem_latency_put_perf -e 8 | awk '/Ping-Pong shmem_long_p/ {f=1} f && $1 == 8 {print $2; exit}')
  bw=$(run "$1" shmem_bw_put_perf -s 8 -e 8 | awk '$1 == 8 && NF >= 3 {printf "%.3f", $3 / 1e6; exit}')
  at=$(run "$1" shmem_bw_atomics_perf)
  fetch=$(echo "$at" | awk '/^shmem_fetch/ {f=1} f && $1 == "ulong" {print $4; exit}')
  fadd=$(echo "$at" | awk '/^shmem_fadd/ {f=1} f && $1 == "ulong" {print $4; exit}')
  add=$(echo "$at" | awk '/^shmem_add/ {f=1} f && $1 == "ulong" {print $3; exit}')
  echo "${lat:--} ${bw:--} ${fetch:--} ${fadd:--} ${add:--}"
}

ratio() { # A B: A/B
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'
}

row() { printf '%-16s %10s %10s %10s %10s %10s\n' "$@"; }

stacks=(sos oshmem-sm oshmem-portals)
[ -n "$base_lib" ] && stacks+=(sos-base)
echo "# portals-ucx: OpenSHMEM perf suite (1.4), $(date +%F), $(nproc) CPUs, 2 PEs on one host"
echo "# long_p = Ping-Pong shmem_long_p (us); put8 = shmem_bw_put_perf 8 B message rate, window 64"
echo "# (M msg/s); fetch, fadd = shmem_bw_atomics_perf ulong atomic fetch and fetch-add latency (us);"
echo "# add = its ulong add rate (M ops/s). Ratios: SOS over libportals4 against OSHMEM over UCX sm"
echo "# (issue 32's goals: long_p <= 3x, fetch-add latency <= 3x, put8 >= 0.25x)."
for r in $(seq "$runs"); do
  echo
  echo "## round $r"
  row stack long_p put8 fetch fadd add
  declare -A got=()
  for s in "${stacks[@]}"; do
    got[$s]=$(figures "$s")
    # shellcheck disable=SC2086 # five words
    row "$s" ${got[$s]}
  done
  read -r sl sp sx sf sa <<<"${got[sos]}"
  read -r ml mp mx mf ma <<<"${got[oshmem-sm]}"
  row "sos / sm" "$(ratio "$sl" "$ml")" "$(ratio "$sp" "$mp")" "$(ratio "$sx" "$mx")" "$(ratio "$sf" "$mf")" \
    "$(ratio "$sa" "$ma")"
done

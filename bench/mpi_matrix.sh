#!/bin/bash
# MPI point-to-point over UCX_TLS=portals next to UCX's own shared-memory transports (sm) in
# one run, back to back: Open MPI (pml ucx) and MPICH (ch4:ucx), 2 ranks on this host, run
# bench/mpi_bench for latency (ping-pong), streaming bandwidth (a window of 64) and message
# rate, with separate send and receive buffers of each kind (page-aligned as OSU allocates
# them, unaligned malloc, MPI_Alloc_mem). Values are averages over every iteration (the best
# trial is in the raw lines); one table per MPI, test and buffer kind shows both transports and
# "portals x": latency sm/portals, bandwidth and rate portals/sm (> 1: portals wins).
# Where the OSU micro-benchmarks are built (OSU_OMPI=DIR, OSU_MPICH=DIR: the directory holding
# osu_latency and osu_bw; CI cannot fetch them), their osu_latency and osu_bw run beside.
#   bench/mpi_matrix.sh [BUILD_DIR] > bench/mpi_report.txt
# BENCH_QUICK=1 runs a tenth of the iterations (a smoke run, not a measurement);
# MPI_MATRIX_KINDS, MPI_MATRIX_TESTS, MPI_MATRIX_MPIS, MPI_MATRIX_TLS narrow or widen it
# (defaults: "aligned unaligned alloc_mem", "lat bw rate", "ompi mpich", "portals sm").
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/_build}
[ -f "$build/env.sh" ] || { echo "mpi_matrix: no $build/env.sh (run contrib/build.sh)" >&2; exit 1; }
b=$build
. "$top/test/launcher_env.sh"
. "$build/env.sh"
iters=2000
[ "${BENCH_QUICK:-0}" = 1 ] && iters=200
read -r -a kinds <<<"${MPI_MATRIX_KINDS:-aligned unaligned alloc_mem}"
read -r -a tests <<<"${MPI_MATRIX_TESTS:-lat bw rate}"
read -r -a mpis <<<"${MPI_MATRIX_MPIS:-ompi mpich}"
read -r -a tls <<<"${MPI_MATRIX_TLS:-portals sm}"
for m in "${mpis[@]}"; do
  case $m in
    ompi) make -s -C "$build" bench/mpi_bench ;;
    mpich) make -s -C "$build" bench/mpi_bench_mpich ;;
    *) echo "mpi_matrix: unknown MPI $m (ompi, mpich)" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

launch() { # MPI TL PROGRAM ARGS...
  local m=$1 tl=$2
  shift 2
  case $m in
    ompi) UCX_TLS=$tl,self "$OMPI_MPIRUN" --mca pml ucx -x LD_PRELOAD -x UCX_TLS --bind-to none -n 2 "$@" </dev/null ;;
    mpich) UCX_TLS=$tl,self "$HYDRA_MPIEXEC" -n 2 "$@" </dev/null ;;
  esac
}
# One table from "$tmp/WHAT.<transport>.rows" (size value per line): every transport's value
# and portals' ratio to the second transport (LOWER: 1 when lower values are better).
table() { # TITLE LOWER WHAT
  echo
  echo "## $1"
  printf '%10s' bytes
  for tl in "${tls[@]}"; do printf ' %12s' "$tl"; done
  if [ "${#tls[@]}" -gt 1 ]; then printf ' %12s' "portals x"; fi
  echo
  local files=()
  for tl in "${tls[@]}"; do files+=("$tmp/$3.$tl.rows"); done
  paste "${files[@]}" | awk -v lower="$2" -v n=${#tls[@]} '{
    printf "%10s", $1
    for (i = 0; i < n; ++i) printf " %12s", $(2 + 2 * i)
    if (n > 1) printf " %12.2f", lower ? $4 / $2 : $2 / $4
    printf "\n"
  }'
}
bench_of() { [ "$1" = ompi ] && echo "$build/bench/mpi_bench" || echo "$build/bench/mpi_bench_mpich"; }
name_of() { [ "$1" = ompi ] && echo "Open MPI $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p') (pml ucx)" ||
  echo "MPICH $(mpichversion 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*//p') (ch4:ucx)"; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "# bench/mpi_matrix.sh on $(hostname), $(date -u +%Y-%m-%d), $(nproc) CPUs: $cpu; kernel $(uname -r); UCX $(ucx_info -v | sed -n "s/^# Version //p")"
echo "# 2 ranks, separate send and receive buffers; averages over all iterations of 5 trials (bench/mpi_bench.c)"
echo "# portals x: latency sm/portals, bandwidth and rate portals/sm (> 1: portals faster)"
for m in "${mpis[@]}"; do
  for test in "${tests[@]}"; do
    case $test in
      lat) min=0 max=$((1 << 20)) ;;
      bw) min=1 max=$((4 << 20)) ;;
      rate) min=1 max=8192 ;;
    esac
    for kind in "${kinds[@]}"; do
      for tl in "${tls[@]}"; do
        launch "$m" "$tl" "$(bench_of "$m")" "$test" $min $max $iters "$kind" >"$tmp/out.$tl" 2>"$tmp/err.$tl" ||
          { echo "mpi_matrix: $m $test $kind over $tl failed:" >&2; cat "$tmp/err.$tl" >&2; exit 1; }
        awk '{print $2, $3}' "$tmp/out.$tl" >"$tmp/out.$tl.rows"
      done
      table "$(name_of "$m"), $test, $kind buffers" "$([ $test = lat ] && echo 1 || echo 0)" out
    done
  done
  osu=$([ "$m" = ompi ] && echo "${OSU_OMPI:-}" || echo "${OSU_MPICH:-}")
  if [ -n "$osu" ] && [ -x "$osu/osu_latency" ]; then
    for t in osu_latency osu_bw; do
      for tl in "${tls[@]}"; do
        launch "$m" "$tl" "$osu/$t" >"$tmp/osu.$tl" 2>"$tmp/err.$tl" ||
          { echo "mpi_matrix: $m $t over $tl failed:" >&2; cat "$tmp/err.$tl" >&2; exit 1; }
        grep -v '^#' "$tmp/osu.$tl" | awk 'NF == 2' >"$tmp/osu.$tl.rows"
      done
      table "$(name_of "$m"), OSU $t ($(grep -m1 '^# OSU' "$tmp/osu.${tls[0]}" | sed 's/^# //'))" \
        "$([ $t = osu_latency ] && echo 1 || echo 0)" osu
    done
  fi
done

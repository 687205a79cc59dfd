#!/bin/bash
# MPI point-to-point over UCX_TLS=portals next to UCX's own shared-memory (sm) and tcp
# transports, in one run, back to back: Open MPI (pml ucx) with 2 ranks on this host runs
# bench/mpi_bench for latency, bandwidth and message rate under each UCX_TLS, and one table
# per test shows every transport and "portals x": how many times faster portals is
# (latency: theirs/ours; bandwidth and rate: ours/theirs; > 1 means portals wins).
#   bench/mpi_matrix.sh [BUILD_DIR] > bench/mpi_report.txt
# BENCH_QUICK=1 runs a tenth of the iterations (a smoke run, not a measurement).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/_build}
[ -f "$build/env.sh" ] || { echo "mpi_matrix: no $build/env.sh (run contrib/build.sh)" >&2; exit 1; }
make -s -C "$build" bench/mpi_bench
bench=$build/bench/mpi_bench
b=$build
. "$top/test/launcher_env.sh"
. "$build/env.sh"
iters=2000
[ "${BENCH_QUICK:-0}" = 1 ] && iters=200
tls=(portals sm tcp)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # TL TEST MIN MAX
  UCX_TLS=$1,self "$OMPI_MPIRUN" --mca pml ucx -x LD_PRELOAD -x UCX_TLS --bind-to none -n 2 \
    "$bench" "$2" "$3" "$4" "$iters" </dev/null
}

echo "# bench/mpi_matrix.sh on $(hostname), $(date -u +%Y-%m-%d), $(nproc) CPUs; Open MPI $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p'), pml ucx, 2 ranks"
echo "# best of 5 trials per size (bench/mpi_bench.c); portals x > 1: portals faster"
for test in lat bw rate; do
  case $test in
    lat) min=0 max=$((1 << 20)) ;;
    bw) min=1 max=$((4 << 20)) ;;
    rate) min=1 max=8192 ;;
  esac
  for tl in "${tls[@]}"; do
    run "$tl" $test $min $max > "$tmp/$test.$tl" 2>"$tmp/$test.$tl.err" ||
      { echo "mpi_matrix: $test over $tl failed:" >&2; cat "$tmp/$test.$tl.err" >&2; exit 1; }
  done
  echo
  printf '%-8s %10s' "$test" bytes
  for tl in "${tls[@]}"; do printf ' %12s' "$tl"; done
  for tl in "${tls[@]:1}"; do printf ' %12s' "portals/$tl"; done
  echo
  paste "$tmp/$test.portals" "$tmp/$test.sm" "$tmp/$test.tcp" | awk -v test=$test '{
    ours = $3; sm = $7; tcp = $11
    r_sm = test == "lat" ? sm / ours : ours / sm
    r_tcp = test == "lat" ? tcp / ours : ours / tcp
    printf "%-8s %10s %12s %12s %12s %12.2f %12.2f\n", $4, $2, ours, sm, tcp, r_sm, r_tcp
  }'
done

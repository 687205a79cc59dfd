#!/bin/bash
# Checks the portals component against one UCX version the way its users meet it:
#
#   contrib/ucx-check.sh [installed | UCX-TARBALL | UCX-SOURCE-DIR]     default: installed
#
#  1. contrib/build-ucx-native.sh: the version's UCX tree, this project built against it,
#     the component's own UCT tests (test/uct_tests) passing, the component installed
#     into that UCX's module directory and listed by its ucx_info without LD_PRELOAD;
#  2. ucx_info -d shows the capabilities UCP's tag offload needs;
#  3. UCP picks portals lanes with tag offload (ucx_info -e, UCX_TLS=portals);
#  4. ucx_perftest between two processes: UCT (am_lat, put_bw, get_bw) and UCP (tag_lat,
#     tag_bw), the UCP runs with UCX_PORTALS_STATS=y showing messages matched in the engine.
# Prints one line per check; exits non-zero at the first that fails.
set -eo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source_arg=${1:-installed}

prefix=$("$here/build-ucx-native.sh" "$source_arg")
export PATH=$prefix/bin:$PATH
unset LD_PRELOAD UCX_MODULES UCX_TLS
version=$(ucx_info -v | sed -n -e 's/^# Version //p' -e 's/^# Library version: //p')
say() { echo "ucx-check: UCX $version: $*"; }
fail() { echo "ucx-check: UCX $version: FAILED: $*" >&2; exit 1; }
say "component built, its UCT tests passed, loaded natively from $prefix/lib/ucx"

devices=$(ucx_info -d)
for cap in tag_eager_bcopy tag_rndv_zcopy get_zcopy am_bcopy; do
  grep -q "$cap" <<< "$(awk '/Transport: portals/,/error handling/' <<< "$devices")" ||
    fail "ucx_info -d: portals does not list $cap"
done
say "ucx_info -d lists portals with tag offload capabilities"

lanes=$(UCX_TLS=portals UCX_NET_DEVICES=lo timeout 60 ucx_info -e -u t 2>&1)
grep -q 'lane\[0\]:.*portals/lo.*tag_offload' <<< "$lanes" || { echo "$lanes" >&2; fail "UCP did not pick a portals lane with tag offload"; }
say "UCP picks portals lanes with tag offload"

# perf ARGS: the client's output of one ucx_perftest pair (fails the check if it fails).
perf() {
  local out
  out=$(timeout 150 "$here/perftest-pair.sh" "$@" 2>&1) || { echo "$out" | tail -20 >&2; fail "ucx_perftest $*"; }
  echo "$out"
}
for t in "am_lat -n 20000" "put_bw -D zcopy -s 65536 -n 2000" "get -D zcopy -s 65536 -n 2000"; do
  # shellcheck disable=SC2086 # test and its arguments
  out=$(perf -x portals -d lo -t $t)
  say "UCT $t: $(grep '^Final:' <<< "$out")"
done
# The client's receives of tag_lat are offloaded once UCP has seen an unexpected message, from
# UCX_PORTALS_TM_MIN_RECV (4 KiB) on.
for t in "tag_lat -s 4096 -n 20000" "tag_bw -s 4096 -n 20000" "tag_bw -s 65536 -n 2000"; do
  # shellcheck disable=SC2086
  out=$(UCX_TLS=portals UCX_NET_DEVICES=lo UCX_PORTALS_STATS=y perf -t $t)
  say "UCP $t: $(grep '^Final:' <<< "$out")"
  if [ "${t%% *}" = tag_lat ]; then
    matched=$(sed -n 's/.*messages matched in the engine \([0-9]*\).*/\1/p' <<< "$out" | sort -n | tail -1)
    [ "${matched:-0}" -gt 0 ] || { echo "$out" >&2; fail "UCP's tag offload matched nothing in the engine"; }
    say "UCP tag offload used: $matched messages matched in the engine"
  fi
done

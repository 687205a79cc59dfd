#!/bin/sh
# Polling on an oversubscribed host: bench/poll_barrier with 2 ranks (a core each on a 2-core
# machine) and 3 and 4 ranks (more ranks than cores), PTL_WAIT_YIELD=auto (the default: idle
# polls give the CPU away while more ranks share the host than it has cores) against never
# (the polls spin). With a core each, auto does not yield: the 2-rank rows show the noise.
# Usage: bench/poll_barrier.sh [BUILD_DIR]  (report: bench/poll_barrier_report.txt)
set -eu
b=${1:-$(cd "$(dirname "$0")/.." && pwd)}
export LD_LIBRARY_PATH="$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "# $(nproc) CPUs, $(date -u +%F)"
for n in 2 3 4; do
  rounds=2000
  for how in poll get wait; do
    auto=$(PTL_WAIT_YIELD=auto timeout 300 "$b/ptlrun" -n $n "$b/bench/poll_barrier" $how $rounds)
    # Spinning ranks without a core each take milliseconds a round: fewer rounds then.
    never_rounds=$rounds
    [ $n -gt "$(nproc)" ] && never_rounds=$((rounds / 10))
    never=$(PTL_WAIT_YIELD=never timeout 300 "$b/ptlrun" -n $n "$b/bench/poll_barrier" $how $never_rounds)
    a=$(echo "$auto" | awk '{print $(NF-3)}')
    v=$(echo "$never" | awk '{print $(NF-3)}')
    printf '%d ranks %-4s  yield auto %10.1f us   never %10.1f us   never/auto %8.1fx\n' $n $how "$a" "$v" \
      "$(echo "$v $a" | awk '{print $1 / $2}')"
  done
done

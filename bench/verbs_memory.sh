#!/bin/bash
# Pinned memory per process against the number of peers on the verbs wire (issue 34's goal:
# <= 64 MiB + 16 KiB per peer). Two hosts of contrib/guest-rxe-hosts.sh in a guest of
# contrib/guest-run.sh; 2*P ranks, alternating between the hosts, so each rank has P peers
# over RDMA (P = 2, 8, 32 by default) and P-1 over shared memory. Each rank puts to every
# other (bench/verbs_memory) and reports what the engine counts (PtlXWireUsage) and what the
# kernel counts (VmPin); the slope between the smallest and the largest P is the figure. Also
# the tcp wire's connections and the open descriptors once all are connected.
#   bench/verbs_memory.sh [BUILD_DIR]... > report   (several builds: each measured in turn)
# PORTALS_UCX_MEMORY_PEERS="2 8 32" sets the peer counts.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
builds=()
for b in "${@:-$top/_build}"; do
  b=$(cd "$b" && pwd)
  [ -x "$b/bench/verbs_memory" ] || { echo "verbs_memory: no bench/verbs_memory in $b" >&2; exit 1; }
  builds+=("$b")
done
peers=${PORTALS_UCX_MEMORY_PEERS:-2 8 32}

if [ -z "${NETNS_VERBS_DEVICES:-}" ]; then
  if [ "$(id -u)" = 0 ] && modprobe rdma_rxe 2>/dev/null; then
    exec "$top/contrib/guest-rxe-hosts.sh" 2 "$0" "${builds[@]}"
  fi
  share=(--rw "$top")
  for b in "${builds[@]}"; do case $b in "$top"/*) ;; *) share+=(--rw "$b") ;; esac; done
  exec "$top/contrib/guest-run.sh" "${share[@]}" --mem 12288 --timeout 3000 -- bash "$0" "${builds[@]}"
fi

echo "# bench/verbs_memory.sh: pinned bytes per process against RDMA peers (2 hosts, soft-RoCE in a guest)"
echo "# $(date -u +%Y-%m-%dT%H:%MZ); PTL_VERBS_* as set: $(env | grep '^PTL_VERBS_' | tr '\n' ' ')"
for b in "${builds[@]}"; do
  echo
  echo "## build $b ($(git -C "$b" rev-parse --short HEAD 2>/dev/null || git -C "$top" rev-parse --short HEAD))"
  summary=()
  for p in $peers; do
    n=$((2 * p))
    echo "### $p RDMA peers: $n ranks"
    out=$("$b/ptlrun" -n "$n" --timeout 900 "$top/contrib/netns-exec-rank.sh" "$b/bench/verbs_memory" 2>&1)
    echo "$out" | grep -v '^[0-9]'
    line=$(echo "$out" | grep '^max ')
    [ -n "$line" ] && summary+=("$p ${line#max }")
  done
  echo "### summary: peers, then the largest of: rdma_peers other_host engine_pinned_B vm_pin_KiB tcp_conns fds"
  printf '%s\n' "${summary[@]}"
  [ "${#summary[@]}" -ge 2 ] || continue
  first=(${summary[0]}) last=(${summary[-1]})
  awk -v p0="${first[0]}" -v p1="${last[0]}" -v e0="${first[3]}" -v e1="${last[3]}" -v v0="${first[4]}" -v v1="${last[4]}" 'BEGIN {
    if (p1 == p0) exit
    printf "slope: engine %.1f KiB per peer (intercept %.1f MiB); kernel VmPin %.1f KiB per peer (intercept %.1f MiB)\n",
      (e1 - e0) / (p1 - p0) / 1024, (e0 - (e1 - e0) / (p1 - p0) * p0) / 1048576,
      (v1 - v0) / (p1 - p0), (v0 - (v1 - v0) / (p1 - p0) * p0) / 1024 }'
  # Descriptors: the shared-memory peers (P-1 of them) may cost some; RDMA peers should not.
  echo "descriptors: ${first[6]} with ${first[0]} RDMA peers, ${last[6]} with ${last[0]} (tcp connections at most ${first[5]}, ${last[5]})"
done

#!/bin/sh
# netns-exec-rank.sh PROGRAM [ARGS...]
# For ptlrun under netns-hosts.sh: runs this rank (PTLRT_RANK) on host PTLRT_RANK mod the
# number of hosts in NETNS_HOSTS, so consecutive ranks land on different hosts. Under
# guest-rxe-hosts.sh the rank also gets that host's RDMA device as PTL_VERBS_DEVICE.
set -eu
: "${NETNS_HOSTS:?run under contrib/netns-hosts.sh}"
set -- "$@"
count=0
for h in $NETNS_HOSTS; do count=$((count + 1)); done
want=$(( ${PTLRT_RANK:-0} % count ))
i=0
for d in ${NETNS_VERBS_DEVICES:-}; do
  if [ "$i" -eq "$want" ]; then export PTL_VERBS_DEVICE="$d"; fi
  i=$((i + 1))
done
i=0
for h in $NETNS_HOSTS; do
  if [ "$i" -eq "$want" ]; then exec ip netns exec "$h" "$@"; fi
  i=$((i + 1))
done

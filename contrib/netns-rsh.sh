#!/bin/sh
# netns-rsh.sh HOST COMMAND...
# An rsh for launchers (mpirun --mca plm_rsh_agent, mpiexec.hydra -launcher-exec) under
# contrib/netns-hosts.sh: HOST is one of its namespaces. Runs COMMAND there through a shell,
# as rsh would, in a UTS namespace whose hostname is HOST, so each "host" has its own name.
set -eu
host=${1:?usage: netns-rsh.sh HOST COMMAND...}
shift
# Under guest-rxe-hosts.sh: this host's RDMA device.
i=0
for h in ${NETNS_HOSTS:-}; do
  j=0
  for d in ${NETNS_VERBS_DEVICES:-}; do
    [ "$h" = "$host" ] && [ "$i" -eq "$j" ] && export PTL_VERBS_DEVICE="$d"
    j=$((j + 1))
  done
  i=$((i + 1))
done
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"

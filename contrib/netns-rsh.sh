#!/bin/sh
# netns-rsh.sh HOST COMMAND...
# An rsh for launchers (mpirun --mca plm_rsh_agent, mpiexec.hydra -launcher-exec) under
# contrib/netns-hosts.sh: HOST is one of its namespaces. Runs COMMAND there through a shell,
# as rsh would, in a UTS namespace whose hostname is HOST, so each "host" has its own name.
set -eu
host=${1:?usage: netns-rsh.sh HOST COMMAND...}
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"

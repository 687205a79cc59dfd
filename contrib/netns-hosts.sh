#!/bin/sh
# netns-hosts.sh N COMMAND [ARGS...]
#
# Runs COMMAND with N private "hosts": network namespaces joined by a bridge (itself in a
# namespace of its own), host i at 10.77.0.(i+1)/24 on its veth "eth0" with loopback up.
# COMMAND runs in the current namespace with
#   NETNS_HOSTS="<ns0> <ns1> ..."   the namespace names, host i first
#   NETNS_ADDRS="10.77.0.1 ..."     their addresses
# and starts processes on host i with `ip netns exec <ns_i> ...` (or netns-exec-rank.sh).
# Everything is removed when COMMAND ends, fails or is interrupted. Needs root and iproute2.
# Exit status: COMMAND's, or 77 (skip) when namespaces cannot be created here.
set -eu
n=${1:?usage: netns-hosts.sh N COMMAND [ARGS...]}
shift
[ $# -gt 0 ] || { echo "usage: netns-hosts.sh N COMMAND [ARGS...]" >&2; exit 2; }

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1; then
  echo "netns-hosts: needs root and iproute2 (ip netns); skipping" >&2
  exit 77
fi

tag="ptl$$"
hub="${tag}hub"
hosts=""
addrs=""
cleanup() {
  for h in $hosts; do ip netns del "$h" 2>/dev/null || true; done
  ip netns del "$hub" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if ! ip netns add "$hub" 2>/dev/null; then
  echo "netns-hosts: cannot create network namespaces here; skipping" >&2
  exit 77
fi
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
i=0
while [ "$i" -lt "$n" ]; do
  h="${tag}h$i"
  ip netns add "$h"
  hosts="$hosts $h"
  addr="10.77.0.$((i + 1))"
  addrs="$addrs $addr"
  # The pair is created inside the host namespace and one end moved to the hub, so no
  # interface ever appears in the caller's namespace.
  ip -n "$h" link add eth0 type veth peer name "p$i"
  ip -n "$h" link set "p$i" netns "$hub"
  ip -n "$hub" link set "p$i" master br0 up
  ip -n "$h" addr add "$addr/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  i=$((i + 1))
done

NETNS_HOSTS="${hosts# }" NETNS_ADDRS="${addrs# }" "$@"

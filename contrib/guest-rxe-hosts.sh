#!/bin/sh
# guest-rxe-hosts.sh N COMMAND [ARGS...]
#
# In a guest of contrib/guest-run.sh (or any machine whose kernel has rdma_rxe): N "hosts"
# as contrib/netns-hosts.sh makes them (namespaces, 10.77.0.(i+1) on eth0), each with a
# soft-RoCE device of its own, rxe<i>, on an RDMA link 10.88.0.(i+1). COMMAND runs with
# netns-hosts.sh's variables and
#   NETNS_VERBS_DEVICES="rxe0 rxe1 ..."   host i's device, in the order of NETNS_HOSTS
# which netns-exec-rank.sh and netns-rsh.sh turn into PTL_VERBS_DEVICE for processes on host i.
#
# Why the RDMA links are not inside the host namespaces: rdma_rxe before Linux 6.9 sends and
# receives only in the initial network namespace, so its devices sit on veth ends there,
# joined by a bridge in a namespace of their own. Addresses on one kernel are all local, so
# each link's own source address is routed out of its own interface (a rule per link for
# locally sent packets, the local table after them): rxe then sees its packets arrive on
# the peer's device, as between two machines. RDMA devices are shared by all namespaces, so
# a process on host i opens rxe<i> by name. Exit status: COMMAND's, 77 without rdma_rxe.
set -eu
n=${1:?usage: guest-rxe-hosts.sh N COMMAND [ARGS...]}
shift
[ $# -gt 0 ] || { echo "usage: guest-rxe-hosts.sh N COMMAND [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

if [ "$(id -u)" != 0 ] || ! modprobe rdma_rxe 2>/dev/null || ! command -v rdma >/dev/null 2>&1; then
  echo "guest-rxe-hosts: needs root, rdma_rxe and iproute2's rdma (run inside contrib/guest-run.sh); skipping" >&2
  exit 77
fi

hub="rxehub$$"
devs=""
cleanup() {
  i=0
  while [ "$i" -lt "$n" ]; do
    rdma link delete "rxe$i" 2>/dev/null || true
    ip rule del pref $((100 + i)) 2>/dev/null || true
    ip rule del pref $((50 + i)) 2>/dev/null || true
    ip link del "rdma$i" 2>/dev/null || true
    i=$((i + 1))
  done
  if ip rule show pref 200 | grep -q .; then
    ip rule add pref 0 lookup local 2>/dev/null || true
    ip rule del pref 200 2>/dev/null || true
  fi
  ip netns del "$hub" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

ip link set lo up
# A 1 MiB RDMA read answers with a burst of packets: a backlog of 1000 drops part of it, and
# every loss costs rxe a retransmission timeout. Jumbo frames give rxe its 4096-byte MTU.
sysctl -qw net.core.netdev_max_backlog=30000
for k in all default; do
  sysctl -qw "net.ipv4.conf.$k.rp_filter=0" "net.ipv4.conf.$k.accept_local=1" "net.ipv4.conf.$k.arp_ignore=1"
done
ip netns add "$hub"
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
i=0
while [ "$i" -lt "$n" ]; do
  addr="10.88.0.$((i + 1))"
  ip link add "rdma$i" mtu 9000 type veth peer name "p$i" mtu 9000 netns "$hub"
  ip -n "$hub" link set "p$i" master br0 up
  ip addr add "$addr/24" dev "rdma$i"
  ip link set "rdma$i" up
  sysctl -qw "net.ipv4.conf.rdma$i.rp_filter=0" "net.ipv4.conf.rdma$i.accept_local=1"
  # Except to itself: a process's QP connected to its own device (its device atomics on its
  # own memory) resolves its own address locally, as on any machine.
  ip rule add pref $((50 + i)) from "$addr" to "$addr" lookup local
  ip rule add pref $((100 + i)) from "$addr" iif lo lookup $((100 + i))
  ip route add 10.88.0.0/24 dev "rdma$i" src "$addr" table $((100 + i))
  rdma link add "rxe$i" type rxe netdev "rdma$i"
  devs="$devs rxe$i"
  i=$((i + 1))
done
ip rule add pref 200 lookup local
ip rule del pref 0

NETNS_VERBS_DEVICES="${devs# }" "$here/netns-hosts.sh" "$n" "$@"

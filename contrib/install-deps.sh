#!/bin/sh
# Installs the Debian 12 packages portals-ucx needs to build, test and benchmark.
# Runs apt-get only when something is missing; needs root (or sudo) then.
set -e
pkgs="build-essential autoconf automake libtool pkg-config libgtest-dev libhwloc-dev ucx-utils libucx-dev clang dpkg-dev patch iproute2 libpmix-dev openmpi-bin libopenmpi-dev mpich libmpich-dev"
# UCX's own build (its gtest suite, contrib/ucx-gtest.sh; contrib/build-ucx-native.sh) with the
# installed UCX's configure flags needs Debian's build dependencies of ucx.
pkgs="$pkgs libibverbs-dev librdmacm-dev libnuma-dev libfuse3-dev"
# Open MPI's portals4 components built from Debian's source (contrib/ompi-build.sh) use the
# system's PMIx, libevent and hwloc, as Debian's Open MPI does.
pkgs="$pkgs libevent-dev"
# test/run_integration.sh counts an MPI ping-pong's system calls per message with strace.
pkgs="$pkgs strace"
# The verbs wire's tests run in a guest on Debian's kernel with soft-RoCE (contrib/guest-run.sh):
# qemu, the initramfs' tools, and rdma-core's rxe provider and rdma tool in the guest.
pkgs="$pkgs qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-providers"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null

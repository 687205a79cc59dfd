#!/bin/sh
# Fetches the Debian source of the installed UCX (its internal headers build the UCT
# component) into $PORTALS_UCX_CACHE (default ~/.cache/portals-ucx) and prints the tree's
# path. Adds a deb-src entry for Debian 12 when none exists. Idempotent.
set -e
cache=${PORTALS_UCX_CACHE:-$HOME/.cache/portals-ucx}
pkgver=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null || true)
[ -n "$pkgver" ] || { echo "ucx-source: libucx0 is not installed (apt-get install libucx-dev ucx-utils)" >&2; exit 1; }
upstream=${pkgver%%-*}
tree=$cache/ucx-$upstream
if [ -f "$tree/src/uct/base/uct_iface.h" ]; then
  echo "$tree"
  exit 0
fi
. "$(dirname "$0")/deb-src.sh"
deb_src_ready
mkdir -p "$cache"
cd "$cache"
apt-get source -qq "ucx=$pkgver" >&2 || { $SUDO apt-get update -qq >&2; apt-get source -qq "ucx=$pkgver" >&2; }
[ -f "$tree/src/uct/base/uct_iface.h" ] || { echo "ucx-source: $tree has no src/uct/base/uct_iface.h" >&2; exit 1; }
echo "$tree"

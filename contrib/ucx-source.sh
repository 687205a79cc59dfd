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
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "ucx-source: adding a deb-src entry (/etc/apt/sources.list.d/portals-ucx-deb-src.sources)" >&2
  $SUDO sh -c 'cat > /etc/apt/sources.list.d/portals-ucx-deb-src.sources' <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  $SUDO apt-get update -qq >&2
fi
command -v dpkg-source >/dev/null || { $SUDO apt-get update -qq >&2; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dpkg-dev >&2; }
mkdir -p "$cache"
cd "$cache"
apt-get source -qq "ucx=$pkgver" >&2 || { $SUDO apt-get update -qq >&2; apt-get source -qq "ucx=$pkgver" >&2; }
[ -f "$tree/src/uct/base/uct_iface.h" ] || { echo "ucx-source: $tree has no src/uct/base/uct_iface.h" >&2; exit 1; }
echo "$tree"

#!/bin/sh
# Makes `apt-get source` work on a stock Debian 12: adds a deb-src entry when none exists
# and dpkg-dev when dpkg-source is missing. Sourced by the scripts that fetch Debian sources.
deb_src_ready() {
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb-src: adding a deb-src entry (/etc/apt/sources.list.d/portals-ucx-deb-src.sources)" >&2
    $SUDO sh -c 'cat > /etc/apt/sources.list.d/portals-ucx-deb-src.sources' <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    $SUDO apt-get update -qq >&2
  fi
  command -v dpkg-source >/dev/null || {
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dpkg-dev >&2
  }
}

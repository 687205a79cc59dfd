#!/bin/bash
# UCX that loads the portals component natively (no LD_PRELOAD): builds UCX from the source
# of the installed version (contrib/ucx-source.sh) with `portals` added to its UCT module
# list (contrib/ucx-native/*.patch) and the installed UCX's own configure flags, installs it
# into PREFIX, then builds this project against it and installs libportals4 and
# libuct_portals.so there (the component into PREFIX/lib/ucx, UCX's module directory).
#
#   contrib/build-ucx-native.sh [PREFIX]     default: $PORTALS_UCX_CACHE/ucx-native
#   PREFIX/bin/ucx_info -d | grep portals    the component, loaded from the module list
#   UCX_TLS=portals PREFIX/bin/ucx_perftest ...
#
# UCX is rebuilt only when PREFIX lacks it or the patch changed; the project is rebuilt
# (in _build-native) and reinstalled every time.
set -eo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
cache=${PORTALS_UCX_CACHE:-$HOME/.cache/portals-ucx}
prefix=${1:-$cache/ucx-native}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

# shellcheck source=contrib/ucx-tree.sh
. "$here/ucx-tree.sh"
src=$("$here/ucx-source.sh")
stamp="$(basename "$src") $(cat "$here"/ucx-native/*.patch | sha256sum | cut -c1-12)"
work=$cache/native-build

if [ "$(cat "$prefix/.portals-ucx-native" 2>/dev/null)" != "$stamp" ]; then
  echo "build-ucx-native: building $(basename "$src") with portals in its module list into $prefix"
  ucx_prepare_tree "$work" "$src" "$here"/ucx-native/*.patch
  ucx_configure_tree "$work" --prefix="$prefix"
  grep -q '#define uct_MODULES ".*:portals' "$work/build/config.h" ||
    { echo "build-ucx-native: portals did not make it into uct_MODULES" >&2; exit 1; }
  make -C "$work/build" -j"$(nproc)" > "$work/make.log" 2>&1 || { tail -40 "$work/make.log"; exit 1; }
  make -C "$work/build" install > "$work/install.log" 2>&1 || { tail -40 "$work/install.log"; exit 1; }
  echo "$stamp" > "$prefix/.portals-ucx-native"
  rm -rf "$work"
fi

# This project against that UCX: its ucx_info and pkg-config files come first.
export PATH=$prefix/bin:$PATH
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
[ -x "$top/configure" ] || (cd "$top" && ./autogen.sh)
mkdir -p "$top/_build-native"
cd "$top/_build-native"
[ -f Makefile ] || "$top/configure" --prefix="$prefix" --with-ucx-src="$src" > configure.log 2>&1 ||
  { tail -30 configure.log; exit 1; }
make -j"$(nproc)" > make.log 2>&1 || { tail -40 make.log; exit 1; }
make install > install.log 2>&1 || { tail -40 install.log; exit 1; }
[ -f "$prefix/lib/ucx/libuct_portals.so" ] ||
  { echo "build-ucx-native: the component did not land in $prefix/lib/ucx" >&2; exit 1; }
# The point of it all: that UCX finds the component by itself.
devices=$(env -u LD_PRELOAD -u UCX_TLS "$prefix/bin/ucx_info" -d)
grep -q 'Transport: portals' <<< "$devices" ||
  { echo "build-ucx-native: $prefix/bin/ucx_info -d does not list portals" >&2; exit 1; }
echo "build-ucx-native: UCX with portals in its module list is in $prefix"
echo "  $prefix/bin/ucx_info -d | grep -A4 'Transport: portals'"

#!/bin/bash
# A UCX that loads the portals component natively (no LD_PRELOAD), for any UCX version:
# builds the UCX tree (contrib/ucx-build.sh: `portals` in its UCT module list, installed
# into the tree's prefix), then this project against it in _build-ucx-<version>, installed
# into the same prefix (the component into PREFIX/lib/ucx, UCX's module directory). Prints
# the prefix. The component's own UCT tests run against that UCX before it is installed.
#
#   contrib/build-ucx-native.sh [--gtest] [installed | UCX-TARBALL | UCX-SOURCE-DIR]
#                                        default: installed (Debian's source of the installed UCX)
#   PREFIX/bin/ucx_info -d | grep portals    the component, loaded from the module list
#   UCX_TLS=portals PREFIX/bin/ucx_perftest ...
#
# The UCX tree is cached (see ucx-build.sh); the project is rebuilt and reinstalled each time.
set -eo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
gtest=()
[ "${1:-}" = --gtest ] && { gtest=(--gtest); shift; }
source_arg=${1:-installed}

dir=$("$here/ucx-build.sh" "${gtest[@]}" "$source_arg")
prefix=$dir/prefix
version=$("$prefix/bin/ucx_info" -v | sed -n -e 's/^# Version //p' -e 's/^# Library version: //p')
build=$top/_build-ucx-$version

[ -x "$top/configure" ] || (cd "$top" && ./autogen.sh > /dev/null)
# Made again from scratch when made for another tree (its key is in the path): objects and
# dependency files would name the headers of a tree that is gone.
grep -qs -- "--with-ucx=$prefix" "$build/config.log" || rm -rf "$build"
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ]; then
  "$top/configure" --prefix="$prefix" --with-ucx="$prefix" > configure.log 2>&1 ||
    { tail -30 configure.log; exit 1; }
fi
grep -q '^S\["BUILD_UCT_TRUE"\]=""' config.status ||
  { echo "build-ucx-native: configure did not enable the UCT component (see $build/configure.log)" >&2; exit 1; }
# What is installed, and the component's own tests (not the rest of make check: the
# engine's suites do not depend on the UCX version).
# (Two make runs: `all` makes BUILT_SOURCES first and then itself again, which would build
# the objects test/uct_tests shares with it at the same time.)
{ make -j"$(nproc)" all && make -j"$(nproc)" test/uct_tests; } > make.log 2>&1 || { tail -40 make.log; exit 1; }
# With the component just built, not one installed into the prefix earlier.
abs_top_builddir=$build UCX_MODULES='^portals' ./test/uct_tests > uct_tests.log 2>&1 ||
  { tail -40 uct_tests.log; exit 1; }
make install > install.log 2>&1 || { tail -40 install.log; exit 1; }
[ -f "$prefix/lib/ucx/libuct_portals.so.0" ] ||
  { echo "build-ucx-native: the component did not land in $prefix/lib/ucx" >&2; exit 1; }
# The point of it all: that UCX finds the component by itself.
devices=$(env -u LD_PRELOAD -u UCX_TLS -u UCX_MODULES "$prefix/bin/ucx_info" -d)
grep -q 'Transport: portals' <<< "$devices" ||
  { echo "build-ucx-native: $prefix/bin/ucx_info -d does not list portals" >&2; exit 1; }
echo "build-ucx-native: UCX $version with the portals component in its module list: $prefix" >&2
echo "$prefix"

#!/bin/bash
# Builds one UCX tree per UCX version into the cache and prints its directory. The tree
# serves everything the project does with that version: its installed prefix loads the
# portals component natively (`portals` is added to UCX's UCT module list), the component
# is built against it (prefix + source), and with --gtest it also holds UCX's own gtest
# suite, patched to list portals among its transports.
#
#   contrib/ucx-build.sh [--gtest] installed    Debian's source of the installed UCX (1.13.1)
#   contrib/ucx-build.sh [--gtest] TARBALL|DIR  an upstream release (../shared/ucx/ucx-1.22.0.tar.gz)
#
# Layout: $PORTALS_UCX_CACHE/ucx-<version>-<key>/{src,build,prefix}, logs beside them.
# <key> hashes every input of the build: this script and contrib/ucx-tree.sh, the patches
# for that version (contrib/ucx-patches/<major.minor>/), the configure flags, the C and
# C++ compilers' versions and the source itself (the Debian package version, or the
# tarball's / directory's content). Changing any of them builds a new tree; older trees of
# the same version are removed then. The gtest suite is built on demand in the same tree
# (stamp .gtest-built), so a tree built without it is reused.
set -eo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PORTALS_UCX_CACHE:-$HOME/.cache/portals-ucx}
usage="usage: $0 [--gtest] installed | UCX-TARBALL | UCX-SOURCE-DIR"

want_gtest=no
[ "${1:-}" = --gtest ] && { want_gtest=yes; shift; }
[ $# -eq 1 ] || { echo "$usage" >&2; exit 2; }

# shellcheck source=contrib/ucx-tree.sh
. "$here/ucx-tree.sh"

case $1 in
  installed)
    src=$("$here/ucx-source.sh")
    src_id="debian $(dpkg-query -W -f='${Version}' libucx0)"
    ;;
  *.tar.gz | *.tgz)
    [ -f "$1" ] || { echo "ucx-build: no such tarball: $1" >&2; exit 1; }
    src=$(readlink -f "$1")
    src_id="tarball $(sha256sum < "$src" | cut -c1-16)"
    ;;
  *)
    [ -f "$1/src/uct/base/uct_iface.h" ] || { echo "ucx-build: $1 is not a UCX source tree" >&2; exit 1; }
    src=$(cd "$1" && pwd)
    src_id="dir $(cd "$src" && find . -type f ! -path './.git/*' -print0 | LC_ALL=C sort -z |
      xargs -0 sha256sum | sha256sum | cut -c1-16)"
    ;;
esac

version=$(ucx_source_version "$src")
series=${version%.*}
patchdir=$here/ucx-patches/$series
[ -d "$patchdir" ] || {
  echo "ucx-build: UCX $version: no patches for the $series series in $patchdir" >&2
  echo "  (copy the nearest series' directory and refresh its patches against this source)" >&2
  exit 1
}
mapfile -t flags < <(ucx_configure_flags)

key=$( {
  cat "$here/ucx-build.sh" "$here/ucx-tree.sh" "$patchdir"/*.patch
  printf '%s\n' "${flags[@]}" "$src_id"
  ${CC:-cc} --version | head -1
  ${CXX:-c++} --version | head -1
} | sha256sum | cut -c1-12)
dir=$cache/ucx-$version-$key

if [ ! -f "$dir/.built" ]; then
  for old in "$cache/ucx-$version"-????????????; do
    [ -d "$old" ] && [ "$old" != "$dir" ] && { echo "ucx-build: removing stale $old" >&2; rm -rf "$old"; }
  done
  echo "ucx-build: building UCX $version with portals in its module list in $dir" >&2
  start=$SECONDS
  ucx_prepare_tree "$dir" "$src" "$patchdir"/*.patch
  ucx_configure_tree "$dir" "${flags[@]}" --prefix="$dir/prefix" --enable-gtest
  grep -q '#define uct_MODULES ".*:portals' "$dir/build/config.h" ||
    { echo "ucx-build: portals did not make it into uct_MODULES" >&2; exit 1; }
  ucx_make_libraries "$dir"
  touch "$dir/.built"
  echo "ucx-build: UCX $version built in $((SECONDS - start)) s" >&2
fi

if [ $want_gtest = yes ] && [ ! -f "$dir/.gtest-built" ]; then
  echo "ucx-build: building UCX $version's gtest suite in $dir" >&2
  start=$SECONDS
  ucx_make_gtest "$dir"
  touch "$dir/.gtest-built"
  echo "ucx-build: gtest of UCX $version built in $((SECONDS - start)) s" >&2
fi
echo "$dir"

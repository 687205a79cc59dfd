#!/bin/bash
# Builds Open MPI from Debian's source of the installed version (4.1.4 on Debian 12) with its
# Portals 4 components (mtl, osc, btl, coll portals4) against libportals4, into the cache, and
# prints the tree's directory. Open MPI is configured exactly as a user would: with only
# --with-portals4=<prefix>, the prefix being this project installed (DESTDIR) from BUILD_DIR.
#
#   contrib/ompi-build.sh BUILD_DIR      (a configured and built portals-ucx build directory)
#
# Layout: $PORTALS_UCX_CACHE/ompi-<version>-<key>/{src,build,prefix,portals}, logs beside them.
# <key> hashes everything the build depends on: this script, Open MPI's configure flags, the
# Debian source version, the compilers' versions and portals4.h, the header of libportals4 (Open
# MPI compiles against them; the library itself is found at run time, so a rebuilt libportals4
# is used without rebuilding Open MPI: put BUILD_DIR/.libs first in LD_LIBRARY_PATH).
# Only the pristine upstream tarball of the Debian source is built: Debian's patches touch
# configure.ac and Makefile.am (hppa, hurd, man pages) and would need autoreconf.
set -eo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
cache=${PORTALS_UCX_CACHE:-$HOME/.cache/portals-ucx}
[ $# -eq 1 ] && [ -f "$1/Makefile" ] || { echo "usage: $0 BUILD_DIR (a configured portals-ucx build)" >&2; exit 2; }
b=$(cd "$1" && pwd)

srcver=$(dpkg-query -W -f='${source:Version}' libopenmpi3 2>/dev/null || true)
[ -n "$srcver" ] || { echo "ompi-build: Open MPI is not installed (apt-get install libopenmpi-dev)" >&2; exit 1; }
version=${srcver%%-*}
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)

# Debian's own choices for the runtime (external PMIx, libevent, hwloc), without what the
# tests never load (Fortran, C++ bindings, Java, OpenSHMEM, ROMIO, other networks): those
# take most of the build time.
flags=(
  --with-pmix=/usr/lib/$multiarch/pmix2 --with-libevent=external --with-hwloc=external
  --disable-mpi-fortran --disable-mpi-cxx --disable-mpi-java --disable-oshmem --disable-io-romio
  --without-ucx --without-verbs --without-ofi --without-psm --without-psm2 --without-cuda
  --without-knem --without-xpmem --without-tm --without-lsf --without-alps --without-sge
  --disable-man-pages --disable-silent-rules --enable-mca-no-build=io-ompio,fcoll,fbtl,sharedfp
)
key=$( {
  cat "$here/ompi-build.sh"
  printf '%s\n' "${flags[@]}" "$srcver"
  ${CC:-cc} --version | head -1
  cat "$top/include/portals4.h"
} | sha256sum | cut -c1-12)
dir=$cache/ompi-$version-$key

if [ ! -f "$dir/.built" ]; then
  for old in "$cache/ompi-$version"-????????????; do
    [ -d "$old" ] && [ "$old" != "$dir" ] && { echo "ompi-build: removing stale $old" >&2; rm -rf "$old"; }
  done
  start=$SECONDS
  mkdir -p "$cache/ompi-src"
  tarball=$(ls "$cache/ompi-src/openmpi_$version.orig.tar".* 2>/dev/null | head -1 || true)
  if [ -z "$tarball" ]; then
    # shellcheck source=contrib/deb-src.sh
    . "$here/deb-src.sh"
    deb_src_ready
    (cd "$cache/ompi-src" && apt-get source --download-only -qq "openmpi=$srcver" >&2) ||
      { $SUDO apt-get update -qq >&2; (cd "$cache/ompi-src" && apt-get source --download-only -qq "openmpi=$srcver" >&2); }
    tarball=$(ls "$cache/ompi-src/openmpi_$version.orig.tar".* | head -1)
  fi
  echo "ompi-build: building Open MPI $version with portals4 components in $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir/build"
  tar -xf "$tarball" -C "$dir"
  mv "$dir/openmpi-$version" "$dir/src"

  # This project installed where a user would, then found through --with-portals4 only.
  prefix=$(sed -n 's/^prefix = //p' "$b/Makefile")
  make -C "$b" -s install DESTDIR="$dir/portals" >"$dir/portals-install.log" 2>&1 ||
    { tail -20 "$dir/portals-install.log" >&2; exit 1; }
  portals=$dir/portals$prefix

  (cd "$dir/build" && "$dir/src/configure" "${flags[@]}" --prefix="$dir/prefix" --with-portals4="$portals") \
    >"$dir/configure.log" 2>&1 || { tail -30 "$dir/configure.log" >&2; exit 1; }
  make -C "$dir/build" -j"$(nproc)" >"$dir/make.log" 2>&1 || { grep -B2 -A8 'rror' "$dir/make.log" | head -60 >&2; exit 1; }
  make -C "$dir/build" install >"$dir/install.log" 2>&1 || { tail -30 "$dir/install.log" >&2; exit 1; }
  for c in mtl_portals4 osc_portals4 btl_portals4 coll_portals4; do
    [ -f "$dir/prefix/lib/openmpi/mca_$c.so" ] ||
      { echo "ompi-build: Open MPI did not build mca_$c (see $dir/configure.log)" >&2; exit 1; }
  done
  touch "$dir/.built"
  echo "ompi-build: Open MPI $version built in $((SECONDS - start)) s" >&2
fi
echo "$dir"

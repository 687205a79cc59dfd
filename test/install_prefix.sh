#!/bin/sh
# A prefix install is self-contained: `make install DESTDIR=STAGE` of this build tree writes
# nothing outside STAGE/PREFIX (the UCT component goes to PREFIX/lib/ucx, not into the UCX
# installation's module directory, unless configured with --with-ucx-moduledir), the
# installed env.sh preloads the installed component, and a program built with the installed
# pkg-config file runs against the installed library.
set -e
b=${abs_top_builddir:?run from make check}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# The installation directories as configure wrote them (${prefix}-relative, shell syntax).
for v in prefix exec_prefix libdir ucxmoduledir; do
  eval "$v=\"$(sed -n "s/^$v = //p" "$b/Makefile")\""
done
moduledir=$ucxmoduledir
make -s -C "$b" install DESTDIR="$stage" > "$stage.log" 2>&1 || { cat "$stage.log"; rm -f "$stage.log"; exit 1; }
rm -f "$stage.log"
outside=$(cd "$stage" && find . ! -type d | sed 's#^\.##' | while read -r f; do
  case $f in "$prefix"/* | "$moduledir"/*) ;; *) echo "$f" ;; esac
done)
[ -z "$outside" ] || { echo "install_prefix: installed outside $prefix: $outside" >&2; exit 1; }
case $moduledir in
  "$prefix"/*) ;;
  *) grep -q -- '--with-ucx-moduledir' "$b/config.log" ||
       { echo "install_prefix: module directory $moduledir is outside the prefix by default" >&2; exit 1; } ;;
esac
for f in lib/libportals4.so lib/libportals.so include/portals4.h lib/pkgconfig/portals4.pc bin/ptlrun \
  include/portals4/pmi.h lib/libportals_runtime.so; do
  [ -e "$stage$prefix/$f" ] || { echo "install_prefix: $prefix/$f was not installed" >&2; exit 1; }
done
if grep -q '^S\["BUILD_UCT_TRUE"\]=""' "$b/config.status"; then
  [ -f "$stage$moduledir/libuct_portals.so.0" ] || { echo "install_prefix: no $moduledir/libuct_portals.so.0" >&2; exit 1; }
  envsh=$stage$prefix/share/portals-ucx/env.sh
  grep -q "^_portals_uct_module=\"$moduledir/libuct_portals.so\"" "$envsh" ||
    { echo "install_prefix: $envsh does not preload $moduledir/libuct_portals.so" >&2; exit 1; }
fi
# A client built the way pkg-config says, run against the staged library.
pc=$stage$prefix/lib/pkgconfig
cflags=$(PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_PATH=$pc pkg-config --cflags portals4)
libs=$(PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_PATH=$pc pkg-config --libs portals4)
cat > "$stage/client.c" <<'C'
#include <portals4.h>
int main(void) { if (PtlInit() != PTL_OK) return 1; PtlFini(); return 0; }
C
# shellcheck disable=SC2086 # flag lists
${CC:-cc} ${SANITIZE_FLAGS:-} $cflags "$stage/client.c" $libs -o "$stage/client"
LD_LIBRARY_PATH="$stage$prefix/lib" "$stage/client"
# A client of the reference implementation's runtime, built with only -I/-L of the prefix as
# GASNet's and SOS's configure --with-portals4=PREFIX do.
${CC:-cc} ${SANITIZE_FLAGS:-} -I"$stage$prefix/include" "$(dirname "$0")/pmi_client.c" -L"$stage$prefix/lib" \
  -lportals_runtime -lportals -o "$stage/pmi_client"
env -u PTLRT_SHM -u PMIX_RANK -u PMI_FD LD_LIBRARY_PATH="$stage$prefix/lib" "$stage/pmi_client" 1 none >/dev/null
echo "install_prefix: make install DESTDIR stays within $prefix (component in $moduledir)"

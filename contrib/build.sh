#!/bin/sh
# Configures and builds out of tree in _build/ (idempotent). Extra arguments go to configure.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p _build
cd _build
# The UCT component needs the installed UCX's source tree (fetched once into a cache).
ucx_src=$("$top/contrib/ucx-source.sh")
[ -f Makefile ] || "$top/configure" -q --with-ucx-src="$ucx_src" "$@"
make -j"$(nproc)" >/dev/null

#!/bin/sh
# Configures and builds out of tree in _build/ (idempotent). Extra arguments go to configure.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p _build
cd _build
[ -f Makefile ] || "$top/configure" -q "$@"
make -j"$(nproc)" >/dev/null

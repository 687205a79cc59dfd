#!/bin/sh
# Regenerates the build system (needs autoconf, automake, libtool, pkg-config).
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf -fi

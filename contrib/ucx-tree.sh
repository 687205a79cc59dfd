# Sourced by contrib/ucx-build.sh: the steps that make a UCX tree (source, patches,
# configure, build, install, gtest). Everything here is part of the tree's cache key.

# ucx_source_version SRC: the version in a UCX source directory's or tarball's configure.ac.
ucx_source_version() {
  local ac
  if [ -d "$1" ]; then
    ac=$(cat "$1/configure.ac")
  else
    ac=$(tar -xzOf "$1" --wildcards '*/configure.ac' --no-wildcards-match-slash 2>/dev/null ||
      tar -xzOf "$1" --wildcards '*/configure.ac')
  fi
  local part v=""
  for part in major minor patch; do
    v="$v.$(sed -n "s/^define(\[ucx_ver_$part\], *\([0-9]*\)).*/\1/p" <<< "$ac" | head -1)"
  done
  v=${v#.}
  [[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "ucx-tree: no UCX version in $1's configure.ac" >&2; return 1; }
  echo "$v"
}

# ucx_configure_flags: the configure flags of every tree, one per line. The features of
# Debian's UCX (multi-threading, CMA, no debug logging), minus what portals never uses
# and would only lengthen the build: verbs and rdmacm (the ib modules and their gtests),
# language bindings (Java's build wants Maven from the internet), examples.
ucx_configure_flags() {
  printf '%s\n' --disable-maintainer-mode --disable-dependency-tracking --enable-mt \
    --enable-cma --disable-logging --disable-backtrace-detail --enable-devel-headers \
    --without-verbs --without-rdmacm --without-knem --without-xpmem --without-cuda \
    --without-rocm --without-fuse3 --without-java --without-go --disable-examples
}

# ucx_prepare_tree DIR SRC PATCH...: DIR/src = SRC (a directory or a tarball) with the
# patches applied, autogen'ed; DIR/build empty.
ucx_prepare_tree() {
  local dir=$1 src=$2 p
  shift 2
  rm -rf "$dir"
  mkdir -p "$dir/build" "$dir/src"
  if [ -d "$src" ]; then
    cp -a "$src/." "$dir/src"
  else
    tar -xzf "$src" -C "$dir/src" --strip-components=1
  fi
  for p in "$@"; do
    patch -d "$dir/src" -p1 --quiet --no-backup-if-mismatch < "$p" ||
      { echo "ucx-tree: $p does not apply" >&2; return 1; }
  done
  (cd "$dir/src" && ./autogen.sh > "$dir/autogen.log" 2>&1) || { tail -20 "$dir/autogen.log"; return 1; }
}

# ucx_configure_tree DIR ARGS...: configures DIR/build.
ucx_configure_tree() {
  local dir=$1
  shift
  (cd "$dir/build" && ../src/configure "$@" > "$dir/configure.log" 2>&1) ||
    { tail -30 "$dir/configure.log"; return 1; }
}

# ucx_subdirs DIR: the top-level SUBDIRS of the configured tree, as make expands them.
ucx_subdirs() {
  make -s -C "$1/build" -f Makefile -f - ucx-print-subdirs <<< $'ucx-print-subdirs:\n\t@echo $(SUBDIRS)'
}

# ucx_make_libraries DIR: builds and installs into DIR/prefix everything but the gtest
# suite. The tree is configured with --enable-gtest so that the suite can be added later
# without configuring (and rebuilding) again; a plain `make` would build it now.
ucx_make_libraries() {
  local dir=$1 d
  : > "$dir/make.log"
  for d in $(ucx_subdirs "$dir"); do
    [ "$d" = test/gtest ] && continue
    { make -C "$dir/build/$d" -j"$(nproc)" && make -C "$dir/build/$d" install; } >> "$dir/make.log" 2>&1 ||
      { tail -40 "$dir/make.log"; return 1; }
  done
  # The top directory's own files (pkg-config files, cmake, config).
  make -C "$dir/build" install-exec-am install-data-am >> "$dir/make.log" 2>&1 || { tail -40 "$dir/make.log"; return 1; }
}

# ucx_make_gtest DIR: builds UCX's gtest suite in DIR/build/test/gtest. The tests (not the
# libraries under test, which keep UCX's -O3) are built with -Og: a third faster than -O1
# on 2 cores, and unlike -O1 it inlines uct_iface_release_desc, which UCX marks
# always_inline and test_tag.cc calls through a pointer (g++ 12: "inlining failed").
# Without -Werror: g++ 12 warns in UCX 1.13's tests (use-after-free in ucm/malloc_hook.cc).
ucx_make_gtest() {
  local dir=$1 flags="-Og -g -Wno-error"
  make -C "$dir/build/test/gtest" -j"$(nproc)" CXXFLAGS="$flags" CFLAGS="$flags" \
    > "$dir/make-gtest.log" 2>&1 || { tail -40 "$dir/make-gtest.log"; return 1; }
}

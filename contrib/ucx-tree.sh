# Sourced by contrib/ucx-gtest.sh and contrib/build-ucx-native.sh: a UCX tree from the
# source package of the installed version, patched, configured like the installed UCX.

# ucx_prepare_tree DIR SRC PATCH...: DIR/src = SRC with the patches applied, autogen'ed.
ucx_prepare_tree() {
  local dir=$1 src=$2 p
  shift 2
  rm -rf "$dir"
  mkdir -p "$dir/build"
  cp -a "$src" "$dir/src"
  for p in "$@"; do
    patch -d "$dir/src" -p1 --quiet < "$p"
  done
  (cd "$dir/src" && ./autogen.sh > "$dir/autogen.log" 2>&1) || { tail -20 "$dir/autogen.log"; return 1; }
}

# ucx_configure_tree DIR ARGS...: configures DIR/build with the installed UCX's feature
# flags (the struct layouts the component is built against; its directory flags are
# replaced by ARGS) and no language bindings (Java's build wants Maven from the internet).
ucx_configure_tree() {
  local dir=$1 f flags=()
  shift
  set -f
  for f in $(ucx_info -v | sed -n 's/^# Configured with: //p'); do
    case $f in
      --prefix=* | --libdir=* | --includedir=* | --mandir=* | --infodir=* | --sysconfdir=* | \
        --localstatedir=* | --runstatedir=*) ;;
      *) flags+=("$f") ;;
    esac
  done
  set +f
  (cd "$dir/build" && ../src/configure "${flags[@]}" "$@" --without-java --without-go > "$dir/configure.log" 2>&1) ||
    { tail -30 "$dir/configure.log"; return 1; }
}

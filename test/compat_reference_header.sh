#!/bin/sh
# A program written against the reference portals4.h compiles against ours unchanged
# (C99, -Werror), links with -lportals as well as -lportals4, and runs.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
b=${abs_top_builddir:-$top}
src="$top/test/compat/reference_client.c"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ln -s "$b/.libs/libportals4.so" "$out/libportals.so"
cc="${CC:-cc} ${SANITIZE_FLAGS:-}"
$cc -std=c99 -Wall -Wextra -Werror -pedantic -I"$top/include" "$src" -L"$out" -lportals -o "$out/client"
$cc -std=c99 -Wall -Wextra -Werror -DPTL_STRICT_4_3 -I"$top/include" "$src" -L"$b/.libs" -lportals4 -o "$out/client_old"
# The names 4.3 removed stay out under PTL_STRICT_4_3.
printf '#include <portals4.h>\nint x = PTL_INTERRUPTED;\n' > "$out/strict.c"
if $cc -std=c99 -DPTL_STRICT_4_3 -I"$top/include" -c "$out/strict.c" -o "$out/strict.o" 2>/dev/null; then
  echo "compat_reference_header: PTL_INTERRUPTED is defined under PTL_STRICT_4_3" >&2
  exit 1
fi
LD_LIBRARY_PATH="$out:$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/client"
LD_LIBRARY_PATH="$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/client_old"

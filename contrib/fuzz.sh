#!/bin/sh
# Builds the libFuzzer target for the tcp wire's input path (test/fuzz/wire_fuzz.cc: frame
# parser + engine target side, with AddressSanitizer and UBSan) with Debian's clang into
# _build-fuzz/, seeds a corpus with valid frames, and fuzzes for PTL_FUZZ_SECONDS (default
# 60). Exits non-zero on a finding (crash, sanitizer report, leak, timeout); the reproducer
# is left in _build-fuzz/ (run: _build-fuzz/wire_fuzz <file>).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out="$top/_build-fuzz"
mkdir -p "$out/corpus"
cd "$top"
srcs=$(sed -n '/^libportals4_la_SOURCES/,/^[^	]/p' Makefile.am | tr ' \\' '\n\n' | grep '\.cc$' | grep -v '/verbs/')  # the verbs wire is not fuzzed here (built without it)
# shellcheck disable=SC2086
clang++ -std=gnu++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -o "$out/wire_fuzz" test/fuzz/wire_fuzz.cc $srcs -lhwloc -lrt -pthread
python3 - "$out/corpus" <<'PY'
import struct, sys, os
d = sys.argv[1]
def header(op, pt, bits=0, length=8, ack=0, flags=0, aop=0, atype=0, operand=0, off=0, opid=1):
    # proto::Header (src/ptl/engine/protocol.h), 72 bytes; ni_index 2 = matching physical
    return struct.pack('<8B4I6Q', op, 2, ack, flags, aop, atype, 0, 0, pt, os.getuid(),
                       0xffffffff, operand, bits, 0, off, length, 0, opid)
def frame(h, payload=b''):
    return struct.pack('<HHIQ', len(h), 0, 0, len(payload)) + h + payload
seeds = {
  'put': frame(header(1, 0, length=8), b'A' * 8),
  'put_ack_overflow': frame(header(1, 1, length=40, ack=1), b'B' * 40),
  'get': frame(header(2, 0, length=16)),
  'atomic_sum': frame(header(3, 0, length=8, aop=3, atype=8), b'\x01' + b'\0' * 7),
  'fetch_cswap': frame(header(5, 0, length=8, aop=15, atype=8, operand=8), b'\0' * 16),
  'ack_reply': frame(header(6, 0)) + frame(header(7, 0, length=4), b'xyzw'),
  'use_once_no_truncate': frame(header(1, 0, bits=7, length=16), b'C' * 16),
  'flowctrl': frame(header(1, 3, bits=9, length=4), b'D' * 4),
}
for name, data in seeds.items():
    with open(os.path.join(d, name), 'wb') as f:
        f.write(b'\x05' + data)  # first byte: how the stream is cut into reads
PY
secs=${PTL_FUZZ_SECONDS:-60}
echo "== fuzzing the tcp wire input path for ${secs}s"
cd "$out"
rm -f crash-* leak-* timeout-* oom-*
ASAN_OPTIONS=detect_leaks=1 ./wire_fuzz -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 corpus 2>&1 |
  grep -E "^#[0-9]+.*(DONE|pulse)|stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY|Test unit written|^harness:|CHECK failed" || true
# libFuzzer writes crash-*/leak-*/timeout-* files for a finding.
found=""
for f in crash-* leak-* timeout-* oom-*; do [ -e "$f" ] && found="$found $f"; done
if [ -n "$found" ]; then
  echo "fuzz: findings in $out:$found" >&2
  exit 1
fi
echo "fuzz: no findings"

#!/bin/sh
# make check under ASan+UBSan, and the unit tests (they include the threaded ones) plus the
# multi-process suite over the tcp wire (progress and watcher threads) under TSan, each in
# its own out-of-tree build directory. Over shm only the polling test runs under TSan (idle
# polls without the lock beside the progress thread): in the others a rank frees a buffer its
# progress thread served to a peer by cross-memory attach, ordered only through the peer,
# which TSan cannot see (a data race report for every such buffer).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
run() {
  dir=$1; shift
  san=$1; shift
  mkdir -p "$top/$dir"
  cd "$top/$dir"
  [ -f Makefile ] || "$top/configure" -q --enable-sanitizers="$san" CC=gcc CXX=g++
  make -j"$(nproc)" >/dev/null
  "$@"
  cd "$top"
}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS=suppressions=$top/contrib/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== ASan+UBSan: make check"
run _build-asan address,undefined sh -c 'make -j"$(nproc)" check || { "$0"/contrib/failed-test-logs.sh .; exit 1; }' "$top"
echo "== TSan: unit tests, mp_tests over tcp (also waking through the wake socket), the polling test over shm"
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
run _build-tsan thread sh -c 'make -j"$(nproc)" test/unit_tests test/mp_tests ptlrun >/dev/null && ./test/unit_tests --gtest_brief=1 &&
  ./ptlrun -n 3 --timeout 300 ./test/mp_tests --gtest_filter=Job.PolledEq* --gtest_brief=1 &&
  PTL_WIRE=tcp ./ptlrun -n 2 --timeout 300 ./test/mp_tests --gtest_filter=-Job.EarlyExit* --gtest_brief=1 &&
  PTL_WAKE=socket PTL_WAIT_SPIN_US=0 PTL_WIRE=tcp ./ptlrun -n 2 --timeout 300 ./test/mp_tests --gtest_filter=-Job.EarlyExit* --gtest_brief=1'

#!/bin/sh
# Runs one ucx_perftest measurement between two processes: a server in the background and a
# client connecting to it. Arguments go to both sides (e.g. -t am_lat -x portals -d lo).
#   PERFTEST_PORT           the port (default: a free one on this host)
#   PERFTEST_ADDR           where the client connects (default 127.0.0.1)
#   PERFTEST_SERVER_PREFIX  command words run before the server (e.g. "ip netns exec h0")
#   PERFTEST_CLIENT_PREFIX  the same for the client
#   PERFTEST_SERVER_ARGS    arguments for the server only (e.g. its device: "-d rxe0:1")
#   PERFTEST_CLIENT_ARGS    the same for the client
#   PERFTEST_SERVER_LOG     a file that keeps the server's output (default: shown only if it fails)
# Prints the client's output; exits non-zero if either side fails or runs past
# PERFTEST_TIMEOUT seconds (default 120).
set -e
port=${PERFTEST_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
addr=${PERFTEST_ADDR:-127.0.0.1}
log=${PERFTEST_SERVER_LOG:-$(mktemp)}
# shellcheck disable=SC2086 # the prefixes are lists of words
${PERFTEST_SERVER_PREFIX:-} timeout "${PERFTEST_TIMEOUT:-120}" ucx_perftest -p "$port" "$@" ${PERFTEST_SERVER_ARGS:-} >"$log" 2>&1 &
server=$!
# The server listens once it has set up; retry the connection briefly instead of sleeping.
tries=0
# shellcheck disable=SC2086
until ${PERFTEST_CLIENT_PREFIX:-} timeout "${PERFTEST_TIMEOUT:-120}" ucx_perftest "$addr" -p "$port" "$@" ${PERFTEST_CLIENT_ARGS:-}; do
  tries=$((tries + 1))
  if [ $tries -ge 50 ] || ! kill -0 $server 2>/dev/null; then
    echo "perftest-pair: client failed; server said:" >&2
    cat "$log" >&2
    kill $server 2>/dev/null || true
    [ -n "${PERFTEST_SERVER_LOG:-}" ] || rm -f "$log"
    exit 1
  fi
  sleep 0.1
done
status=0
wait $server || status=$?
[ $status -eq 0 ] || { echo "perftest-pair: server failed ($status):" >&2; cat "$log" >&2; }
[ -n "${PERFTEST_SERVER_LOG:-}" ] || rm -f "$log"
exit $status

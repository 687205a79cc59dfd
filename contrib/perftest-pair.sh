#!/bin/sh
# Runs one ucx_perftest measurement between two processes on this host: a server in the
# background and a client connecting to it over 127.0.0.1. Arguments go to both sides
# (e.g. -t am_lat -x portals -d lo). PERFTEST_PORT picks the port (default: a free one).
# Prints the client's output; exits non-zero if either side fails or runs past 120 s.
set -e
port=${PERFTEST_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
log=$(mktemp)
timeout 120 ucx_perftest -p "$port" "$@" >"$log" 2>&1 &
server=$!
# The server listens once it has set up; retry the connection briefly instead of sleeping.
tries=0
until timeout 120 ucx_perftest 127.0.0.1 -p "$port" "$@"; do
  tries=$((tries + 1))
  if [ $tries -ge 50 ] || ! kill -0 $server 2>/dev/null; then
    echo "perftest-pair: client failed; server said:" >&2
    cat "$log" >&2
    kill $server 2>/dev/null || true
    rm -f "$log"
    exit 1
  fi
  sleep 0.1
done
status=0
wait $server || status=$?
[ $status -eq 0 ] || { echo "perftest-pair: server failed ($status):" >&2; cat "$log" >&2; }
rm -f "$log"
exit $status

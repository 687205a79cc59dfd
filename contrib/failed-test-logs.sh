#!/bin/sh
# After a failed `make check` in build tree $1: what each failed test said. CI keeps only the
# end of its output, where automake prints the summary and not the reason.
dir=${1:?usage: failed-test-logs.sh BUILD_DIR}
for trs in $(find "$dir" -name '*.trs' 2>/dev/null); do
  grep -q '^:test-result: \(FAIL\|ERROR\)' "$trs" || continue
  log=${trs%.trs}.log
  echo "==== $log (failure lines, then its end)"
  grep -n -A8 -E 'Failure|FAILED|ERROR: |Sanitizer|runtime error|timed out|Aborted' "$log" | head -120
  echo "---- end of $log"
  tail -n 25 "$log"
done

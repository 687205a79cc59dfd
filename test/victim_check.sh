# Sourced by the peer-failure scripts (run_peer_failure.sh, run_bulk_failure.sh): whether a
# two-rank job ended as a killed peer's should - ptlrun's status 137 (128 + SIGKILL), rank 0
# killed by its own hand, rank 1 clean and saying it noticed.
#   victim_died_alone PTLRUN_STATUS LOG
victim_died_alone() {
  [ "$1" -eq 137 ] && grep -q "rank 0 exited with status 137" "$2" && ! grep -q "rank 1 exited" "$2" &&
    grep -q "peer failure noticed" "$2"
}

// What the two peer-failure programs (peer_failure_test.cc, ucp_peer_failure_test.cc) share:
// the time bound, the clock, and how the victim dies. gtest-free.
#pragma once

#include <signal.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

namespace ptltest {

// Killed peers are noticed at once (reset connection, vanished process) and their operations
// failed at the next liveness check (PTL_LIVENESS_MS, 200 ms); allow for a loaded machine.
// A silent peer (PTL_TEST_CUT_LINK) takes PTL_TCP_TIMEOUT_MS: the script raises the bound.
inline double failure_bound_seconds() {
    const char *b = std::getenv("PTL_TEST_FAILURE_BOUND_S");
    return b ? std::atof(b) : 5.0;
}

inline double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// A host that vanishes says nothing: with its link cut first (PTL_TEST_CUT_LINK), not even
// the kernel's resets reach the survivor, which must then rely on PTL_TCP_TIMEOUT_MS.
[[noreturn]] inline void die_as_victim() {
    std::fflush(stdout);
    if (std::getenv("PTL_TEST_CUT_LINK") && std::system("ip link set eth0 down") != 0)
        std::fprintf(stderr, "victim: cannot cut the link\n");
    raise(SIGKILL);
    std::abort();  // not reached
}

}  // namespace ptltest

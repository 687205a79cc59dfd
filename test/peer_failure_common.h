// What the failure programs (peer_failure_test.cc, ucp_peer_failure_test.cc, and the verbs
// wire's bulk_failure_test.cc, port_failure_test.cc) share: the time bound, the clock, how the
// victim dies, reading the rdma tool. gtest-free.
#pragma once

#include <signal.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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

// The word after `key` in what `command` prints (iproute2's rdma tool: "... netdev eth1 ...",
// "... sent_pkts 1234 ..."); empty when there is none.
inline std::string word_after(const std::string &command, const char *key) {
    FILE *p = popen(command.c_str(), "r");
    if (!p) return {};
    char word[64];
    std::string found;
    bool next = false;
    while (std::fscanf(p, "%63s", word) == 1) {
        if (next) {
            found = word;
            break;
        }
        next = std::strcmp(word, key) == 0;
    }
    pclose(p);
    return found;
}

}  // namespace ptltest

// The one clock the engine, the wires and the runtime time things with.
#pragma once

#include <time.h>

#include <cstdint>

namespace ptl {

inline uint64_t monotonic_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace ptl

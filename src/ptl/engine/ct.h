// Counting event (§3.14): success and failure counts, read without the engine lock
// (PtlCTGet is "a pair of loads", Impl. Note 14), plus the triggered operations waiting on
// this CT, ordered by threshold and, for equal thresholds, by posting order (TR4-TR6).
#pragma once

#include <portals4.h>

#include <atomic>
#include <cstdint>
#include <map>

#include "triggered.h"

namespace ptl {

class Ni;

struct Ct {
    Ni *ni = nullptr;
    uint32_t handle = 0;
    std::atomic<uint64_t> success{0};
    std::atomic<uint64_t> failure{0};
    std::multimap<uint64_t, TrigOp> triggered;
    uint32_t refs = 0;  // blocked waiters still inside (PtlCTFree waits for them)

    ptl_ct_event_t value() const {
        return {success.load(std::memory_order_acquire), failure.load(std::memory_order_acquire)};
    }
};

}  // namespace ptl

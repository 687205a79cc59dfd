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
    // What peers counted without us (direct_exports.h: a counter of the export table, success
    // and failure), added to the local counts; null while no exported entry counts here. Set
    // under the engine lock, read by waiters without it.
    std::atomic<std::atomic<uint64_t> *> remote{nullptr};
    int32_t remote_slot = -1;
    // What peers on other hosts counted by RDMA fetch-and-add (remote_exports.h): one word of
    // the engine's registered counters, successes only; null while none counts here.
    std::atomic<std::atomic<uint64_t> *> nic{nullptr};
    int32_t nic_slot = -1;
    uint64_t nic_seen = 0;  // its value when the engine last told waiters and triggers
    std::multimap<uint64_t, TrigOp> triggered;
    uint32_t refs = 0;  // blocked waiters still inside (PtlCTFree waits for them)

    uint64_t nic_count() const {
        const std::atomic<uint64_t> *k = nic.load(std::memory_order_acquire);
        return k ? k->load(std::memory_order_acquire) : 0;
    }
    uint64_t successes() const {
        const std::atomic<uint64_t> *r = remote.load(std::memory_order_acquire);
        return success.load(std::memory_order_acquire) + (r ? r[0].load(std::memory_order_acquire) : 0) +
               nic_count();
    }
    ptl_ct_event_t value() const {
        const std::atomic<uint64_t> *r = remote.load(std::memory_order_acquire);
        return {success.load(std::memory_order_acquire) + (r ? r[0].load(std::memory_order_acquire) : 0) +
                    nic_count(),
                failure.load(std::memory_order_acquire) + (r ? r[1].load(std::memory_order_acquire) : 0)};
    }
    // PtlCTSet: the local counts take what makes the sum `v` (modulo 2^64, C9); a peer's count
    // that lands meanwhile adds to it, as it would after the set.
    void set(ptl_ct_event_t v) {
        const std::atomic<uint64_t> *r = remote.load(std::memory_order_acquire);
        success.store(v.success - (r ? r[0].load(std::memory_order_acquire) : 0) - nic_count(),
                      std::memory_order_release);
        failure.store(v.failure - (r ? r[1].load(std::memory_order_acquire) : 0), std::memory_order_release);
    }
};

}  // namespace ptl

// The engine's lock. Uncontended, lock is one locked instruction and unlock a plain store
// (pthread's pair cost ~70 instructions and two locked ones: a third of a direct put's time).
// A thread that cannot get it spins briefly, then counts itself a waiter and sleeps on a
// futex. Unlock stores 0 and then looks for waiters; to see that look, a would-be sleeper
// first makes every thread of the process fence (asymmetric_fence::heavy_in_process, one
// membarrier(2)): either the unlocker's store is then visible, or its look comes after the
// waiter counted itself. Without that membarrier command, unlock is an exchange instead.
// Sleeps are bounded (1 ms) all the same, so a lost wake-up costs time, never a hang.
// Meets Lockable, for std::unique_lock and std::lock_guard.
#pragma once

#include <atomic>
#include <cstdint>

#include "asymmetric_fence.h"

namespace ptl {

class FutexMutex {
public:
    void lock() {
        uint32_t c = 0;
        if (!held_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
            [[unlikely]]
            lock_contended();
    }
    bool try_lock() {
        uint32_t c = 0;
        return held_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed);
    }
    void unlock() {
        if (asymmetric_fence::in_process_available()) [[likely]] {
            held_.store(0, std::memory_order_release);
            asymmetric_fence::light();
        } else {
            held_.exchange(0, std::memory_order_seq_cst);
        }
        if (waiters_.load(std::memory_order_relaxed)) [[unlikely]]
            wake_one();
    }

private:
    void lock_contended();
    void wake_one();
    std::atomic<uint32_t> held_{0};
    std::atomic<uint32_t> waiters_{0};
};

}  // namespace ptl

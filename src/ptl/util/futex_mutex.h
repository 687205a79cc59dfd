// The engine's lock. Uncontended, lock and unlock are one locked instruction each, inline
// (pthread's pair costs ~55 instructions through two calls: a tenth of a put's). The word is
// 0 free, 1 held, 2 held with sleepers possible (the classic three-state futex mutex): a
// thread that cannot get it spins briefly, then marks the word 2 and sleeps on it; an unlock
// that finds 2 wakes one sleeper, which takes the lock as 2 again (other sleepers may remain).
// Meets Lockable, for std::unique_lock and std::lock_guard; TSan sees its acquire/release.
#pragma once

#include <atomic>
#include <cstdint>

namespace ptl {

class FutexMutex {
public:
    void lock() {
        uint32_t c = 0;
        if (!word_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
            [[unlikely]]
            lock_contended();
    }
    bool try_lock() {
        uint32_t c = 0;
        return word_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed);
    }
    void unlock() {
        if (word_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
            wake_one();
    }

private:
    void lock_contended();
    void wake_one();
    std::atomic<uint32_t> word_{0};
};

}  // namespace ptl

// The engine's lock: a mutex whose uncontended lock and unlock are one locked instruction
// each, inline (pthread's took ~70 instructions a pair: a third of a direct put's cost). When
// contended it spins briefly, then sleeps on a futex (Drepper's three-state mutex: 0 free,
// 1 held, 2 held with sleepers). Meets Lockable, for std::unique_lock and std::lock_guard.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace ptl {

class FutexMutex {
public:
    void lock() {
        uint32_t c = 0;
        if (state_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
            [[likely]]
            return;
        lock_contended(c);
    }
    bool try_lock() {
        uint32_t c = 0;
        return state_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed);
    }
    void unlock() {
        if (state_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
            futex(FUTEX_WAKE_PRIVATE, 1);
    }

private:
    static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield");
#endif
    }
    void lock_contended(uint32_t c) {
        for (int spin = 0; spin < 100 && c == 1; ++spin) {
            cpu_relax();
            c = 0;
            if (state_.compare_exchange_weak(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
                return;
        }
        // From here the lock is taken as "held with sleepers": an unlock then wakes one.
        while (state_.exchange(2, std::memory_order_acquire) != 0) futex(FUTEX_WAIT_PRIVATE, 2);
    }
    void futex(int op, uint32_t val) {
        syscall(SYS_futex, reinterpret_cast<uint32_t *>(&state_), op, val, nullptr, nullptr, 0);
    }
    std::atomic<uint32_t> state_{0};
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

}  // namespace ptl

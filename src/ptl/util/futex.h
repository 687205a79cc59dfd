// The futex calls the engine's waits and wakes are made of (private: one process's threads).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace ptl {

// Sleeps while *w == v, at most timeout_us (forever when negative).
inline void futex_wait(std::atomic<uint32_t> *w, uint32_t v, long timeout_us) {
    struct timespec ts {
        timeout_us / 1000000, (timeout_us % 1000000) * 1000
    };
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, timeout_us >= 0 ? &ts : nullptr, nullptr, 0);
}

inline void futex_wake_all(std::atomic<uint32_t> *w) {
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace ptl

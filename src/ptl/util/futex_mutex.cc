#include "futex_mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace ptl {

namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

long futex(std::atomic<uint32_t> *word, int op, uint32_t val, const struct timespec *timeout) {
    return syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), op, val, timeout, nullptr, 0);
}

}  // namespace

void FutexMutex::lock_contended() {
    for (int spin = 0; spin < 100; ++spin) {
        cpu_relax();
        if (held_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
    }
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    const struct timespec bound { 0, 1000000 };
    for (;;) {
        asymmetric_fence::heavy_in_process();
        if (try_lock()) break;
        futex(&held_, FUTEX_WAIT_PRIVATE, 1, &bound);
    }
    waiters_.fetch_sub(1, std::memory_order_relaxed);
}

void FutexMutex::wake_one() {
    futex(&held_, FUTEX_WAKE_PRIVATE, 1, nullptr);
}

}  // namespace ptl

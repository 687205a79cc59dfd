#include "futex_mutex.h"

#include "futex.h"

namespace ptl {

void FutexMutex::lock_contended() {
    // The holder usually leaves within a message's handling: spin that long before sleeping.
    for (int spin = 0; spin < 100; ++spin) {
        cpu_relax();
        if (word_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
    }
    // From here the word says 2 whenever we hold it or sleep, so no unlock misses us.
    while (word_.exchange(2, std::memory_order_acquire) != 0)
        syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word_), FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
}

void FutexMutex::wake_one() {
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace ptl

#include "arriving.h"

#include <sched.h>

#include "../util/clock.h"
#include "../util/futex.h"

namespace ptl {

namespace {
// How long a reader waits for a sender that lives on but writes no more (a debugger stopped it,
// or a local process wrote a head and no payload): both must pass, so that a job suspended and
// resumed as a whole does not count its suspension.
constexpr uint64_t kGiveUpNs = 2'000'000'000;
constexpr unsigned kGiveUpYields = 100'000;
}  // namespace

bool wait_arriving(const InMessage &m, size_t bytes) {
    // The sender is inside one copy of at most the ring's largest message: it finishes in
    // microseconds unless it lost its CPU, when yielding lets it run (2 cores, 2 ranks and their
    // progress threads).
    uint64_t since = 0;
    for (unsigned i = 0;; ++i) {
        if (m.arriving->load(std::memory_order_acquire) >= bytes) return true;
        if (i < 4096) {
            cpu_relax();
            continue;
        }
        sched_yield();
        if (i % 1024 != 0) continue;
        if (m.via && m.via->sender_gone(m.from)) return false;
        const uint64_t now = monotonic_ns();
        if (!since) since = now;
        if (now - since > kGiveUpNs && i > kGiveUpYields) return false;
    }
}

}  // namespace ptl

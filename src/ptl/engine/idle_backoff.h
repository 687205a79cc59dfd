// Polling without a core of one's own. A process that spins in PtlEQGet/PtlEQPoll/PtlCTGet or
// in a wait's spin phase while more threads are runnable than there are CPUs takes the CPU
// from the very peer it waits for: three ranks on two cores made a barrier 400 times slower.
// After a streak of empty polls, and only while the host is oversubscribed (more runnable
// tasks than CPUs this process may run on, per /proc/loadavg, rechecked every few ms), each
// further empty poll gives the CPU away with sched_yield. PTL_WAIT_YIELD=auto|always|never.
#pragma once

#include <atomic>
#include <cstdint>

#include "config.h"

namespace ptl {

class IdleBackoff {
public:
    IdleBackoff();
    void set_mode(YieldMode mode) { mode_.store(mode, std::memory_order_relaxed); }

    // A poll found nothing: yields when the streak is long and the host oversubscribed. Call
    // without the engine lock held.
    void empty_poll();
    // A poll found work: the streak ends.
    void reset() { streak_.store(0, std::memory_order_relaxed); }
    // For a spin loop: true when it should yield instead of spinning.
    bool should_yield();
    uint64_t yields() const { return yields_.load(std::memory_order_relaxed); }

private:
    bool oversubscribed(uint64_t now_ns);

    static constexpr uint32_t kStreak = 32;          // empty polls before yielding is considered
    static constexpr uint64_t kRecheckNs = 4000000;  // how long a load reading is trusted

    std::atomic<YieldMode> mode_{YieldMode::Auto};
    const int cpus_;
    std::atomic<uint32_t> streak_{0};
    std::atomic<uint64_t> checked_ns_{0};
    std::atomic<bool> over_{false};
    std::atomic<uint64_t> yields_{0};
};

}  // namespace ptl

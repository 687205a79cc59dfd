// Polling without a core of one's own. A process that spins in PtlEQGet/PtlEQPoll/PtlCTGet or
// in a wait's spin phase while more processes of its job share the host than it may use CPUs
// takes the CPU from the very peer it waits for: three ranks on two cores made a barrier 400
// times slower. After a streak of empty polls, and only while oversubscribed so, each further
// empty poll gives the CPU away with sched_yield. The processes on this host are what the
// launcher says (ptlrun, Open MPI, Hydra) or, without that, this process and the peers it has
// talked to through shared memory. PTL_WAIT_YIELD=auto|always|never.
#pragma once

#include <atomic>
#include <cstdint>

#include "config.h"

namespace ptl {

class IdleBackoff {
public:
    IdleBackoff();
    void set_mode(YieldMode mode) { mode_.store(mode, std::memory_order_relaxed); }
    // Processes of this job known to share the host, this one included (at least the
    // launcher's count, read once here).
    void set_local_processes(uint32_t n);

    // A poll found nothing: yields when the streak is long and the host oversubscribed. Call
    // without the engine lock held.
    void empty_poll();
    // A poll found work: the streak ends.
    void reset() { streak_.store(0, std::memory_order_relaxed); }
    // For a spin loop: true when it should yield instead of spinning.
    bool should_yield() const;

private:
    static constexpr uint32_t kStreak = 32;  // empty polls before yielding is considered

    std::atomic<YieldMode> mode_{YieldMode::Auto};
    const uint32_t cpus_;
    const uint32_t launcher_local_;
    std::atomic<bool> oversubscribed_{false};
    std::atomic<uint32_t> streak_{0};
};

}  // namespace ptl

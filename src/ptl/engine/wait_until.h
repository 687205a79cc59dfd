// Engine::wait_until, the blocking calls' loop (eq.cc, ct.cc): poll a while, then sleep.
#pragma once

#include <sched.h>

#include <algorithm>
#include <type_traits>

#include "../util/clock.h"
#include "../util/futex.h"
#include "../wire/shm/shm_wire.h"
#include "engine.h"
#include "progress_thread.h"

namespace ptl {

// Runs `ready` (under the lock) until it returns >= 0, the timeout passes (-2) or PtlAbort
// (PTL_ABORTED). Callers poll for a short while first, then sleep.
template <typename Ready, typename Peek>
int Engine::wait_until(Lock &lk, ptl_time_t timeout_ms, Ready &&ready, Peek &&peek) {
    const bool forever = timeout_ms == PTL_TIME_FOREVER;
    const uint64_t start = monotonic_ns();
    const uint64_t deadline = forever ? UINT64_MAX : start + uint64_t(timeout_ms) * 1000000ull;
    const uint64_t spin_end = start + uint64_t(cfg_.wait_spin_us) * 1000ull;
    bool polling = false;
    bool slept_on_wires = false;
    long nic_poll_us = 20;
    // A caller that returns is likely to poll again soon (a ping-pong loop): the progress
    // thread stays parked and notices the polling has stopped by itself. Only a caller about
    // to sleep needs it awake now.
    auto stop_polling = [&](bool going_to_sleep = false) {
        if (slept_on_wires) progress_thread_->resume_if_long_parked();
        if (polling) {
            polling = false;
            // A caller about to sleep hands progress back at once.
            last_poll_ns_.store(going_to_sleep ? 0 : monotonic_ns(), std::memory_order_relaxed);
            if (!going_to_sleep)
                app_short_polls_.store(kShortPollsAll, std::memory_order_relaxed);  // it spun
            if (active_pollers_.fetch_sub(1) == 1 && going_to_sleep && progress_thread_)
                progress_thread_->poke();
        }
    };
    for (;;) {
        if (aborted()) {
            stop_polling();
            return PTL_ABORTED;
        }
        const uint64_t t = monotonic_ns();
        progress_locked(t);
        const int r = ready();
        if (r >= 0) {
            stop_polling();
            return r;
        }
        if (t >= deadline) {
            stop_polling();
            return -2;
        }
        if (t < spin_end) {
            if (!polling) {
                polling = true;
                active_pollers_.fetch_add(1);
            }
            lk.unlock();
            if (backoff_.should_yield()) {
                sched_yield();
            } else if constexpr (std::is_same_v<std::decay_t<Peek>, NothingToPeek>) {
                cpu_relax();
            } else {
                // A count peers make directly needs no progress to be seen: watch it (and the
                // ring, for what does) instead of polling the wires, which is what would
                // delay noticing it.
                for (int k = 0; k < 256 && !peek() && !shm_->may_have_incoming(); ++k) cpu_relax();
            }
            lk.lock();
            continue;
        }
        // Sleepers poll the wires' descriptors (PTL_WAKE; a verbs wire's default): with a
        // progress thread the caller sleeps on them itself, so a completion wakes it directly
        // (not the progress thread, which would then wake it). It stays counted as polling,
        // so the progress thread stays parked, as long as it would sleep (its timers are the
        // waiter's now), until the waiter leaves and resumes it.
        const bool on_wires = cfg_.progress_thread && shm_->sleeps_on_descriptors();
        if (!on_wires) {
            stop_polling(true);
        } else if (!polling) {  // no spin before: the progress thread must still step aside
            polling = true;
            active_pollers_.fetch_add(1);
        }
        const uint32_t seq = event_seq_.load(std::memory_order_seq_cst);
        if (on_wires) wire_waiters_.fetch_add(1, std::memory_order_seq_cst);
        sleepers_armed_.store(true, std::memory_order_seq_cst);
        lk.unlock();
        long us = forever ? 100000 : long(std::min<uint64_t>((deadline - t) / 1000, 100000));
        // Counts peers add by RDMA wake nobody: a waiter looks again soon after its spin, then
        // less and less often, every millisecond at most (a ping-pong whose round trip just
        // outlasts the spin waited up to a millisecond more for each).
        if (!nic_cts_.empty()) {
            us = std::min(us, nic_poll_us);
            nic_poll_us = std::min(nic_poll_us * 2, 1000L);
        }
        if (us < 1) us = 1;
        // An event posted after `seq` was read (wake_sleepers wakes the wires' sleepers too).
        const auto posted = [this, seq] { return event_seq_.load(std::memory_order_seq_cst) != seq; };
        if (on_wires) {
            sleep_for_traffic(us, posted);
            wire_waiters_.fetch_sub(1, std::memory_order_seq_cst);
            slept_on_wires = true;
        } else if (cfg_.progress_thread) {
            futex_wait(&event_seq_, seq, us);
        } else {
            sleep_for_traffic(std::min(us, 1000L), posted);
        }
        lk.lock();
    }
}

}  // namespace ptl

// Progress: the wires polled, held messages replayed, counts peers made taken in, triggers
// fired; the application's polls, and the lock-free answer to one that can find nothing.
#include <algorithm>

#include "../util/clock.h"
#include "../wire/loopback/loopback_wire.h"
#include "../wire/shm/shm_wire.h"
#include "../wire/tcp/tcp_wire.h"
#ifdef PTL_HAVE_VERBS
#include "../wire/verbs/verbs_wire.h"
#endif
#include "engine.h"

namespace ptl {

// An operation whose target is this process needs no other thread (issue 32): a caller that
// sleeps or spins on its own memory right after the call must find it done, also when every
// CPU is busy and the progress thread is not scheduled for milliseconds. The loopback queue
// is delivered in order, so what the process queued to itself before (a progress had not run
// yet) lands first; responses and the triggers deliveries reach are completed in the same
// call. Bounded: a chain of triggered operations that keeps feeding itself is left to progress.
void Engine::complete_own_operations() {
    constexpr int kMaxRounds = 64;
    // A message held here starts its grace period now, not at the coarse clock's last reading
    // (an API call is not a poll that refreshes it).
    coarse_now_ns_ = std::max(coarse_now_ns_, monotonic_ns());
    coarse_calls_ = 0;
    completing_own_ = true;
    for (int round = 0; round < kMaxRounds && loop_->pending(); ++round) {
        loop_->progress(deliver_);
        run_triggers();
    }
    completing_own_ = false;
    if (loop_->pending()) shm_->wake();
}

// ---------------------------------------------------------------------------------------
// Progress and waiting

int Engine::progress() {
    Lock lk(mu_);
    return progress_locked();
}

namespace {

// app_progress_locked samples the clock on one call in kAppSampleCalls; the call before notes
// when it returned.
constexpr uint32_t kAppSampleCalls = 16;

}  // namespace

uint64_t Engine::app_entry_stamp() const {
    return (app_calls_.load(std::memory_order_relaxed) + 1) % kAppSampleCalls == 0 ? monotonic_ns() : 0;
}

int Engine::app_progress() {
    const uint64_t entered = app_entry_stamp();
    Lock lk(mu_);
    return app_progress_locked(entered);
}

// One lock for a poll and the events it produced: a UCT progress call made two round trips
// through the engine lock (and two handle checks) for what is one step to its caller.
// A poll that can find nothing takes no lock at all: its EQ was empty when this thread last
// looked, no event was posted since, the shm ring holds no message, and nothing else waits for
// a progress (quiet_). Idle polls are most of a sender's calls and all of a waiting receiver's;
// the lock, the handle lookup and the walk over the wires were ~500 instructions each. The
// sampled calls still take the lock, so the clock samples, liveness checks and rationed tcp
// accepts keep their pace.
int Engine::app_progress_take(ptl_handle_eq_t h, ptl_event_t *evs, unsigned max, unsigned *taken) {
    const uint32_t calls = app_calls_.load(std::memory_order_relaxed) + 1;
    const uint32_t turn = calls % kAppSampleCalls;
    if (turn != 0 && turn != kAppSampleCalls - 1 && evs && max && quiet_.load(std::memory_order_acquire) &&
        empty_eqs_.still_empty(h, event_seq_.load(std::memory_order_acquire)) && !shm_->may_have_incoming()) {
        app_calls_.store(calls, std::memory_order_relaxed);
        if (taken) *taken = 0;
        return PTL_EQ_EMPTY;
    }
    const uint64_t entered = turn == 0 ? monotonic_ns() : 0;
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e || !evs || max == 0) return PTL_ARG_INVALID;
    app_progress_locked(entered);
    const int rc = take_events(e, evs, max, taken);
    empty_eqs_.note(h, e->count == 0, event_seq_.load(std::memory_order_relaxed));
    return rc;
}

int Engine::app_progress_locked(uint64_t entered_ns) {
    // The progress thread stays out of the way only of an application that polls
    // continuously; one that calls in now and then (a server checking its socket every
    // millisecond) must not hold up the peers it serves. What tells them apart is the time
    // the application spends away from the engine, not the time between polls: a poll of a
    // slow machine's wires (an emulated guest's system calls) is long itself, and so are the
    // sends a streaming sender makes between its polls (a doorbell each), and counting either
    // had the progress thread compete for the CPU and the lock with an application that never
    // stopped calling in (UCT am_bw over verbs: a context switch per message). Sampled every
    // kAppSampleCalls polls (the clock costs as much as a poll): from the poll before a
    // sampled one, every API call notes when it returned (finish_call). The sampled call's
    // time away ends when it called (`entered_ns`, read before the lock), not when it got the
    // lock: a wait for the progress thread counted as time away had the thread judge the
    // application gone and compete harder (put_bw over verbs locked into that mode).
    const uint32_t calls = app_calls_.load(std::memory_order_relaxed) + 1;
    app_calls_.store(calls, std::memory_order_relaxed);
    const uint32_t turn = calls % kAppSampleCalls;
    if (turn == 0) {
        stamp_returns_ = false;
        const uint64_t t = entered_ns ? entered_ns : monotonic_ns();
        const uint64_t away = t > app_returned_ns_ ? t - app_returned_ns_ : 0;
        last_poll_ns_.store(t, std::memory_order_relaxed);
        const uint32_t share = app_short_polls_.load(std::memory_order_relaxed);
        const bool short_gap = away < uint64_t(cfg_.busy_poll_gap_us) * 1000;
        app_short_polls_.store(share - share / 8 + (short_gap ? kShortPollsAll / 8 : 0),
                               std::memory_order_relaxed);
        return progress_locked(t);
    }
    const int work = progress_locked();
    if (turn == kAppSampleCalls - 1) {
        app_returned_ns_ = monotonic_ns();
        stamp_returns_ = true;
    }
    return work;
}

uint64_t Engine::read_coarse_clock() {
    coarse_calls_ = 0;
    return coarse_now_ns_ = monotonic_ns();
}

int Engine::progress_locked(uint64_t now_ns) {
    if (!phys_open_) return 0;
    uint64_t t;
    if (now_ns) {
        // A fresh reading restarts the coarse clock's count: an application's polls, sampled
        // every kAppSampleCalls, then need no reading of their own in between (a third of
        // the clock reads of a busy poller, perf: clock_gettime 2-4% of its time).
        t = coarse_now_ns_ = std::max(coarse_now_ns_, now_ns);
        coarse_calls_ = 0;
    } else {
        t = coarse_now();
    }
    int work = 0;
    if (!held_.empty()) work += replay_held(t);
    if (exports_ && exports_->header.counted.load(std::memory_order_relaxed)) [[unlikely]]
        take_remote_counts();
    if (!nic_cts_.empty()) [[unlikely]]
        take_nic_counts();
    if (holding_published_ && held_.empty() && bulk_holds_.empty()) {
        holding_published_ = false;
        set_holding(false);
    }
    if (loop_->pending()) work += loop_->progress(deliver_);
    work += shm_->progress_with([this](const InMessage &m) { handle_message(m); });
    if (const uint64_t bad = shm_->take_malformed()) count_malformed(bad);
#ifdef PTL_HAVE_VERBS
    // While verbs carries every peer, tcp brings only setup news (a new peer's connection):
    // looked for every millisecond, not at every poll (an epoll_wait each).
    if (verbs_ && tcp_) tcp_->set_idle_poll_ns(verbs_->control_busy() ? tcp::TcpWire::kIdlePollNs : 1000000);
#endif
    if (tcp_) {
        work += tcp_->progress(tcp_deliver_, t);
        if (const uint64_t bad = tcp_->take_malformed()) count_malformed(bad);
    }
#ifdef PTL_HAVE_VERBS
    if (verbs_) {
        work += verbs_->progress(deliver_);
        if (const uint64_t bad = verbs_->take_malformed()) count_malformed(bad);
    }
#endif
    run_triggers();
    if (t - last_liveness_check_ns_ > uint64_t(cfg_.liveness_ms) * 1000000ull) {
        last_liveness_check_ns_ = t;
        check_dead_peers();
        // Counted with the next poll's malformed runs.
        if (shm_->reclaim_abandoned_run())
            PTL_TRACE(trace_.get(), "shm: a run its dead sender reserved and never wrote was skipped");
        backoff_.set_local_processes(uint32_t(shm_->peer_count() + 1));
    }
    note_quiet();
    return work;
}

void Engine::note_send_left_work() {
    // A message to ourselves, one the shm ring had no room for, a tcp connection or corked
    // data (triggers the operation fired have run already).
    if (loop_->pending() || shm_->has_backlog() || (tcp_ && !tcp_->idle()))
        quiet_.store(false, std::memory_order_release);
}

void Engine::note_quiet() {
    bool quiet = phys_open_ && held_.empty() && !loop_->pending() && !shm_->has_backlog() &&
                 changed_cts_.empty() && (!tcp_ || tcp_->idle());
#ifdef PTL_HAVE_VERBS
    quiet = quiet && !verbs_;
#endif
    quiet_.store(quiet, std::memory_order_release);
}

}  // namespace ptl

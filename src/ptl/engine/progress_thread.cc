#include "progress_thread.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <hwloc.h>

#include <algorithm>
#include <climits>
#include <ctime>

#include "../util/clock.h"
#include "../wire/loopback/loopback_wire.h"
#include "../wire/shm/shm_wire.h"
#include "engine.h"

namespace ptl {

namespace {

// PTL_PROGRESS_CPU, or else a core other than the one the initializing thread runs on
// (found with hwloc, so hyperthread siblings of the caller are avoided too), where one exists.
void place(int cpu, int caller_cpu) {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return;
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return;
    }
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (cpu >= 0) {
        hwloc_bitmap_only(set, unsigned(cpu));
    } else {
        hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_THREAD);  // what we may run on
        hwloc_obj_t pu = caller_cpu >= 0 ? hwloc_get_pu_obj_by_os_index(topo, unsigned(caller_cpu)) : nullptr;
        hwloc_obj_t core = pu ? hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu) : nullptr;
        hwloc_bitmap_t others = hwloc_bitmap_dup(set);
        if (core) hwloc_bitmap_andnot(others, others, core->cpuset);
        if (!hwloc_bitmap_iszero(others)) hwloc_bitmap_copy(set, others);
        hwloc_bitmap_free(others);
    }
    if (!hwloc_bitmap_iszero(set)) hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
}

constexpr long kParkNs = 5000000;  // 5 ms

}  // namespace

bool ProgressThread::recently_polled() {
    const uint64_t now = monotonic_ns();
    const uint64_t last_poll = engine_.last_poll_ns_.load(std::memory_order_relaxed);
    if (last_poll == 0) return false;  // handed back: a waiter is going to sleep
    // Polls are sampled (app_progress_locked), and the samples of an application that never
    // stops calling in can be far apart: a preempted lock holder (this thread, on a small
    // machine) holds up its calls for a whole time slice, and treating it as gone then made
    // this thread compete harder. Any poll this thread sees counted since its last look says
    // the application is there too.
    if (const uint32_t calls = engine_.app_calls_.load(std::memory_order_relaxed); calls != seen_calls_) {
        seen_calls_ = calls;
        seen_calls_ns_ = now;
    }
    if (now - std::max(last_poll, seen_calls_ns_) >= uint64_t(2 * kParkNs)) return false;
    // Waits poll continuously (their share is full); app_progress callers only when they call in
    // often enough to serve their peers themselves.
    return engine_.app_short_polls_.load(std::memory_order_relaxed) >= Engine::kShortPollsAll / 2;
}

ProgressThread::ProgressThread(Engine &e, int cpu)
    : engine_(e), thread_([this, cpu, caller = sched_getcpu()] { run(cpu, caller); }) {}

ProgressThread::~ProgressThread() {
    stop_.store(true);
    poke();
    if (engine_.shm_) engine_.shm_->wake();
    thread_.join();
}

void ProgressThread::poke() {
    park_word_.fetch_add(1, std::memory_order_release);
    syscall(SYS_futex, &park_word_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void ProgressThread::resume_if_long_parked() {
    if (long_parked_.load(std::memory_order_seq_cst)) poke();
}

void ProgressThread::flush_by(uint64_t due_ns) {
    const uint64_t cur = flush_due_ns_.load(std::memory_order_relaxed);
    if (cur == 0 || due_ns < cur) flush_due_ns_.store(due_ns, std::memory_order_seq_cst);
    // Pairs with wait_unless_due: it sees the deadline, or we see it waiting and wake it.
    if (waiting_.load(std::memory_order_seq_cst)) {
        poke();
        if (engine_.shm_) engine_.shm_->wake();
    }
}

template <class Wait>
void ProgressThread::wait_unless_due(Wait &&wait) {
    const uint32_t v = park_word_.load(std::memory_order_acquire);
    waiting_.store(true, std::memory_order_seq_cst);
    if (const uint64_t due = flush_due_ns_.load(std::memory_order_seq_cst)) {
        const uint64_t now = monotonic_ns();
        if (due > now) {
            struct timespec ts {
                0, long(std::min<uint64_t>(due - now, 999999999))
            };
            syscall(SYS_futex, &park_word_, FUTEX_WAIT_PRIVATE, v, &ts, nullptr, 0);
        }
    } else {
        wait(v);
    }
    waiting_.store(false, std::memory_order_relaxed);
}

void ProgressThread::run(int cpu, int caller_cpu) {
    pthread_setname_np(pthread_self(), "ptl-progress");
    place(cpu, caller_cpu);
    // An application thread is polling the rings itself: stay out of its way (on a small
    // machine every wake-up steals its CPU) and look again later, so progress resumes soon
    // after it stops polling without sleeping. Pollers that all sleep on the wires
    // (wait_until) make progress when anything arrives and wake us when they leave
    // (resume_if_long_parked): we look again only as often as when we sleep.
    //
    // A park is twice as long each time the application is still polling when we look (up to
    // PTL_PROGRESS_PARK_MAX_MS), and kParkNs again once we find work or it gone: each wake-up
    // takes a CPU from a polling application on a small machine (UCT am_lat over verbs in a
    // 2-vCPU guest: median 43 -> 38.5 us, average 56 -> 45 with 50 ms parks), and one that
    // polls on needs nothing from us.
    const long park_max_ns = std::max(kParkNs, engine_.config().park_max_ms * 1000000);
    long park_len = kParkNs;
    auto park = [this, &park_len, park_max_ns](uint32_t pollers) {
        long park_ns = park_len;
        park_len = std::min(2 * park_len, park_max_ns);
        // Read before the flag goes up: a poke that saw the flag then ends the park even if
        // it came before the wait began.
        const uint32_t v0 = park_word_.load(std::memory_order_acquire);
        if (pollers && engine_.wire_waiters_.load(std::memory_order_acquire) >= pollers) {
            long_parked_.store(true, std::memory_order_seq_cst);
            // Pairs with resume_if_long_parked: it sees the flag, or we see it gone.
            if (engine_.wire_waiters_.load(std::memory_order_seq_cst) > 0)
                park_ns = std::min<long>(engine_.config().liveness_ms, 999) * 1000000;
        }
        wait_unless_due([park_ns, v0, this](uint32_t) {
            struct timespec ts {
                0, park_ns
            };
            syscall(SYS_futex, &park_word_, FUTEX_WAIT_PRIVATE, v0, &ts, nullptr, 0);
        });
        long_parked_.store(false, std::memory_order_relaxed);
    };
    int idle = 0;
    while (!stop_.load(std::memory_order_acquire)) {
        int work;
        bool backlog, held;
        bool locked = false;
        if (flush_due_ns_.load(std::memory_order_relaxed) == 0) {
            locked = engine_.mu_.try_lock();
            // The application is inside the engine and has polled since our last look: it
            // makes progress as it goes. Park rather than queue behind it:
            // queueing made its unlock a wake-up system call and us a thread to schedule
            // beside it, and on a small machine the time that took from its polls made it
            // look gone, so we competed harder (put_bw over verbs, where an RDMA write's
            // doorbell holds the lock for a millisecond under emulation). One that calls in
            // now and then is rarely inside when we look.
            if (const uint32_t calls = engine_.app_calls_.load(std::memory_order_relaxed);
                !locked && calls != seen_calls_) {
                // Not after a park alone: a sender that only puts is inside most of the time,
                // and its backlog and incoming credits are ours to progress.
                seen_calls_ = calls;
                seen_calls_ns_ = monotonic_ns();
                park(engine_.active_pollers_.load(std::memory_order_acquire));
                continue;
            }
        }
        flush_due_ns_.store(0, std::memory_order_relaxed);  // this progress flushes what is corked
        {
            std::unique_lock<FutexMutex> g = locked
                                                 ? std::unique_lock<FutexMutex>(engine_.mu_, std::adopt_lock)
                                                 : std::unique_lock<FutexMutex>(engine_.mu_);
            work = engine_.progress_locked(monotonic_ns());
            backlog =
                (engine_.shm_ && engine_.shm_->has_backlog()) || (engine_.loop_ && engine_.loop_->pending());
            held = !engine_.held_.empty();
        }
        if (held && !work) {
            // Held messages wait for the application to drain an event queue (or for their
            // grace to end); the rings are not read meanwhile, so traffic would not wake us.
            wait_unless_due([this](uint32_t v) {
                struct timespec ts {
                    0, 200 * 1000
                };
                syscall(SYS_futex, &park_word_, FUTEX_WAIT_PRIVATE, v, &ts, nullptr, 0);
            });
            continue;
        }
        if (work || backlog) {
            idle = 0;
            park_len = kParkNs;
            if (!work) sched_yield();
            continue;
        }
        if (const uint32_t pollers = engine_.active_pollers_.load(std::memory_order_acquire);
            pollers || recently_polled()) {
            park(pollers);
            idle = 0;
            continue;
        }
        park_len = kParkNs;
        if (++idle < 16) {
            sched_yield();
            continue;
        }
        idle = 0;
        const long liveness_us = engine_.config().liveness_ms * 1000;
        wait_unless_due([this, liveness_us](uint32_t) {
            engine_.sleep_for_traffic(liveness_us,
                                      [this] { return flush_due_ns_.load(std::memory_order_seq_cst) != 0; });
        });
    }
}

}  // namespace ptl

#include "progress_thread.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include "../wire/loopback/loopback_wire.h"
#include "../wire/shm/shm_wire.h"
#include "engine.h"

namespace ptl {

namespace {

// PTL_PROGRESS_CPU, or a CPU other than the ones the caller may run on, where one exists.
void place(int cpu) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    cpu_set_t want;
    CPU_ZERO(&want);
    if (cpu >= 0) {
        CPU_SET(cpu, &want);
    } else {
        const int here = sched_getcpu();
        int count = 0;
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &allowed) && c != here) {
                CPU_SET(c, &want);
                ++count;
            }
        if (count == 0) return;
    }
    pthread_setaffinity_np(pthread_self(), sizeof want, &want);
}

constexpr long kParkNs = 1000000;  // 1 ms

}  // namespace

bool ProgressThread::recently_polled() const {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
    return now - engine_.last_poll_ns_.load(std::memory_order_relaxed) < uint64_t(2 * kParkNs);
}

ProgressThread::ProgressThread(Engine &e, int cpu) : engine_(e), thread_([this, cpu] { run(cpu); }) {}

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

void ProgressThread::run(int cpu) {
    pthread_setname_np(pthread_self(), "ptl-progress");
    place(cpu);
    int idle = 0;
    while (!stop_.load(std::memory_order_acquire)) {
        int work;
        bool backlog;
        {
            std::lock_guard<std::mutex> g(engine_.mu_);
            work = engine_.progress_locked();
            backlog = (engine_.shm_ && engine_.shm_->has_backlog()) || (engine_.loop_ && engine_.loop_->pending());
        }
        if (work || backlog) {
            idle = 0;
            if (!work) sched_yield();
            continue;
        }
        if (++idle < 16) {
            sched_yield();
            continue;
        }
        idle = 0;
        const long liveness_us = engine_.config().liveness_ms * 1000;
        if (engine_.active_pollers_.load(std::memory_order_acquire) || recently_polled()) {
            // An application thread is polling the rings itself; stay out of its way and
            // look again shortly, so progress resumes soon after it stops polling.
            const uint32_t v = park_word_.load(std::memory_order_acquire);
            struct timespec ts{0, kParkNs};
            syscall(SYS_futex, &park_word_, FUTEX_WAIT_PRIVATE, v, &ts, nullptr, 0);
            continue;
        }
        if (engine_.shm_) engine_.shm_->wait_for_traffic(liveness_us);
    }
}

}  // namespace ptl

#include "idle_backoff.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>

#include "../util/clock.h"

namespace ptl {
namespace {

int usable_cpus() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? int(n) : 1;
}

// The kernel's count of runnable tasks ("R" in "0.52 0.58 0.59 3/187 4242"); -1 if unknown.
int runnable_tasks() {
    const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[128];
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char *p = buf;
    for (int field = 0; field < 3 && p; ++field) {
        while (*p && *p != ' ') ++p;
        while (*p == ' ') ++p;
    }
    return *p ? std::atoi(p) : -1;
}

}  // namespace

IdleBackoff::IdleBackoff() : cpus_(usable_cpus()) {}

bool IdleBackoff::oversubscribed(uint64_t now_ns) {
    if (now_ns - checked_ns_.load(std::memory_order_relaxed) > kRecheckNs) {
        checked_ns_.store(now_ns, std::memory_order_relaxed);
        over_.store(runnable_tasks() > cpus_, std::memory_order_relaxed);
    }
    return over_.load(std::memory_order_relaxed);
}

bool IdleBackoff::should_yield() {
    switch (mode_.load(std::memory_order_relaxed)) {
        case YieldMode::Never: return false;
        case YieldMode::Always: return true;
        case YieldMode::Auto: break;
    }
    return oversubscribed(monotonic_ns());
}

void IdleBackoff::empty_poll() {
    if (mode_.load(std::memory_order_relaxed) == YieldMode::Never) return;
    if (streak_.fetch_add(1, std::memory_order_relaxed) < kStreak) return;
    if (should_yield()) {
        yields_.fetch_add(1, std::memory_order_relaxed);
        sched_yield();
    }
}

}  // namespace ptl

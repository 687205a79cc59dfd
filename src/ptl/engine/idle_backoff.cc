#include "idle_backoff.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace ptl {
namespace {

// The CPUs the job's processes on this host share: those this process may run on, unless it
// is bound to a single one, as launchers bind each rank to a core of its own (mpirun with 2
// ranks; srun --cpu-bind): then the host's, so two bound ranks on two cores do not count as
// oversubscribed (SOS's waits yielded on every poll under mpirun, a 2x slower ping-pong).
uint32_t usable_cpus() {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 1) return uint32_t(CPU_COUNT(&set));
    return online > 0 ? uint32_t(online) : 1;
}

// How many ranks the launcher put on this host: ptlrun (all of them), Open MPI, Hydra.
uint32_t launcher_local_processes() {
    for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PTLRT_SIZE"}) {
        if (const char *v = std::getenv(name)) {
            const long n = std::atol(v);
            if (n > 0) return uint32_t(n);
        }
    }
    return 1;
}

}  // namespace

IdleBackoff::IdleBackoff() : cpus_(usable_cpus()), launcher_local_(launcher_local_processes()) {
    set_local_processes(1);
}

void IdleBackoff::set_local_processes(uint32_t n) {
    oversubscribed_.store(std::max(n, launcher_local_) > cpus_, std::memory_order_relaxed);
}

bool IdleBackoff::should_yield() const {
    switch (mode_.load(std::memory_order_relaxed)) {
        case YieldMode::Never: return false;
        case YieldMode::Always: return true;
        case YieldMode::Auto: break;
    }
    return oversubscribed_.load(std::memory_order_relaxed);
}

void IdleBackoff::empty_poll() {
    if (mode_.load(std::memory_order_relaxed) == YieldMode::Never) return;
    if (streak_.fetch_add(1, std::memory_order_relaxed) < kStreak) return;
    if (should_yield()) sched_yield();
}

}  // namespace ptl

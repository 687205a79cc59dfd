// The launch runtime behind portals4_rt.h (see ptlrun.cc for the other side).
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <portals4_rt.h>

#include "job_segment.h"

#define RT_API extern "C" __attribute__((visibility("default")))

namespace {

int g_rank = 0;
int g_size = 1;
ptl::rt::JobSegment *g_seg = nullptr;
size_t g_seg_len = 0;

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double timeout_s() {
    const char *t = std::getenv("PTLRT_TIMEOUT");
    return t ? std::atof(t) : 120.0;
}

bool someone_died() {
    for (int r = 0; r < g_size; ++r) {
        const int32_t p = g_seg->os_pids[r].load();
        if (p > 0 && kill(p, 0) != 0 && errno == ESRCH) return true;
    }
    return false;
}

}  // namespace

RT_API int ptlrt_init(void) {
    if (g_seg) return 0;
    const char *name = std::getenv("PTLRT_SHM");
    const char *rank = std::getenv("PTLRT_RANK");
    const char *size = std::getenv("PTLRT_SIZE");
    if (!name || !rank || !size) {
        g_rank = 0;
        g_size = 1;
        return 0;
    }
    g_rank = std::atoi(rank);
    g_size = std::atoi(size);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return -1;
    g_seg_len = ptl::rt::job_segment_bytes(uint32_t(g_size));
    void *p = mmap(nullptr, g_seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    g_seg = static_cast<ptl::rt::JobSegment *>(p);
    if (g_seg->magic != ptl::rt::kJobMagic || int(g_seg->size) != g_size) {
        munmap(p, g_seg_len);
        g_seg = nullptr;
        return -1;
    }
    g_seg->os_pids[g_rank].store(getpid());
    return 0;
}

RT_API int ptlrt_rank(void) { return g_rank; }
RT_API int ptlrt_size(void) { return g_size; }

RT_API int ptlrt_barrier(void) {
    if (!g_seg) return 0;
    const uint32_t gen = g_seg->generation.load(std::memory_order_acquire);
    if (g_seg->arrived.fetch_add(1) + 1 == uint32_t(g_size)) {
        g_seg->arrived.store(0);
        g_seg->generation.fetch_add(1, std::memory_order_release);
        syscall(SYS_futex, &g_seg->generation, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
        return 0;
    }
    const double deadline = now_s() + timeout_s();
    while (g_seg->generation.load(std::memory_order_acquire) == gen) {
        struct timespec ts{0, 50 * 1000 * 1000};
        syscall(SYS_futex, &g_seg->generation, FUTEX_WAIT, gen, &ts, nullptr, 0);
        if (g_seg->generation.load() != gen) break;
        if (now_s() > deadline || someone_died()) return -1;
    }
    return 0;
}

RT_API int ptlrt_allgather(const void *in, void *out, size_t len) {
    if (len > ptl::rt::kSlotBytes) return -1;
    if (!g_seg) {
        std::memcpy(out, in, len);
        return 0;
    }
    char *slots = ptl::rt::job_slots(g_seg);
    std::memcpy(slots + size_t(g_rank) * ptl::rt::kSlotBytes, in, len);
    if (ptlrt_barrier() != 0) return -1;
    for (int r = 0; r < g_size; ++r)
        std::memcpy(static_cast<char *>(out) + size_t(r) * len, slots + size_t(r) * ptl::rt::kSlotBytes, len);
    return ptlrt_barrier();
}

RT_API int ptlrt_exchange_ids(ptl_handle_ni_t ni, ptl_process_t *map_out) {
    ptl_process_t me;
    int rc = PtlGetPhysId(ni, &me);
    if (rc != PTL_OK) return rc;
    std::vector<ptl_process_t> map(static_cast<size_t>(g_size));
    if (ptlrt_allgather(&me, map.data(), sizeof me) != 0) return PTL_FAIL;
    if (map_out) std::memcpy(map_out, map.data(), map.size() * sizeof me);
    ptl_process_t probe;
    // Only logical NIs take a map; PtlGetMap on a physical NI is an invalid argument.
    ptl_size_t n = 0;
    rc = PtlGetMap(ni, 0, &probe, &n);
    if (rc == PTL_ARG_INVALID) return PTL_OK;
    return PtlSetMap(ni, map.size(), map.data());
}

RT_API void ptlrt_fini(void) {
    if (g_seg) munmap(g_seg, g_seg_len);
    g_seg = nullptr;
}

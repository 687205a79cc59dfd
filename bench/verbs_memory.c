/*
 * Pinned memory per process against the number of peers reached over RDMA (issue 34's
 * memory goal). Every rank puts to every other rank (so each connection exists), waits for
 * the acknowledgements, then reports:
 *   - the engine's own count (PtlXWireUsage: buffers and queues the wires keep registered
 *     with the device) and its RDMA peer count;
 *   - the kernel's (VmPin in /proc/self/status: pages pinned by registrations), which holds
 *     for any build, also one without the counter (printed as -1 there);
 *   - the tcp wire's connections (PtlXWireUsage's tcp_connections; -1 before it existed) and
 *     the process's open descriptors: an RDMA peer should cost neither once connected.
 * Rank 0 prints one line per rank and the smallest and largest of each column.
 *
 *   ptlrun -n N [launcher...] verbs_memory
 */
#include <dirent.h>
#include <portals4.h>
#include <portals4_ext.h>
#include <portals4_rt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define PT_INDEX 7

struct Row {
    long long rdma_peers, other_host_peers, engine_pinned, vm_pin_kib, tcp_conns, fds;
};

static long long open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    long long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return n - 1; /* the directory's own */
}

static long long vm_pin_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmPin:", 6)) kib = atoll(line + 6);
    fclose(f);
    return kib;
}

/* Weak: the same program measures builds from before PtlXWireUsageSized existed (-1 there). */
int PtlXWireUsageSized(ptl_handle_ni_t ni, ptlx_wire_usage_t *usage, size_t size) __attribute__((weak));

int main(void) {
    if (ptlrt_init() != 0) return 2;
    rank = ptlrt_rank();
    const int size = ptlrt_size();
    CHECK(PtlInit());
    ptl_handle_ni_t ni;
    CHECK(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, NULL, NULL, &ni));
    ptl_process_t *map = calloc((size_t)size, sizeof *map);
    CHECK(ptlrt_exchange_ids(ni, map));

    char buf[8] = {0};
    ptl_handle_ct_t ct;
    CHECK(PtlCTAlloc(ni, &ct));
    ptl_pt_index_t pt;
    CHECK(PtlPTAlloc(ni, 0, PTL_EQ_NONE, PT_INDEX, &pt));
    ptl_le_t le = {.start = buf,
                   .length = sizeof buf,
                   .ct_handle = PTL_CT_NONE,
                   .uid = PTL_UID_ANY,
                   .options = PTL_LE_OP_PUT};
    ptl_handle_le_t leh;
    CHECK(PtlLEAppend(ni, pt, &le, PTL_PRIORITY_LIST, NULL, &leh));
    ptl_md_t md = {.start = buf,
                   .length = sizeof buf,
                   .options = PTL_MD_EVENT_CT_ACK,
                   .eq_handle = PTL_EQ_NONE,
                   .ct_handle = ct};
    ptl_handle_md_t mdh;
    CHECK(PtlMDBind(ni, &md, &mdh));
    ptlrt_barrier();

    long long other_host = 0;
    const double t0 = now_us();
    for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        if (map[r].phys.nid != map[rank].phys.nid) ++other_host;
        ptl_process_t to = {.rank = (ptl_rank_t)r};
        CHECK(PtlPut(mdh, 0, sizeof buf, PTL_ACK_REQ, to, pt, 0, 0, NULL, 0));
    }
    /* Not bench_util's 10 s: 64 ranks on two emulated CPUs take longer to connect. */
    ptl_size_t want = (ptl_size_t)(size - 1);
    ptl_ct_event_t ev = {0, 0};
    unsigned int which;
    if (PtlCTPoll(&ct, &want, 1, 600000, &ev, &which) != PTL_OK || ev.failure) {
        fprintf(stderr, "rank %d: %llu of %d acknowledgements in 600 s, %llu failed\n", rank,
                (unsigned long long)ev.success, size - 1, (unsigned long long)ev.failure);
        return 1;
    }
    const double connect_ms = (now_us() - t0) / 1000;
    ptlrt_barrier();  // every rank's connections are up before anyone counts

    ptlx_wire_usage_t u;
    memset(&u, 0xff, sizeof u); /* a build before tcp_connections leaves it at -1 */
    int have_usage = PtlXWireUsageSized && PtlXWireUsage(ni, &u) == PTL_OK;
    /* The tcp connections of RDMA peers close just after their QPs come up: give them 2 s. */
    for (const double until = now_us() + 2e6; have_usage && u.tcp_connections + 1 > 1 && now_us() < until;) {
        PtlXProgress();
        have_usage = PtlXWireUsage(ni, &u) == PTL_OK;
    }
    struct Row mine = {have_usage ? (long long)u.rdma_peers : -1,      other_host,
                       have_usage ? (long long)u.pinned_bytes : -1,    vm_pin_kib(),
                       have_usage ? (long long)u.tcp_connections : -1, open_fds()};
    struct Row *all = calloc((size_t)size, sizeof *all);
    if (ptlrt_allgather(&mine, all, sizeof mine) != 0) return 1;
    if (rank == 0) {
        printf("# verbs_memory: %d ranks, PTL_WIRE=%s; rank 0 reached all in %.1f ms\n", size,
               getenv("PTL_WIRE") ? getenv("PTL_WIRE") : "auto", connect_ms);
        printf("%-6s %-11s %-11s %-15s %-12s %-9s %-5s\n", "rank", "rdma_peers", "other_host",
               "engine_pinned_B", "vm_pin_KiB", "tcp_conns", "fds");
        struct Row lo = all[0], hi = all[0];
        for (int r = 0; r < size; ++r) {
            printf("%-6d %-11lld %-11lld %-15lld %-12lld %-9lld %-5lld\n", r, all[r].rdma_peers,
                   all[r].other_host_peers, all[r].engine_pinned, all[r].vm_pin_kib, all[r].tcp_conns,
                   all[r].fds);
#define MINMAX(f)                         \
    if (all[r].f < lo.f) lo.f = all[r].f; \
    if (all[r].f > hi.f) hi.f = all[r].f;
            MINMAX(rdma_peers)
            MINMAX(other_host_peers) MINMAX(engine_pinned) MINMAX(vm_pin_kib) MINMAX(tcp_conns) MINMAX(fds)
        }
        printf("min    %-11lld %-11lld %-15lld %-12lld %-9lld %-5lld\n", lo.rdma_peers, lo.other_host_peers,
               lo.engine_pinned, lo.vm_pin_kib, lo.tcp_conns, lo.fds);
        printf("max    %-11lld %-11lld %-15lld %-12lld %-9lld %-5lld\n", hi.rdma_peers, hi.other_host_peers,
               hi.engine_pinned, hi.vm_pin_kib, hi.tcp_conns, hi.fds);
    }
    ptlrt_barrier();
    PtlNIFini(ni);
    PtlFini();
    ptlrt_fini();
    return 0;
}

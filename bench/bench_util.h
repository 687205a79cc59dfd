/*
 * What the libportals4 benchmarks share: a microsecond clock, a CHECK that names the failed
 * call and the rank, and a bounded wait on a counting event. Each includes it once.
 */
#ifndef PORTALS_UCX_BENCH_UTIL_H
#define PORTALS_UCX_BENCH_UTIL_H

#include <portals4.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int rank;

static inline double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != PTL_OK) {                                                                   \
            fprintf(stderr, "rank %d: %s failed: %d (line %d)\n", rank, #call, rc_, __LINE__); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* Waits until the CT reaches `target` (10 s bound: a lost message fails the run). */
static inline void ct_wait(ptl_handle_ct_t ct, ptl_size_t target) {
    ptl_ct_event_t ev;
    unsigned int which;
    int rc = PtlCTPoll(&ct, &target, 1, 10000, &ev, &which);
    if (rc != PTL_OK || ev.failure) {
        fprintf(stderr, "rank %d: CT wait for %llu failed: rc=%d success=%llu failure=%llu\n", rank,
                (unsigned long long)target, rc, (unsigned long long)ev.success,
                (unsigned long long)ev.failure);
        exit(1);
    }
}

#endif

/* The OpenSHMEM programs' side of check.h: init, and the verdict all PEs agree on. */
#ifndef SHMEM_CHECK_H
#define SHMEM_CHECK_H

#include <shmem.h>

#include "../check.h"

static inline void check_init(int *me, int *npes) {
    shmem_init();
    *me = shmem_my_pe();
    *npes = shmem_n_pes();
    check_rank = *me;
}

/* Finalizes SHMEM; the exit status is 0 only when no PE saw a failure. */
static inline int check_finish(const char *program) {
    static int errors, total;
    static long psync[SHMEM_REDUCE_SYNC_SIZE];
    static int pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i) psync[i] = SHMEM_SYNC_VALUE;
    errors = check_errors;
    shmem_barrier_all();
    shmem_int_sum_to_all(&total, &errors, 1, 0, 0, shmem_n_pes(), pwrk, psync);
    check_report(program, shmem_n_pes(), total);
    shmem_finalize();
    return total ? 1 : 0;
}

#endif

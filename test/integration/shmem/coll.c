/* OpenSHMEM synchronisation and collectives over UCX_TLS=portals: barrier_all separating
 * rounds of puts, a token passed around the ring with wait_until, broadcast from every root,
 * collect/fcollect, sum/max reductions (int, long, double), alltoall, and a barrier over an
 * active set (every other PE). */
#include "shmem_check.h"

static int me, npes;
static long psync[SHMEM_BCAST_SYNC_SIZE > SHMEM_REDUCE_SYNC_SIZE
                      ? (SHMEM_BCAST_SYNC_SIZE > SHMEM_ALLTOALL_SYNC_SIZE ? SHMEM_BCAST_SYNC_SIZE
                                                                          : SHMEM_ALLTOALL_SYNC_SIZE)
                      : (SHMEM_REDUCE_SYNC_SIZE > SHMEM_ALLTOALL_SYNC_SIZE ? SHMEM_REDUCE_SYNC_SIZE
                                                                           : SHMEM_ALLTOALL_SYNC_SIZE)];

/* Collectives may not reuse pSync until every PE left the previous one. */
static void reset_psync(void) {
    for (size_t i = 0; i < sizeof psync / sizeof psync[0]; ++i) psync[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
}

static void barrier_rounds(int rounds) {
    static int seen[64];
    for (int r = 1; r <= rounds; ++r) {
        for (int p = 0; p < npes; ++p) shmem_int_p(&seen[me], r, p);
        shmem_barrier_all();
        for (int p = 0; p < npes; ++p)
            if (seen[p] != r) {
                CHECK(0, "barrier round %d: PE %d's put not visible (%d)", r, p, seen[p]);
                r = rounds;
                break;
            }
        shmem_barrier_all();
    }
}

static void token_ring(int laps) {
    static long token;
    const int right = (me + 1) % npes;
    long expect = me;
    for (int lap = 0; lap < laps; ++lap) {
        if (me == 0 && lap == 0) {
            shmem_long_atomic_set(&token, 1, right);
        }
        if (me == 0) expect = (long)lap * npes + npes;
        else expect = (long)lap * npes + me;
        shmem_long_wait_until(&token, SHMEM_CMP_GE, expect);
        CHECK(token == expect, "token lap %d: %ld, want %ld", lap, token, expect);
        if (me != 0 || lap + 1 < laps) shmem_long_atomic_set(&token, token + 1, right);
    }
    shmem_barrier_all();
}

static void broadcasts(void) {
    enum { N = 65536 };
    long *src = shmem_malloc(N * sizeof(long)), *dst = shmem_malloc(N * sizeof(long));
    for (int root = 0; root < npes; ++root) {
        for (int i = 0; i < N; ++i) {
            src[i] = (long)root * N + i;
            dst[i] = -1;
        }
        reset_psync();
        shmem_broadcast64(dst, src, N, root, 0, 0, npes, psync);
        shmem_barrier_all();
        if (me != root) /* the root's target is not written */
            for (int i = 0; i < N; ++i)
                if (dst[i] != (long)root * N + i) {
                    CHECK(0, "broadcast from %d: [%d] = %ld", root, i, dst[i]);
                    break;
                }
    }
    shmem_free(src);
    shmem_free(dst);
}

static void collects(void) {
    enum { N = 1000 };
    long *mine = shmem_malloc(N * sizeof(long));
    long *all = shmem_malloc(sizeof(long) * N * (size_t)npes + sizeof(long) * (size_t)npes * (npes + 1) / 2);
    for (int i = 0; i < N; ++i) mine[i] = (long)me * N + i;
    reset_psync();
    shmem_fcollect64(all, mine, N, 0, 0, npes, psync);
    for (int i = 0; i < N * npes; ++i)
        if (all[i] != i) {
            CHECK(0, "fcollect [%d] = %ld", i, all[i]);
            break;
        }
    /* collect: PE p contributes p + 1 elements equal to p */
    for (int i = 0; i <= me; ++i) mine[i] = me;
    reset_psync();
    shmem_collect64(all, mine, (size_t)me + 1, 0, 0, npes, psync);
    size_t at = 0;
    for (int p = 0; p < npes; ++p)
        for (int i = 0; i <= p; ++i, ++at) CHECK(all[at] == p, "collect: block %d [%d] = %ld", p, i, all[at]);
    shmem_barrier_all();
    shmem_free(mine);
    shmem_free(all);
}

static void reductions(void) {
    enum { N = 5000 };
    static int isrc[N], idst[N];
    static long lsrc[N], ldst[N];
    static double dsrc[N], ddst[N];
    static int ipwrk[N / 2 + 1 > SHMEM_REDUCE_MIN_WRKDATA_SIZE ? N / 2 + 1 : SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    static long lpwrk[N / 2 + 1 > SHMEM_REDUCE_MIN_WRKDATA_SIZE ? N / 2 + 1 : SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    static double dpwrk[N / 2 + 1 > SHMEM_REDUCE_MIN_WRKDATA_SIZE ? N / 2 + 1 : SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    for (int i = 0; i < N; ++i) {
        isrc[i] = me + i;
        lsrc[i] = (long)me << 33 | i;
        dsrc[i] = me * 0.25 + i;
    }
    reset_psync();
    shmem_int_sum_to_all(idst, isrc, N, 0, 0, npes, ipwrk, psync);
    reset_psync();
    shmem_long_max_to_all(ldst, lsrc, N, 0, 0, npes, lpwrk, psync);
    reset_psync();
    shmem_double_sum_to_all(ddst, dsrc, N, 0, 0, npes, dpwrk, psync);
    const int rank_sum = npes * (npes - 1) / 2;
    for (int i = 0; i < N; ++i) {
        if (idst[i] != rank_sum + i * npes || ldst[i] != ((long)(npes - 1) << 33 | i) ||
            ddst[i] != rank_sum * 0.25 + (double)i * npes) {
            CHECK(0, "reduction [%d]: int sum %d, long max %ld, double sum %g", i, idst[i], ldst[i], ddst[i]);
            break;
        }
    }
    shmem_barrier_all();
}

static void all_to_all(void) {
    enum { N = 2048 }; /* 16 KiB per pair */
    long *src = shmem_malloc(sizeof(long) * N * (size_t)npes), *dst = shmem_malloc(sizeof(long) * N * (size_t)npes);
    for (int p = 0; p < npes; ++p)
        for (int i = 0; i < N; ++i) src[p * N + i] = (long)me * 1000000 + p * 10000 + i;
    reset_psync();
    shmem_alltoall64(dst, src, N, 0, 0, npes, psync);
    for (int p = 0; p < npes; ++p)
        for (int i = 0; i < N; ++i)
            if (dst[p * N + i] != (long)p * 1000000 + me * 10000 + i) {
                CHECK(0, "alltoall from %d: [%d] = %ld", p, i, dst[p * N + i]);
                p = npes;
                break;
            }
    shmem_barrier_all();
    shmem_free(src);
    shmem_free(dst);
}

/* Even PEs only (PE_start 0, log2 stride 1): the others do not take part. */
static void active_set_barrier(void) {
    static long bsync[SHMEM_BARRIER_SYNC_SIZE];
    static int mark[64];
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; ++i) bsync[i] = SHMEM_SYNC_VALUE;
    const int evens = (npes + 1) / 2;
    shmem_barrier_all();
    if (me % 2 == 0) {
        for (int p = 0; p < npes; p += 2) shmem_int_p(&mark[me], 1, p);
        shmem_barrier(0, 1, evens, bsync);
        for (int p = 0; p < npes; p += 2) CHECK(mark[p] == 1, "active-set barrier: PE %d's put not visible", p);
    }
    shmem_barrier_all();
}

int main(void) {
    check_init(&me, &npes);
    barrier_rounds(50);
    token_ring(20);
    broadcasts();
    collects();
    reductions();
    all_to_all();
    active_set_barrier();
    return check_finish("shmem_coll");
}

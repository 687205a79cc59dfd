/* OpenSHMEM atomics over UCX_TLS=portals (spml ucx: UCP atomics, i.e. the component's 32-
 * and 64-bit atomic operations, not emulated over active messages): tickets from fetch_inc
 * and fetch_add handed out once each, add/inc totals, swap and compare_swap, the bitwise
 * and/or/xor, fetch/set, and shmem_set_lock guarding a read-modify-write. */
#include "shmem_check.h"

static int me, npes;

static int compare_long(const void *a, const void *b) {
    const long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Every PE draws tickets from PE 0; gathered and sorted they are 0 .. n-1 exactly. The
 * counters are static (the data segment: the target's CPU applies every atomic) or on the
 * symmetric heap (memory peers reach directly: on one host by CPU atomics, across hosts the
 * 64-bit ones by RDMA device atomics, which the target then applies through its device too). */
static void tickets(int rounds, int on_heap) {
    static int static32;
    static long static64;
    int *c32 = on_heap ? shmem_calloc(1, sizeof(int)) : &static32;
    long *c64 = on_heap ? shmem_calloc(1, sizeof(long)) : &static64;
    long *mine = shmem_malloc(sizeof(long) * 2 * (size_t)rounds);
    long *all = shmem_malloc(sizeof(long) * 2 * (size_t)rounds * npes);
    static long psync[SHMEM_COLLECT_SYNC_SIZE];
    for (int i = 0; i < SHMEM_COLLECT_SYNC_SIZE; ++i) psync[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
    for (int i = 0; i < rounds; ++i) {
        mine[i] = shmem_int_atomic_fetch_inc(c32, 0);
        mine[rounds + i] = shmem_long_atomic_fetch_add(c64, 1, 0);
    }
    shmem_barrier_all();
    shmem_fcollect64(all, mine, 2 * (size_t)rounds, 0, 0, npes, psync);
    /* all = [pe0: 32-bit tickets, 64-bit tickets][pe1: ...] */
    long *t32 = xmalloc(sizeof(long) * (size_t)rounds * npes), *t64 = xmalloc(sizeof(long) * (size_t)rounds * npes);
    for (int p = 0; p < npes; ++p)
        for (int i = 0; i < rounds; ++i) {
            t32[p * rounds + i] = all[(size_t)p * 2 * rounds + i];
            t64[p * rounds + i] = all[(size_t)p * 2 * rounds + rounds + i];
        }
    qsort(t32, (size_t)rounds * npes, sizeof(long), compare_long);
    qsort(t64, (size_t)rounds * npes, sizeof(long), compare_long);
    for (long i = 0; i < (long)rounds * npes; ++i) {
        if (t32[i] != i || t64[i] != i) {
            CHECK(0, "%s ticket %ld: 32-bit %ld, 64-bit %ld (duplicate or lost)", on_heap ? "heap" : "static",
                  i, t32[i], t64[i]);
            break;
        }
    }
    if (me == 0) CHECK(*c32 == rounds * npes && *c64 == (long)rounds * npes, "counters %d %ld", *c32, *c64);
    free(t32);
    free(t64);
    shmem_barrier_all();
    shmem_free(all);
    shmem_free(mine);
    if (on_heap) {
        shmem_free(c64);
        shmem_free(c32);
    }
}

static void add_inc_swap(void) {
    static int sum32;
    static long long sum64;
    static long slot;
    shmem_barrier_all();
    shmem_int_atomic_add(&sum32, me + 1, 0);
    shmem_longlong_atomic_inc(&sum64, 0);
    shmem_longlong_atomic_add(&sum64, (long long)1 << 40, 0); /* beyond 32 bits */
    shmem_barrier_all();
    if (me == 0)
        CHECK(sum32 == npes * (npes + 1) / 2 && sum64 == npes + ((long long)npes << 40), "add/inc: %d %lld",
              sum32, sum64);
    /* A swap chain: each PE swaps its id in; the values taken out are everyone's ids but
     * one, plus the initial -1, each once. */
    if (me == 0) slot = -1;
    shmem_barrier_all();
    const long out = shmem_long_atomic_swap(&slot, me, 0);
    static long outs[64];
    shmem_long_p(&outs[me], out, 0);
    shmem_barrier_all();
    if (me == 0) {
        long seen_sum = 0;
        for (int p = 0; p < npes; ++p) seen_sum += outs[p];
        seen_sum += slot; /* the last id stays in */
        CHECK(seen_sum == -1 + (long)npes * (npes - 1) / 2, "swap chain: sum %ld", seen_sum);
    }
    /* compare_swap succeeds only for the PE whose condition holds. 64-bit only: Open MPI
     * 4.1's shmem_int_atomic_compare_swap overruns its stack whatever the transport. */
    static long word;
    if (me == 0) word = 0;
    shmem_barrier_all();
    const long prev = shmem_long_atomic_compare_swap(&word, npes + 5, 99, 0); /* never matches */
    CHECK(prev == 0, "compare_swap with a wrong condition changed %ld", prev);
    shmem_barrier_all();
    for (int turn = 0; turn < npes; ++turn) {
        if (turn == me) {
            const long before = shmem_long_atomic_compare_swap(&word, turn, turn + 1, 0);
            CHECK(before == turn, "compare_swap turn %d saw %ld", turn, before);
        }
        shmem_barrier_all();
    }
    if (me == 0) CHECK(word == npes, "compare_swap sequence ended at %ld", word);
    shmem_barrier_all();
}

static void bitwise_fetch_set(void) {
    static unsigned int bits32;
    static unsigned long bits64;
    shmem_barrier_all();
    shmem_uint_atomic_or(&bits32, 1u << (me % 32), 0);
    shmem_ulong_atomic_or(&bits64, 1ul << (32 + me % 32), 0);
    shmem_barrier_all();
    unsigned int all32 = 0;
    unsigned long all64 = 0;
    for (int p = 0; p < npes; ++p) {
        all32 |= 1u << (p % 32);
        all64 |= 1ul << (32 + p % 32);
    }
    CHECK(shmem_uint_atomic_fetch(&bits32, 0) == all32 && shmem_ulong_atomic_fetch(&bits64, 0) == all64,
          "or: %x %lx", bits32, bits64);
    shmem_barrier_all();
    /* each PE clears its own bit with and, and toggles bit 31 (32-bit) / 63 with xor */
    const unsigned int before_and = shmem_uint_atomic_fetch_and(&bits32, ~(1u << (me % 32)), 0);
    CHECK(before_and & (1u << (me % 32)), "fetch_and: own bit already clear in %x", before_and);
    shmem_ulong_atomic_xor(&bits64, 1ul << 63, 0);
    shmem_barrier_all();
    if (me == 0) {
        const unsigned long toggled = (npes % 2) ? (1ul << 63) : 0;
        CHECK(bits32 == 0 || (npes > 32), "and: %x left", bits32);
        CHECK(bits64 == (all64 ^ toggled), "xor: %lx, want %lx", bits64, all64 ^ toggled);
    }
    shmem_barrier_all();
    static long value;
    if (me == npes - 1) shmem_long_atomic_set(&value, 424242, 0);
    shmem_barrier_all();
    CHECK(shmem_long_atomic_fetch(&value, 0) == 424242, "set/fetch");
    shmem_barrier_all();
}

/* shmem_set_lock makes a get, increment, put on PE 0 indivisible. */
static void global_lock(int rounds) {
    static long lock;
    static long counter;
    shmem_barrier_all();
    for (int i = 0; i < rounds; ++i) {
        shmem_set_lock(&lock);
        const long v = shmem_long_g(&counter, 0);
        shmem_long_p(&counter, v + 1, 0);
        shmem_quiet();
        shmem_clear_lock(&lock);
    }
    shmem_barrier_all();
    if (me == 0) CHECK(counter == (long)rounds * npes, "lock: counter %ld, want %ld", counter, (long)rounds * npes);
}

int main(void) {
    check_init(&me, &npes);
    tickets(1000, 0);
    tickets(1000, 1);
    add_inc_swap();
    bitwise_fetch_set();
    global_lock(100);
    return check_finish("shmem_atomics");
}

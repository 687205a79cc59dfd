/* MPI one-sided communication over UCX_TLS=portals (Open MPI's osc ucx: UCP RMA and atomics,
 * i.e. the component's put/get/atomic operations): windows from MPI_Win_allocate and
 * MPI_Win_create; put/get/accumulate in fence epochs (small to 4 MiB); passive target with
 * exclusive locks (a read-modify-write nobody may interleave), lock_all with fetch_and_op
 * (every ticket handed out once), compare_and_swap as a spin lock, get_accumulate,
 * request-based rput/rget and flushes. */
#include "mpi_check.h"

static int rank, nranks, right, left;

static void fence_epochs(void) {
    const size_t max = (size_t)4 << 20;
    unsigned char *base;
    MPI_Win win;
    /* [0, max): puts land here; [max, 2 max): what neighbours get. */
    MPI_Win_allocate((MPI_Aint)(2 * max), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    unsigned char *out = xmalloc(max), *got = xmalloc(max);
    for (size_t size = 1; size <= max; size *= 16) {
        fill(out, rank, size);
        fill(base + max, rank + 64, size);
        memset(base, 0, size);
        memset(got, 0, size);
        MPI_Win_fence(0, win);
        MPI_Put(out, (int)size, MPI_BYTE, right, 0, (int)size, MPI_BYTE, win);
        MPI_Get(got, (int)size, MPI_BYTE, left, (MPI_Aint)max, (int)size, MPI_BYTE, win);
        MPI_Win_fence(0, win);
        verify(base, left, size, "fence put");
        verify(got, left + 64, size, "fence get");
    }
    MPI_Win_free(&win);

    /* Accumulate into rank 0 from everyone, on a window over the caller's memory. */
    enum { N = 4096 };
    long *acc = xmalloc(N * sizeof(long)), *mine = xmalloc(N * sizeof(long));
    for (int i = 0; i < N; ++i) {
        acc[i] = 1000;
        mine[i] = (long)rank * i;
    }
    MPI_Win_create(acc, N * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    MPI_Accumulate(mine, N, MPI_LONG, 0, 0, N, MPI_LONG, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0)
        for (int i = 0; i < N; ++i)
            if (acc[i] != 1000 + (long)i * nranks * (nranks - 1) / 2) {
                CHECK(0, "accumulate [%d] = %ld", i, acc[i]);
                break;
            }
    MPI_Win_free(&win);
    free(acc);
    free(mine);
    free(out);
    free(got);
}

/* Every rank does an unprotected read-modify-write of rank 0's counter under an exclusive
 * lock: any interleaving loses increments. */
static void exclusive_lock(int rounds) {
    long *counter;
    MPI_Win win;
    MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &counter, &win);
    *counter = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < rounds; ++i) {
        long v = -1;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Get(&v, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win);
        MPI_Win_flush(0, win);
        ++v;
        MPI_Put(&v, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win);
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        const long total = *counter;
        MPI_Win_unlock(0, win);
        CHECK(total == (long)rounds * nranks, "exclusive lock: counter %ld, want %ld", total,
              (long)rounds * nranks);
    }
    MPI_Win_free(&win);
}

static int compare_long(const void *a, const void *b) {
    const long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Tickets from fetch_and_op on one counter: together the ranks get 0 .. n-1, each once. */
static void fetch_and_op_tickets(int rounds) {
    long *counter;
    MPI_Win win;
    MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &counter, &win);
    *counter = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    long *mine = xmalloc(sizeof(long) * (size_t)rounds);
    const long one = 1;
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < rounds; ++i) {
        MPI_Fetch_and_op(&one, &mine[i], MPI_LONG, 0, 0, MPI_SUM, win);
        MPI_Win_flush(0, win);
    }
    MPI_Win_unlock_all(win);
    long *all = xmalloc(sizeof(long) * (size_t)rounds * nranks);
    MPI_Allgather(mine, rounds, MPI_LONG, all, rounds, MPI_LONG, MPI_COMM_WORLD);
    qsort(all, (size_t)rounds * nranks, sizeof(long), compare_long);
    for (long i = 0; i < (long)rounds * nranks; ++i)
        if (all[i] != i) {
            CHECK(0, "fetch_and_op: ticket %ld is %ld (duplicate or lost)", i, all[i]);
            break;
        }
    free(all);
    free(mine);
    MPI_Win_free(&win);
}

/* A spin lock on rank 0 taken with compare_and_swap guards a two-word update done with
 * plain puts; the words must always agree. */
static void compare_and_swap_lock(int rounds) {
    long *mem; /* [0] the lock, [1] and [2] the guarded pair */
    MPI_Win win;
    MPI_Win_allocate(3 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    mem[0] = mem[1] = mem[2] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    const long unlocked = 0, locked = rank + 1;
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < rounds; ++i) {
        long prev = -1;
        do {
            MPI_Compare_and_swap(&locked, &unlocked, &prev, MPI_LONG, 0, 0, win);
            MPI_Win_flush(0, win);
        } while (prev != unlocked);
        long pair[2];
        MPI_Get(pair, 2, MPI_LONG, 0, 1, 2, MPI_LONG, win);
        MPI_Win_flush(0, win);
        CHECK(pair[0] == pair[1], "cas lock: pair %ld %ld disagree", pair[0], pair[1]);
        ++pair[0];
        ++pair[1];
        MPI_Put(pair, 2, MPI_LONG, 0, 1, 2, MPI_LONG, win);
        MPI_Win_flush(0, win);
        long old;
        MPI_Fetch_and_op(&unlocked, &old, MPI_LONG, 0, 0, MPI_REPLACE, win);
        MPI_Win_flush(0, win);
        CHECK(old == locked, "cas lock: released a lock held by %ld", old);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK(mem[1] == (long)rounds * nranks && mem[2] == mem[1], "cas lock: pair %ld %ld, want %ld", mem[1],
              mem[2], (long)rounds * nranks);
    MPI_Win_free(&win);
}

static void get_accumulate_and_requests(void) {
    enum { N = 1024 };
    const size_t big = (size_t)1 << 20;
    unsigned char *base;
    MPI_Win win;
    /* [0, N longs): get_accumulate target; then big bytes for rput/rget */
    MPI_Win_allocate((MPI_Aint)(N * sizeof(long) + big), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    long *vals = (long *)base;
    for (int i = 0; i < N; ++i) vals[i] = i;
    MPI_Barrier(MPI_COMM_WORLD);
    long add[N], before[N], now[N];
    for (int i = 0; i < N; ++i) add[i] = 1;
    /* Every rank adds 1 to its right neighbour's values; it alone touches them. */
    MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win);
    MPI_Get_accumulate(add, N, MPI_LONG, before, N, MPI_LONG, right, 0, N, MPI_LONG, MPI_SUM, win);
    MPI_Win_flush(right, win);
    MPI_Get_accumulate(NULL, 0, MPI_LONG, now, N, MPI_LONG, right, 0, N, MPI_LONG, MPI_NO_OP, win);
    MPI_Win_unlock(right, win);
    for (int i = 0; i < N; ++i)
        if (before[i] != i || now[i] != i + 1) {
            CHECK(0, "get_accumulate [%d]: before %ld now %ld", i, before[i], now[i]);
            break;
        }
    MPI_Barrier(MPI_COMM_WORLD);

    unsigned char *out = xmalloc(big), *in = xmalloc(big);
    fill(out, rank, big);
    MPI_Request req;
    MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win);
    MPI_Rput(out, (int)big, MPI_BYTE, right, N * sizeof(long), (int)big, MPI_BYTE, win, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE); /* local completion: out may be reused */
    memset(out, 0, big);
    MPI_Win_flush(right, win);
    MPI_Rget(in, (int)big, MPI_BYTE, right, N * sizeof(long), (int)big, MPI_BYTE, win, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Win_unlock(right, win);
    verify(in, rank, big, "rput then rget");
    MPI_Barrier(MPI_COMM_WORLD);
    verify(base + N * sizeof(long), left, big, "rput target");
    free(out);
    free(in);
    MPI_Win_free(&win);
}

int main(int argc, char **argv) {
    check_init(&argc, &argv, &rank, &nranks);
    right = (rank + 1) % nranks;
    left = (rank + nranks - 1) % nranks;
    fence_epochs();
    exclusive_lock(200);
    fetch_and_op_tickets(500);
    compare_and_swap_lock(100);
    get_accumulate_and_requests();
    return check_finish("rma");
}

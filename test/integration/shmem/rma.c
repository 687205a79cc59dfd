/* OpenSHMEM put/get over UCX_TLS=portals (Open MPI's spml ucx: UCP RMA, i.e. the component's
 * put/get), every byte checked: the symmetric heap and static data, 1 B to 4 MiB, single
 * elements (p/g), strided (iput/iget), nonblocking puts and gets completed by quiet, the
 * order shmem_fence promises, and a separate communication context. Needs 2 or more PEs. */
#include "shmem_check.h"

#define MAX_BYTES ((size_t)4 << 20)

static int me, npes, right, left;
static long statics[1024];
static int flag;

static void heap_sizes(void) {
    /* [0, MAX): puts land here; [MAX, 2 MAX): what neighbours get */
    unsigned char *heap = shmem_malloc(2 * MAX_BYTES);
    unsigned char *out = xmalloc(MAX_BYTES), *got = xmalloc(MAX_BYTES);
    CHECK(heap != NULL, "shmem_malloc of %zu bytes failed", 2 * MAX_BYTES);
    if (!heap) return;
    for (size_t size = 1; size <= MAX_BYTES; size *= 8) {
        fill(out, me, size);
        fill(heap + MAX_BYTES, me + 64, size);
        memset(heap, 0, size);
        shmem_barrier_all();
        shmem_putmem(heap, out, size, right);
        shmem_getmem(got, heap + MAX_BYTES, size, left);
        shmem_barrier_all(); /* completes the puts everywhere */
        verify(heap, left, size, "putmem");
        verify(got, left + 64, size, "getmem");
    }
    shmem_barrier_all();
    shmem_free(heap);
    free(out);
    free(got);
}

static void static_data_and_single_elements(void) {
    long src[1024];
    for (int i = 0; i < 1024; ++i) src[i] = (long)me * 100000 + i;
    shmem_long_put(statics, src, 1024, right);
    shmem_barrier_all();
    for (int i = 0; i < 1024; ++i)
        if (statics[i] != (long)left * 100000 + i) {
            CHECK(0, "static long_put [%d] = %ld", i, statics[i]);
            break;
        }
    static int ival;
    static double dval;
    shmem_int_p(&ival, me + 7, right);
    shmem_double_p(&dval, me * 0.5, right);
    shmem_barrier_all();
    CHECK(ival == left + 7 && dval == left * 0.5, "p: %d %g", ival, dval);
    const int gi = shmem_int_g(&ival, right);
    CHECK(gi == me + 7, "g: %d", gi);
    shmem_barrier_all();
}

static void strided(void) {
    static long target[200];
    long src[100];
    for (int i = 0; i < 100; ++i) src[i] = me * 1000 + i;
    memset(target, 0, sizeof target);
    shmem_barrier_all();
    /* every second element of src into every other of target: target[2i] = src[i] */
    shmem_long_iput(target, src, 2, 1, 100, right);
    shmem_barrier_all();
    for (int i = 0; i < 100; ++i)
        CHECK(target[2 * i] == left * 1000 + i && target[2 * i + 1] == 0, "iput [%d]: %ld %ld", i,
              target[2 * i], target[2 * i + 1]);
    long back[50];
    shmem_long_iget(back, target, 1, 4, 50, right); /* back[i] = right's target[4i] = me*1000+2i */
    for (int i = 0; i < 50; ++i) CHECK(back[i] == me * 1000 + 2 * i, "iget [%d] = %ld", i, back[i]);
    shmem_barrier_all();
}

static void nonblocking(void) {
    enum { N = 256, LEN = 4096 };
    unsigned char *heap = shmem_malloc((size_t)N * LEN);
    unsigned char *src = xmalloc((size_t)N * LEN), *got = xmalloc((size_t)N * LEN);
    fill(src, me, (size_t)N * LEN);
    shmem_barrier_all();
    for (int i = 0; i < N; ++i) shmem_putmem_nbi(heap + i * LEN, src + i * LEN, LEN, right);
    shmem_quiet(); /* all N delivered at the target */
    shmem_barrier_all();
    verify(heap, left, (size_t)N * LEN, "putmem_nbi");
    for (int i = 0; i < N; ++i) shmem_getmem_nbi(got + i * LEN, heap + i * LEN, LEN, right);
    shmem_quiet();
    verify(got, me, (size_t)N * LEN, "getmem_nbi");
    shmem_barrier_all();
    shmem_free(heap);
    free(src);
    free(got);
}

/* Data, fence, flag: a PE that sees the flag must see the data. */
static void fence_orders_puts(void) {
    enum { ROUNDS = 200, LEN = 512 };
    static long data[LEN];
    long src[LEN];
    for (int r = 1; r <= ROUNDS; ++r) {
        for (int i = 0; i < LEN; ++i) src[i] = (long)r * LEN + i + me;
        shmem_long_put(data, src, LEN, right);
        shmem_fence();
        shmem_int_p(&flag, r, right);
        shmem_int_wait_until(&flag, SHMEM_CMP_EQ, r);
        for (int i = 0; i < LEN; ++i)
            if (data[i] != (long)r * LEN + i + left) {
                CHECK(0, "fence round %d: data[%d] = %ld before the flag", r, i, data[i]);
                break;
            }
        shmem_barrier_all(); /* nobody overwrites data before it was checked */
    }
}

static void context(void) {
    shmem_ctx_t ctx;
    if (shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) != 0) {
        CHECK(0, "shmem_ctx_create failed");
        return;
    }
    static long box[64];
    long src[64];
    for (int i = 0; i < 64; ++i) src[i] = me + i * 3;
    shmem_ctx_long_put(ctx, box, src, 64, right);
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    for (int i = 0; i < 64; ++i) CHECK(box[i] == left + i * 3, "ctx put [%d] = %ld", i, box[i]);
    shmem_ctx_destroy(ctx);
    shmem_barrier_all();
}

int main(void) {
    check_init(&me, &npes);
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;
    heap_sizes();
    static_data_and_single_elements();
    strided();
    nonblocking();
    fence_orders_puts();
    context();
    return check_finish("shmem_rma");
}

/* MPI collectives over UCX_TLS=portals, results checked on every rank: barrier, bcast from
 * every root (small to 4 MiB), reduce/allreduce (sum, max, a user-defined op), gather(v),
 * scatter(v), allgather(v), alltoall(v), reduce_scatter_block, scan/exscan, a split
 * communicator, and nonblocking collectives overlapped with each other. */
#include "mpi_check.h"

static int rank, nranks;

static void bcast_every_root(void) {
    static const size_t sizes[] = {1, 100, 8192, 100000, 4 << 20};
    for (int k = 0; k < 5; ++k) {
        const size_t size = sizes[k];
        unsigned char *buf = xmalloc(size);
        for (int root = 0; root < nranks; ++root) {
            if (rank == root)
                fill(buf, root, size);
            else
                memset(buf, 0, size);
            MPI_Bcast(buf, (int)size, MPI_BYTE, root, MPI_COMM_WORLD);
            verify(buf, root, size, "bcast");
        }
        free(buf);
    }
}

/* Element-wise |a| + |b| on int pairs: commutative, and wrong if the library ignored it. */
static void abs_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const int *a = in;
    int *b = inout;
    for (int i = 0; i < *len; ++i) b[i] = abs(a[i]) + abs(b[i]);
}

static void reductions(void) {
    enum { N = 100000 };
    long *in = xmalloc(N * sizeof(long)), *out = xmalloc(N * sizeof(long));
    for (int i = 0; i < N; ++i) in[i] = (long)rank * N + i;
    MPI_Allreduce(in, out, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const long rank_sum = (long)nranks * (nranks - 1) / 2;
    for (int i = 0; i < N; ++i)
        if (out[i] != rank_sum * N + (long)i * nranks) {
            CHECK(0, "allreduce sum [%d] = %ld", i, out[i]);
            break;
        }
    for (int root = 0; root < nranks; ++root) {
        double mine = rank == root ? -1.0 : rank * 1.5, max = 0;
        MPI_Reduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, root, MPI_COMM_WORLD);
        if (rank == root) {
            const double want = (root == nranks - 1 ? nranks - 2 : nranks - 1) * 1.5;
            CHECK(max == (nranks == 1 ? -1.0 : want), "reduce max at root %d = %g", root, max);
        }
    }
    MPI_Op op;
    MPI_Op_create(abs_sum, 1, &op);
    int v[2] = {-(rank + 1), rank + 1}, r[2] = {0, 0};
    MPI_Allreduce(v, r, 2, MPI_INT, op, MPI_COMM_WORLD);
    const int want = nranks * (nranks + 1) / 2;
    CHECK(r[0] == want && r[1] == want, "user op: %d %d, want %d", r[0], r[1], want);
    MPI_Op_free(&op);
    free(in);
    free(out);
}

static void gathers_and_scatters(void) {
    const int n = 1000;
    int *mine = xmalloc(sizeof(int) * (size_t)n), *all = xmalloc(sizeof(int) * (size_t)n * nranks);
    for (int i = 0; i < n; ++i) mine[i] = rank * n + i;
    for (int root = 0; root < nranks; ++root) {
        memset(all, 0xff, sizeof(int) * (size_t)n * nranks);
        MPI_Gather(mine, n, MPI_INT, all, n, MPI_INT, root, MPI_COMM_WORLD);
        if (rank == root)
            for (int i = 0; i < n * nranks; ++i)
                if (all[i] != i) {
                    CHECK(0, "gather at %d: [%d] = %d", root, i, all[i]);
                    break;
                }
    }
    /* Scatter from a root whose send buffer is known everywhere, then check the parts. */
    for (int i = 0; i < n * nranks; ++i) all[i] = i * 3;
    int *part = xmalloc(sizeof(int) * (size_t)n);
    MPI_Scatter(all, n, MPI_INT, part, n, MPI_INT, nranks - 1, MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i)
        if (part[i] != (rank * n + i) * 3) {
            CHECK(0, "scatter: [%d] = %d", i, part[i]);
            break;
        }
    memset(all, 0, sizeof(int) * (size_t)n * nranks);
    MPI_Allgather(mine, n, MPI_INT, all, n, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < n * nranks; ++i)
        if (all[i] != i) {
            CHECK(0, "allgather: [%d] = %d", i, all[i]);
            break;
        }

    /* Rank r contributes r + 1 elements, each equal to r. */
    int *counts = xmalloc(sizeof(int) * (size_t)nranks), *displs = xmalloc(sizeof(int) * (size_t)nranks);
    int total = 0;
    for (int p = 0; p < nranks; ++p) {
        counts[p] = p + 1;
        displs[p] = total;
        total += p + 1;
    }
    int *vin = xmalloc(sizeof(int) * (size_t)(rank + 1)), *vout = xmalloc(sizeof(int) * (size_t)total);
    for (int i = 0; i <= rank; ++i) vin[i] = rank;
    MPI_Allgatherv(vin, rank + 1, MPI_INT, vout, counts, displs, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < nranks; ++p)
        for (int i = 0; i < counts[p]; ++i)
            CHECK(vout[displs[p] + i] == p, "allgatherv: block %d [%d] = %d", p, i, vout[displs[p] + i]);
    memset(vout, 0xff, sizeof(int) * (size_t)total);
    MPI_Gatherv(vin, rank + 1, MPI_INT, vout, counts, displs, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int p = 0; p < nranks; ++p)
            CHECK(vout[displs[p]] == p && vout[displs[p] + counts[p] - 1] == p, "gatherv: block %d", p);
    for (int i = 0; i < total; ++i) vout[i] = i;
    int *back = xmalloc(sizeof(int) * (size_t)(rank + 1));
    MPI_Scatterv(vout, counts, displs, MPI_INT, back, rank + 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i <= rank; ++i) CHECK(back[i] == displs[rank] + i, "scatterv: [%d] = %d", i, back[i]);
    free(back);
    free(vin);
    free(vout);
    free(counts);
    free(displs);
    free(part);
    free(mine);
    free(all);
}

static void all_to_all(void) {
    /* 64 KiB per pair: rendezvous between every two ranks at once. */
    const int n = 16384;
    int *out = xmalloc(sizeof(int) * (size_t)n * nranks), *in = xmalloc(sizeof(int) * (size_t)n * nranks);
    for (int p = 0; p < nranks; ++p)
        for (int i = 0; i < n; ++i) out[p * n + i] = rank * 1000000 + p * 10000 + i % 10000;
    MPI_Alltoall(out, n, MPI_INT, in, n, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < nranks; ++p)
        for (int i = 0; i < n; ++i)
            if (in[p * n + i] != p * 1000000 + rank * 10000 + i % 10000) {
                CHECK(0, "alltoall from %d: [%d] = %d", p, i, in[p * n + i]);
                p = nranks;
                break;
            }
    /* alltoallv: rank r sends p + r + 1 ints to rank p, each equal to r * 100 + p. */
    int *sc = xmalloc(sizeof(int) * (size_t)nranks), *sd = xmalloc(sizeof(int) * (size_t)nranks);
    int *rc = xmalloc(sizeof(int) * (size_t)nranks), *rd = xmalloc(sizeof(int) * (size_t)nranks);
    int stotal = 0, rtotal = 0;
    for (int p = 0; p < nranks; ++p) {
        sc[p] = p + rank + 1;
        sd[p] = stotal;
        stotal += sc[p];
        rc[p] = rank + p + 1;
        rd[p] = rtotal;
        rtotal += rc[p];
    }
    for (int p = 0; p < nranks; ++p)
        for (int i = 0; i < sc[p]; ++i) out[sd[p] + i] = rank * 100 + p;
    MPI_Alltoallv(out, sc, sd, MPI_INT, in, rc, rd, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < nranks; ++p)
        for (int i = 0; i < rc[p]; ++i)
            CHECK(in[rd[p] + i] == p * 100 + rank, "alltoallv from %d: [%d] = %d", p, i, in[rd[p] + i]);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    free(out);
    free(in);
}

static void scans_and_reduce_scatter(void) {
    long v = rank + 1, incl = 0, excl = -1;
    MPI_Scan(&v, &incl, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(incl == (long)(rank + 1) * (rank + 2) / 2, "scan = %ld", incl);
    MPI_Exscan(&v, &excl, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank > 0) CHECK(excl == (long)rank * (rank + 1) / 2, "exscan = %ld", excl);
    const int block = 3;
    int *in = xmalloc(sizeof(int) * (size_t)block * nranks), out[3];
    for (int i = 0; i < block * nranks; ++i) in[i] = i + rank;
    MPI_Reduce_scatter_block(in, out, block, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < block; ++i) {
        const int idx = rank * block + i;
        CHECK(out[i] == idx * nranks + nranks * (nranks - 1) / 2, "reduce_scatter_block [%d] = %d", i, out[i]);
    }
    free(in);
}

static void split_communicator(void) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half); /* reversed order inside */
    int hrank, hsize;
    MPI_Comm_rank(half, &hrank);
    MPI_Comm_size(half, &hsize);
    const int want_size = (nranks + (rank % 2 ? 0 : 1)) / 2;
    CHECK(hsize == want_size, "split: size %d, want %d", hsize, want_size);
    int world_ranks_sum = 0;
    MPI_Allreduce(&rank, &world_ranks_sum, 1, MPI_INT, MPI_SUM, half);
    int want = 0;
    for (int r = rank % 2; r < nranks; r += 2) want += r;
    CHECK(world_ranks_sum == want, "split allreduce = %d, want %d", world_ranks_sum, want);
    int top = -1;
    if (hrank == 0) top = rank;
    MPI_Bcast(&top, 1, MPI_INT, 0, half);
    int highest = rank % 2;
    for (int r = rank % 2; r < nranks; r += 2) highest = r;
    CHECK(top == highest, "split: rank 0 of the half is world %d, want %d", top, highest);
    MPI_Comm_free(&half);
}

static void nonblocking_overlap(void) {
    enum { N = 50000 };
    long *a = xmalloc(N * sizeof(long)), *ra = xmalloc(N * sizeof(long));
    for (int i = 0; i < N; ++i) a[i] = i;
    int b = rank, rb = 0;
    unsigned char *c = xmalloc(1 << 20);
    if (rank == 0)
        fill(c, 0, 1 << 20);
    MPI_Request reqs[4];
    MPI_Iallreduce(a, ra, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &reqs[0]);
    MPI_Iallreduce(&b, &rb, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &reqs[1]);
    MPI_Ibcast(c, 1 << 20, MPI_BYTE, 0, MPI_COMM_WORLD, &reqs[2]);
    MPI_Ibarrier(MPI_COMM_WORLD, &reqs[3]);
    MPI_Waitall(4, reqs, MPI_STATUSES_IGNORE);
    for (int i = 0; i < N; ++i)
        if (ra[i] != (long)i * nranks) {
            CHECK(0, "iallreduce [%d] = %ld", i, ra[i]);
            break;
        }
    CHECK(rb == nranks - 1, "iallreduce max = %d", rb);
    verify(c, 0, 1 << 20, "ibcast");
    free(a);
    free(ra);
    free(c);
}

int main(int argc, char **argv) {
    check_init(&argc, &argv, &rank, &nranks);
    MPI_Barrier(MPI_COMM_WORLD);
    bcast_every_root();
    reductions();
    gathers_and_scatters();
    all_to_all();
    scans_and_reduce_scatter();
    split_communicator();
    nonblocking_overlap();
    MPI_Barrier(MPI_COMM_WORLD);
    return check_finish("coll");
}

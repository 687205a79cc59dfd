/* Point-to-point and collectives smoke test for MPI over UCX_TLS=portals: every rank sends to
 * its right neighbour and receives from its left one, for sizes from 0 B to 4 MiB (eager and
 * rendezvous), with tags and MPI_ANY_SOURCE, then an allreduce and a barrier. Every byte is
 * checked. Exit status 0 only when all ranks agree it passed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char pattern(int rank, size_t size, size_t i) {
    return (unsigned char)(rank * 131 + size * 7 + i * 13);
}

int main(int argc, char **argv) {
    int rank, nranks, errors = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    const size_t max = (size_t)4 << 20;
    unsigned char *out = malloc(max), *in = malloc(max);
    if (!out || !in) MPI_Abort(MPI_COMM_WORLD, 2);

    for (size_t size = 0; size <= max; size = size ? size * 4 : 1) {
        for (size_t i = 0; i < size; ++i) out[i] = pattern(rank, size, i);
        memset(in, 0, size);
        const int tag = (int)(size % 32749);
        MPI_Request reqs[2];
        MPI_Status st;
        /* Odd sizes go through MPI_ANY_SOURCE, so both matching paths are used. */
        const int source = (size & 1) ? MPI_ANY_SOURCE : left;
        MPI_Irecv(in, (int)size, MPI_BYTE, source, tag, MPI_COMM_WORLD, &reqs[0]);
        MPI_Isend(out, (int)size, MPI_BYTE, right, tag, MPI_COMM_WORLD, &reqs[1]);
        MPI_Wait(&reqs[0], &st);
        MPI_Wait(&reqs[1], MPI_STATUS_IGNORE);
        int count;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (st.MPI_SOURCE != left || st.MPI_TAG != tag || (size_t)count != size) {
            fprintf(stderr, "rank %d: %zu B: source %d tag %d count %d\n", rank, size, st.MPI_SOURCE,
                    st.MPI_TAG, count);
            ++errors;
        }
        for (size_t i = 0; i < size; ++i)
            if (in[i] != pattern(left, size, i)) {
                fprintf(stderr, "rank %d: %zu B: byte %zu is %u, want %u\n", rank, size, i, in[i],
                        pattern(left, size, i));
                ++errors;
                break;
            }
    }

    long sum = 0, mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != (long)nranks * (nranks + 1) / 2) {
        fprintf(stderr, "rank %d: allreduce gave %ld\n", rank, sum);
        ++errors;
    }
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d of %d on %s: %s\n", rank, nranks, host, total ? "FAILED" : "ok");
    free(in);
    free(out);
    MPI_Finalize();
    return total ? 1 : 0;
}

/* Receives posted before their messages arrive, 4 KiB (UCX_PORTALS_TM_MIN_RECV: smaller ones
 * UCP keeps in software) to 1 MiB (eager and rendezvous): with
 * UCX's tag offload these are matched by the Portals engine on the priority list, not by
 * UCP in software. run_integration.sh runs it with UCX_PORTALS_STATS=y and checks the
 * engine's counters; the program itself checks the data. Every rank receives ROUNDS x
 * PER_ROUND messages from its left neighbour. */
#include "mpi_check.h"

enum { ROUNDS = 4, PER_ROUND = 250 };

int main(int argc, char **argv) {
    int rank, nranks;
    check_init(&argc, &argv, &rank, &nranks);
    const int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    static const size_t sizes[ROUNDS] = {4096, 8192, 65536, 1 << 20};
    /* UCP offloads receives only on an interface that has seen an unexpected message of the
     * tag-offload protocols at least as long as its offload threshold (small ones go by active
     * message): one of 4 KiB goes first. */
    int token[1024] = {rank}, got[1024] = {-1};
    MPI_Request warm;
    MPI_Isend(token, 1024, MPI_INT, right, 1, MPI_COMM_WORLD, &warm);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Recv(got, 1024, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&warm, MPI_STATUS_IGNORE);
    CHECK(got[0] == left, "warm-up: got %d", got[0]);

    for (int r = 0; r < ROUNDS; ++r) {
        const size_t size = sizes[r];
        unsigned char *in = xmalloc(size * PER_ROUND), *out = xmalloc(size * PER_ROUND);
        MPI_Request reqs[2 * PER_ROUND];
        for (int i = 0; i < PER_ROUND; ++i)
            MPI_Irecv(in + i * size, (int)size, MPI_BYTE, left, 100 + i, MPI_COMM_WORLD, &reqs[i]);
        MPI_Barrier(MPI_COMM_WORLD); /* every receive is posted before any message is sent */
        for (int i = 0; i < PER_ROUND; ++i) {
            fill(out + i * size, rank * PER_ROUND + i, size);
            MPI_Isend(out + i * size, (int)size, MPI_BYTE, right, 100 + i, MPI_COMM_WORLD, &reqs[PER_ROUND + i]);
        }
        MPI_Waitall(2 * PER_ROUND, reqs, MPI_STATUSES_IGNORE);
        for (int i = 0; i < PER_ROUND; ++i)
            if (!verify(in + i * size, left * PER_ROUND + i, size, "preposted")) break;
        free(in);
        free(out);
    }
    return check_finish("tag_offload");
}

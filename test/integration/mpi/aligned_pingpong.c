/* Issue 58: MPI with page-aligned send and receive buffers (posix_memalign to the page size,
 * as the OSU benchmarks and many applications allocate them), a ping-pong of 4 KiB to 1 MiB.
 * The program checks every byte of the last message of each size; run_integration.sh runs
 * it with few and with many iterations under UCX_PORTALS_STATS=y and checks that the pages
 * adopted and the peers' files mapped do not grow with the iterations (they once were a new
 * memory file, a copy and a /proc open per message), and, under strace, that the
 * process's system calls do not grow with them either up to 16 KiB (the eager sizes).
 *
 *   aligned_pingpong [iterations per size] [largest size, default 1 MiB]            */
#include "mpi_check.h"

int main(int argc, char **argv) {
    int rank, nranks;
    check_init(&argc, &argv, &rank, &nranks);
    const int iters = argc > 1 ? atoi(argv[1]) : 100;
    const size_t largest = argc > 2 ? strtoul(argv[2], NULL, 0) : 0;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), max = largest >= 4096 ? largest : (size_t)1 << 20;
    void *s = NULL, *r = NULL;
    if (posix_memalign(&s, page, max) || posix_memalign(&r, page, max)) {
        CHECK(0, "posix_memalign failed");
        return check_finish("aligned_pingpong");
    }
    unsigned char *sbuf = s, *rbuf = r;
    const int peer = rank ^ 1;
    if (peer < nranks) {
        for (size_t size = 4096; size <= max; size *= 2) {
            fill(sbuf, rank, size);
            for (int i = 0; i < iters; ++i) {
                if (rank % 2 == 0) {
                    MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
                }
            }
            verify(rbuf, peer, size, "page-aligned ping-pong");
            memset(rbuf, 0, size);
        }
    }
    free(s);
    free(r);
    return check_finish("aligned_pingpong");
}

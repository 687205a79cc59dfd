/* OSU-style MPI point-to-point benchmark between ranks 0 and 1 (the OSU suite is not packaged
 * in Debian): latency (ping-pong, half round trip), bandwidth (a window of nonblocking sends
 * acknowledged by one reply) and message rate (a window of small messages), for message sizes
 * from MIN to MAX. Each size runs several trials and prints the best (this machine's latency is
 * bimodal under noise); the receiver checks the first and last byte of every message so a
 * broken transport cannot look fast.
 *
 *   mpi_bench [lat|bw|rate] [min_bytes] [max_bytes] [iterations]
 *
 * Output: one line per size, "<test> <bytes> <value> <unit>", easy to join across runs. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 64, TRIALS = 5 };

static int rank;

static void check_byte(const unsigned char *buf, size_t size, unsigned char want) {
    if (size && (buf[0] != want || buf[size - 1] != want)) {
        fprintf(stderr, "mpi_bench: rank %d: %zu-byte message arrived wrong\n", rank, size);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

/* Microseconds for one-way latency (half the round trip). */
static double latency(unsigned char *buf, size_t size, int iters) {
    const int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
            buf[0] = buf[size ? size - 1 : 0] = (unsigned char)i;
            MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check_byte(buf, size, (unsigned char)i);
            MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
}

/* Rank 0 sends windows of messages, rank 1 acknowledges each window; MB/s or messages/s. */
static double stream(unsigned char *buf, size_t size, int iters, int rate) {
    const int peer = 1 - rank;
    MPI_Request reqs[WINDOW];
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
            buf[0] = buf[size ? size - 1 : 0] = (unsigned char)i;
            for (int w = 0; w < WINDOW; ++w)
                MPI_Isend(buf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            MPI_Recv(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            /* Every receive of the window lands in its own slice of buf. */
            for (int w = 0; w < WINDOW; ++w)
                MPI_Irecv(buf + (size_t)w * size, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            check_byte(buf + (size_t)(WINDOW - 1) * size, size, (unsigned char)i);
            MPI_Send(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
        }
    }
    const double seconds = MPI_Wtime() - t0;
    const double messages = (double)iters * WINDOW;
    return rate ? messages / seconds : messages * (double)size / seconds / 1e6;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *test = argc > 1 ? argv[1] : "lat";
    const size_t min = argc > 2 ? strtoull(argv[2], NULL, 0) : 0;
    const size_t max = argc > 3 ? strtoull(argv[3], NULL, 0) : (size_t)4 << 20;
    const int base_iters = argc > 4 ? atoi(argv[4]) : 2000;
    const int lat = !strcmp(test, "lat"), rate = !strcmp(test, "rate");
    if (nranks != 2 || (!lat && !rate && strcmp(test, "bw"))) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -n 2 mpi_bench [lat|bw|rate] [min] [max] [iterations]\n");
        MPI_Finalize();
        return 2;
    }
    unsigned char *buf = malloc((lat ? 1 : WINDOW) * (max ? max : 1));
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 2);
    memset(buf, 0, (lat ? 1 : WINDOW) * (max ? max : 1));
    for (size_t size = min; size <= max; size = size ? size * 2 : 1) {
        /* Fewer iterations for large messages: about the same bytes per size. */
        int iters = base_iters;
        if (size > 8192) iters = (int)(base_iters * 8192.0 / (double)size) + 10;
        if (!lat) iters = iters / 8 + 5;
        double best = lat ? 1e30 : 0;
        (lat ? latency(buf, size, iters / 10 + 1) : stream(buf, size, 2, rate)); /* warm-up */
        for (int t = 0; t < TRIALS; ++t) {
            const double v = lat ? latency(buf, size, iters) : stream(buf, size, iters, rate);
            if (lat ? v < best : v > best) best = v;
        }
        if (rank == 0) {
            printf("%s %zu %.3f %s\n", test, size, best, lat ? "us" : rate ? "msg/s" : "MB/s");
            fflush(stdout);
        }
        if (size == max) break;
    }
    free(buf);
    MPI_Finalize();
    return 0;
}

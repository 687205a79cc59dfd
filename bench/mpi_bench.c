/* OSU-style MPI point-to-point benchmark between ranks 0 and 1 (the OSU suite is not packaged
 * in Debian): latency (ping-pong, half round trip), bandwidth (a window of nonblocking sends
 * acknowledged by one reply) and message rate (a window of small messages), for message sizes
 * from MIN to MAX. Send and receive buffers are separate, allocated as BUFFERS says:
 *
 *   aligned    posix_memalign to the page size (what OSU and many applications do)
 *   unaligned  malloc'd, 64 bytes past a page boundary (never whole pages)
 *   alloc_mem  MPI_Alloc_mem (the MPI library's, here UCX's, own memory)
 *
 * Each size runs several trials; the value is the average over every iteration of every trial
 * (what OSU and users report), with the best trial printed beside it. The receiver checks the
 * first and last byte of every message so a broken transport cannot look fast.
 *
 *   mpi_bench [lat|bw|rate] [min_bytes] [max_bytes] [iterations] [aligned|unaligned|alloc_mem]
 *
 * Output: one line per size, "<test> <bytes> <average> <unit> best <best>", easy to join
 * across runs. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { WINDOW = 64, TRIALS = 5 };

static int rank;

static void check_byte(const unsigned char *buf, size_t size, unsigned char want) {
    if (size && (buf[0] != want || buf[size - 1] != want)) {
        fprintf(stderr, "mpi_bench: rank %d: %zu-byte message arrived wrong\n", rank, size);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

/* Microseconds for one-way latency (half the round trip). */
static double latency(unsigned char *sbuf, unsigned char *rbuf, size_t size, int iters) {
    const int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
            sbuf[0] = sbuf[size ? size - 1 : 0] = (unsigned char)i;
            MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check_byte(rbuf, size, (unsigned char)~i);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check_byte(rbuf, size, (unsigned char)i);
            sbuf[0] = sbuf[size ? size - 1 : 0] = (unsigned char)~i;
            MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
}

/* Rank 0 sends windows of messages, rank 1 acknowledges each window; seconds taken. */
static double stream(unsigned char *sbuf, unsigned char *rbuf, size_t size, int iters) {
    const int peer = 1 - rank;
    MPI_Request reqs[WINDOW];
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
            sbuf[0] = sbuf[size ? size - 1 : 0] = (unsigned char)i;
            for (int w = 0; w < WINDOW; ++w)
                MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            MPI_Recv(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            /* Every receive of the window lands in its own slice of the buffer. */
            for (int w = 0; w < WINDOW; ++w)
                MPI_Irecv(rbuf + (size_t)w * size, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            check_byte(rbuf + (size_t)(WINDOW - 1) * size, size, (unsigned char)i);
            MPI_Send(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
        }
    }
    return MPI_Wtime() - t0;
}

enum kind { ALIGNED, UNALIGNED, ALLOC_MEM };

static unsigned char *buffer(enum kind k, size_t len, void **to_free) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p = NULL;
    *to_free = NULL;
    switch (k) {
        case ALIGNED:
            if (posix_memalign(to_free, page, len)) *to_free = NULL;
            p = *to_free;
            break;
        case UNALIGNED: {
            /* 64 bytes past a page boundary: no page of it is the buffer's alone. */
            unsigned char *raw = malloc(len + 2 * page);
            *to_free = raw;
            if (raw) p = (unsigned char *)(((size_t)raw + page - 1) / page * page + 64);
            break;
        }
        case ALLOC_MEM:
            if (MPI_Alloc_mem((MPI_Aint)len, MPI_INFO_NULL, &p) != MPI_SUCCESS) p = NULL;
            break;
    }
    if (!p) MPI_Abort(MPI_COMM_WORLD, 2);
    memset(p, 0, len);
    return p;
}

static void release(enum kind k, unsigned char *p, void *to_free) {
    if (k == ALLOC_MEM)
        MPI_Free_mem(p);
    else
        free(to_free);
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
    const char *kind_name = argc > 5 ? argv[5] : "aligned";
    const int lat = !strcmp(test, "lat"), rate = !strcmp(test, "rate");
    enum kind kind = !strcmp(kind_name, "aligned")     ? ALIGNED
                     : !strcmp(kind_name, "unaligned") ? UNALIGNED
                                                       : ALLOC_MEM;
    if (nranks != 2 || (!lat && !rate && strcmp(test, "bw")) ||
        (kind == ALLOC_MEM && strcmp(kind_name, "alloc_mem"))) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: mpirun -n 2 mpi_bench [lat|bw|rate] [min] [max] [iterations] "
                    "[aligned|unaligned|alloc_mem]\n");
        MPI_Finalize();
        return 2;
    }
    const size_t len = (lat ? 1 : WINDOW) * (max ? max : 1);
    void *sfree, *rfree;
    unsigned char *sbuf = buffer(kind, len, &sfree), *rbuf = buffer(kind, len, &rfree);
    for (size_t size = min; size <= max; size = size ? size * 2 : 1) {
        /* Fewer iterations for large messages: about the same bytes per size. */
        int iters = base_iters;
        if (size > 8192) iters = (int)(base_iters * 8192.0 / (double)size) + 10;
        if (!lat) iters = iters / 8 + 5;
        if (lat)
            latency(sbuf, rbuf, size, iters / 10 + 1); /* warm-up */
        else
            stream(sbuf, rbuf, size, 2);
        double best = lat ? 1e30 : 0, sum = 0;
        for (int t = 0; t < TRIALS; ++t) {
            double v;
            if (lat) {
                v = latency(sbuf, rbuf, size, iters);
                sum += v;
            } else {
                const double seconds = stream(sbuf, rbuf, size, iters);
                const double messages = (double)iters * WINDOW;
                v = rate ? messages / seconds : messages * (double)size / seconds / 1e6;
                sum += seconds;
            }
            if (lat ? v < best : v > best) best = v;
        }
        /* Streaming: the total over the total time, not an average of rates. */
        const double messages = (double)iters * WINDOW * TRIALS;
        const double avg = lat ? sum / TRIALS : rate ? messages / sum : messages * (double)size / sum / 1e6;
        if (rank == 0) {
            printf("%s %zu %.3f %s best %.3f\n", test, size, avg, lat ? "us" : rate ? "msg/s" : "MB/s", best);
            fflush(stdout);
        }
        if (size == max) break;
    }
    release(kind, sbuf, sfree);
    release(kind, rbuf, rfree);
    MPI_Finalize();
    return 0;
}

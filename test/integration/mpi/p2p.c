/* MPI point-to-point over UCX_TLS=portals, every byte checked: a ring from 0 B to 64 MiB
 * (eager and rendezvous) with tags and MPI_ANY_SOURCE; MPI_ANY_TAG; the non-overtaking order
 * of one sender's messages across the eager/rendezvous switch; messages that arrive before
 * their receive (unexpected) and after it (expected); probe, iprobe, mprobe/mrecv; cancel of
 * a posted receive; a synchronous send that must not complete before its receive is posted;
 * and thousands of outstanding nonblocking operations matched by exact tags in reverse order.
 * Needs 2 or more ranks. */
#include "mpi_check.h"

enum { TAG_GO = 30001, TAG_SSEND = 30002, TAG_NOBODY = 30003, TAG_PROBE = 30004 };

static int rank, nranks, right, left;

static void ring(size_t max) {
    unsigned char *out = xmalloc(max), *in = xmalloc(max);
    for (size_t size = 0; size <= max; size = size ? size * 4 : 1) {
        fill(out, rank, size);
        memset(in, 0, size);
        const int tag = (int)(size % 32749);
        /* Odd sizes go through MPI_ANY_SOURCE, so both matching paths are used. */
        const int source = (size & 1) ? MPI_ANY_SOURCE : left;
        MPI_Request reqs[2];
        MPI_Status st;
        MPI_Irecv(in, (int)size, MPI_BYTE, source, tag, MPI_COMM_WORLD, &reqs[0]);
        MPI_Isend(out, (int)size, MPI_BYTE, right, tag, MPI_COMM_WORLD, &reqs[1]);
        MPI_Wait(&reqs[0], &st);
        MPI_Wait(&reqs[1], MPI_STATUS_IGNORE);
        int count;
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(st.MPI_SOURCE == left && st.MPI_TAG == tag && (size_t)count == size,
              "ring %zu B: source %d tag %d count %d", size, st.MPI_SOURCE, st.MPI_TAG, count);
        verify(in, left, size, "ring");
    }
    free(in);
    free(out);
}

static void any_tag(void) {
    int out[4] = {rank, 1, 2, 3}, in[4] = {-1};
    MPI_Status st;
    MPI_Sendrecv(out, 4, MPI_INT, right, 100 + rank, in, 4, MPI_INT, left, MPI_ANY_TAG,
                 MPI_COMM_WORLD, &st);
    CHECK(st.MPI_TAG == 100 + left && st.MPI_SOURCE == left && in[0] == left,
          "any_tag: tag %d source %d first %d", st.MPI_TAG, st.MPI_SOURCE, in[0]);
}

/* Sizes alternate around the eager/rendezvous switch; MPI says messages from one sender with
 * the same tag are received in the order sent, whatever protocol carried them. */
static void non_overtaking(void) {
    enum { N = 24 };
    static const size_t sizes[] = {8, 300000, 0, 16384, 2, 1 << 20, 1024, 65536};
    unsigned char *out[N], *in[N];
    MPI_Request reqs[2 * N];
    for (int i = 0; i < N; ++i) {
        const size_t size = sizes[i % 8];
        out[i] = xmalloc(size + 4);
        in[i] = xmalloc(size + 4);
        fill(out[i], rank * 64 + i, size + 4);
    }
    for (int i = 0; i < N; ++i)
        MPI_Isend(out[i], (int)(sizes[i % 8] + 4), MPI_BYTE, right, 7, MPI_COMM_WORLD, &reqs[i]);
    for (int i = 0; i < N; ++i)
        MPI_Irecv(in[i], (int)(sizes[i % 8] + 4), MPI_BYTE, left, 7, MPI_COMM_WORLD,
                  &reqs[N + i]);
    MPI_Waitall(2 * N, reqs, MPI_STATUSES_IGNORE);
    for (int i = 0; i < N; ++i) {
        verify(in[i], left * 64 + i, sizes[i % 8] + 4, "non-overtaking");
        free(in[i]);
        free(out[i]);
    }
}

/* Every message is sent, and waited for at the sender where the protocol allows, before its
 * receive is posted (the barrier), so the receiver finds them all unexpected. */
static void unexpected(void) {
    static const size_t sizes[] = {0, 1, 100, 1024, 8192, 60000, 200000, 4 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    unsigned char *out[N], *in[N];
    MPI_Request sends[N];
    for (int i = 0; i < N; ++i) {
        out[i] = xmalloc(sizes[i]);
        in[i] = xmalloc(sizes[i]);
        fill(out[i], rank, sizes[i]);
        MPI_Isend(out[i], (int)sizes[i], MPI_BYTE, right, 200 + i, MPI_COMM_WORLD, &sends[i]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* Received in reverse order: matching must pick each by tag, not take the oldest. */
    for (int i = N - 1; i >= 0; --i) {
        MPI_Status st;
        MPI_Recv(in[i], (int)sizes[i], MPI_BYTE, left, 200 + i, MPI_COMM_WORLD, &st);
        int count;
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK((size_t)count == sizes[i], "unexpected %zu B: count %d", sizes[i], count);
        verify(in[i], left, sizes[i], "unexpected");
    }
    MPI_Waitall(N, sends, MPI_STATUSES_IGNORE);
    for (int i = 0; i < N; ++i) {
        free(in[i]);
        free(out[i]);
    }
}

static void probes(void) {
    static const size_t sizes[] = {0, 40, 5000, 300000};
    for (size_t k = 0; k < 4; ++k) {
        const size_t size = sizes[k];
        unsigned char *out = xmalloc(size), *in = xmalloc(size);
        fill(out, rank, size);
        MPI_Request send;
        MPI_Isend(out, (int)size, MPI_BYTE, right, TAG_PROBE + (int)k, MPI_COMM_WORLD, &send);
        MPI_Status st;
        int count = -1;
        if (k == 0) {
            MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        } else if (k == 1) {
            int flag = 0;
            while (!flag) MPI_Iprobe(left, TAG_PROBE + 1, MPI_COMM_WORLD, &flag, &st);
        }
        if (k < 2) {
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_PROBE + (int)k &&
                      (size_t)count == size,
                  "probe %zu B: source %d tag %d count %d", size, st.MPI_SOURCE, st.MPI_TAG, count);
            MPI_Recv(in, (int)size, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        } else {
            /* A matched probe takes the message out of matching; only its handle receives it. */
            MPI_Message msg;
            if (k == 2) {
                MPI_Mprobe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
            } else {
                int flag = 0;
                while (!flag) MPI_Improbe(MPI_ANY_SOURCE, TAG_PROBE + 3, MPI_COMM_WORLD, &flag, &msg, &st);
            }
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK(st.MPI_SOURCE == left && (size_t)count == size, "mprobe %zu B: source %d count %d",
                  size, st.MPI_SOURCE, count);
            MPI_Mrecv(in, (int)size, MPI_BYTE, &msg, &st);
            CHECK(msg == MPI_MESSAGE_NULL, "mrecv left its message handle");
        }
        MPI_Wait(&send, MPI_STATUS_IGNORE);
        verify(in, left, size, "probe");
        free(in);
        free(out);
    }
}

static void cancel_posted_receive(void) {
    int buf = 0;
    MPI_Request req;
    MPI_Status st;
    MPI_Irecv(&buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_NOBODY, MPI_COMM_WORLD, &req);
    MPI_Cancel(&req);
    MPI_Wait(&req, &st);
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "a receive nobody sends to was not cancelled");
    /* The cancelled receive must not take a later message with the same tag (sent only once
     * every rank cancelled). */
    MPI_Barrier(MPI_COMM_WORLD);
    int out = rank + 1000, in = -1;
    MPI_Sendrecv(&out, 1, MPI_INT, right, TAG_NOBODY, &in, 1, MPI_INT, left, TAG_NOBODY,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(in == left + 1000 && buf == 0, "after cancel: got %d, cancelled buffer %d", in, buf);
}

/* Rank 0's synchronous send to rank 1 may complete only once rank 1 posted its receive, which
 * rank 1 does only after rank 0's "go" message. Eager and rendezvous sizes. */
static void synchronous_send(void) {
    static const size_t sizes[] = {4, 4096, 1 << 20};
    for (int k = 0; k < 3; ++k) {
        const size_t size = sizes[k];
        unsigned char *buf = xmalloc(size);
        if (rank == 0) {
            fill(buf, 0, size);
            MPI_Request req;
            MPI_Issend(buf, (int)size, MPI_BYTE, 1, TAG_SSEND, MPI_COMM_WORLD, &req);
            int done = 0;
            for (int i = 0; i < 2000 && !done; ++i) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            CHECK(!done, "ssend %zu B completed before its receive was posted", size);
            MPI_Send(NULL, 0, MPI_BYTE, 1, TAG_GO, MPI_COMM_WORLD);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(NULL, 0, MPI_BYTE, 0, TAG_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            memset(buf, 0, size);
            MPI_Recv(buf, (int)size, MPI_BYTE, 0, TAG_SSEND, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            verify(buf, 0, size, "ssend");
        }
        free(buf);
    }
    /* Every rank at once, with the receive posted after the synchronous send started. */
    MPI_Request req;
    int in = -1;
    MPI_Issend(&rank, 1, MPI_INT, right, TAG_SSEND, MPI_COMM_WORLD, &req);
    MPI_Recv(&in, 1, MPI_INT, left, TAG_SSEND, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    CHECK(in == left, "ssend ring: got %d", in);
}

/* Many outstanding operations to and from every peer, receives posted in the reverse order of
 * the sends, so each one is found by its exact tag among thousands. */
static void many_outstanding(int per_peer) {
    static const size_t sizes[] = {8, 2048, 40000};
    const int total = per_peer * (nranks - 1);
    MPI_Request *reqs = xmalloc(sizeof(MPI_Request) * 2 * (size_t)total);
    unsigned char **out = xmalloc(sizeof(void *) * (size_t)total);
    unsigned char **in = xmalloc(sizeof(void *) * (size_t)total);
    int n = 0;
    for (int p = 0; p < nranks; ++p) {
        if (p == rank) continue;
        for (int i = per_peer - 1; i >= 0; --i, ++n) {
            const size_t size = sizes[i % 3];
            in[n] = xmalloc(size);
            MPI_Irecv(in[n], (int)size, MPI_BYTE, p, i, MPI_COMM_WORLD, &reqs[n]);
        }
    }
    n = 0;
    for (int p = 0; p < nranks; ++p) {
        if (p == rank) continue;
        for (int i = 0; i < per_peer; ++i, ++n) {
            const size_t size = sizes[i % 3];
            out[n] = xmalloc(size);
            fill(out[n], rank * 100000 + i, size);
            MPI_Isend(out[n], (int)size, MPI_BYTE, p, i, MPI_COMM_WORLD, &reqs[total + n]);
        }
    }
    MPI_Waitall(2 * total, reqs, MPI_STATUSES_IGNORE);
    n = 0;
    for (int p = 0; p < nranks; ++p) {
        if (p == rank) continue;
        for (int i = per_peer - 1; i >= 0; --i, ++n) {
            if (!verify(in[n], p * 100000 + i, sizes[i % 3], "many outstanding")) break;
        }
    }
    for (int k = 0; k < total; ++k) {
        free(in[k]);
        free(out[k]);
    }
    free(in);
    free(out);
    free(reqs);
}

int main(int argc, char **argv) {
    check_init(&argc, &argv, &rank, &nranks);
    if (nranks < 2) {
        fprintf(stderr, "p2p needs 2 or more ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    right = (rank + 1) % nranks;
    left = (rank + nranks - 1) % nranks;
    const char *max_env = getenv("MPI_TEST_MAX_BYTES");
    ring(max_env ? strtoull(max_env, NULL, 0) : (size_t)64 << 20);
    any_tag();
    non_overtaking();
    unexpected();
    probes();
    cancel_posted_receive();
    synchronous_send();
    const char *outstanding_env = getenv("MPI_TEST_OUTSTANDING");
    many_outstanding((outstanding_env ? atoi(outstanding_env) : 3000) / (nranks - 1));
    return check_finish("p2p");
}

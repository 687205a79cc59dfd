/*
 * Matching cost against the length of the priority list (issue 5): rank 1 posts N exact-match
 * receives that nothing matches (distinct match bits, no ignore bits, like MPI receives of
 * tags still to come), then the receive the ping matches is posted after all of them, i.e.
 * at the end of the list where a list walk would find it last. A ping-pong of 8-byte puts
 * then shows what matching past N posted receives costs; N grows 10, 100, ... 100000.
 * Written against portals4.h only.
 *
 *   ptlrun -n 2 match_bench [--iters N] [--max-posted N]
 *
 * Prints per N: one-way latency (us, best of 5 trials) and the time per PtlMEAppend of the
 * decoys (us), and the latency relative to N = 10.
 */
#include <portals4.h>
#include <portals4_rt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#define PT_INDEX 7
#define PING_BITS 0x5a5a5a5a00000000ull
#define TRIALS 5

int main(int argc, char **argv) {
    long iters = 20000, max_posted = 100000;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "--max-posted") && i + 1 < argc)
            max_posted = atol(argv[++i]);
    }
    if (ptlrt_init() != 0 || ptlrt_size() != 2) {
        fprintf(stderr, "run with: ptlrun -n 2 %s\n", argv[0]);
        return 2;
    }
    rank = ptlrt_rank();
    CHECK(PtlInit());
    ptl_ni_limits_t want, got;
    memset(&want, 0, sizeof want);
    want.max_entries = (int)max_posted + 64;
    want.max_list_size = (int)max_posted + 64;
    want.max_unexpected_headers = 1024;
    want.max_eqs = want.max_cts = want.max_mds = want.max_pt_index = 64;
    want.max_iovecs = 64;
    want.max_msg_size = want.max_atomic_size = want.max_fetch_atomic_size = 1 << 20;
    want.max_waw_ordered_size = want.max_war_ordered_size = want.max_volatile_size = 64;
    ptl_handle_ni_t ni;
    CHECK(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, &want, &got, &ni));
    if (got.max_list_size < max_posted + 1 || got.max_entries < max_posted + 1) {
        fprintf(stderr, "rank %d: the NI allows %d list entries, %ld wanted\n", rank, got.max_list_size,
                max_posted);
        return 1;
    }
    CHECK(ptlrt_exchange_ids(ni, NULL));
    ptl_process_t peer = {.rank = (ptl_rank_t)(1 - rank)};

    char rbuf[64], sbuf[64];
    memset(sbuf, rank + 1, sizeof sbuf);
    ptl_handle_ct_t rx_ct, tx_ct;
    CHECK(PtlCTAlloc(ni, &rx_ct));
    CHECK(PtlCTAlloc(ni, &tx_ct));
    ptl_pt_index_t pt;
    CHECK(PtlPTAlloc(ni, 0, PTL_EQ_NONE, PT_INDEX, &pt));
    ptl_md_t md = {.start = sbuf,
                   .length = sizeof sbuf,
                   .options = PTL_MD_EVENT_CT_SEND,
                   .eq_handle = PTL_EQ_NONE,
                   .ct_handle = tx_ct};
    ptl_handle_md_t mdh;
    CHECK(PtlMDBind(ni, &md, &mdh));

    ptl_me_t ping = {.start = rbuf,
                     .length = sizeof rbuf,
                     .ct_handle = rx_ct,
                     .uid = PTL_UID_ANY,
                     .options = PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_IS_ACCESSIBLE,
                     .match_id = {.rank = PTL_RANK_ANY},
                     .match_bits = PING_BITS,
                     .ignore_bits = 0};
    ptl_me_t decoy = ping;
    decoy.ct_handle = PTL_CT_NONE;
    decoy.options = PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_IS_ACCESSIBLE;
    ptl_handle_me_t ping_me = PTL_INVALID_HANDLE;
    ptl_handle_me_t *decoys = calloc((size_t)max_posted, sizeof *decoys);
    long posted = 0;

    if (rank == 0) printf("# posted_receives one_way_latency_us append_us_each latency_vs_10\n");
    double lat10 = 0;
    ptl_size_t rx = 0, tx = 0;
    for (long n = 10; n <= max_posted; n *= 10) {
        double append_us = 0;
        if (rank == 1) {
            /* n decoys, then the ping's receive after them, at the end of the list */
            if (ping_me != PTL_INVALID_HANDLE) CHECK(PtlMEUnlink(ping_me));
            const long before = posted;
            const double t = now_us();
            for (; posted < n; ++posted) {
                decoy.match_bits = (ptl_match_bits_t)posted + 1;
                CHECK(PtlMEAppend(ni, pt, &decoy, PTL_PRIORITY_LIST, NULL, &decoys[posted]));
            }
            append_us = (now_us() - t) / (double)(n - before);
            CHECK(PtlMEAppend(ni, pt, &ping, PTL_PRIORITY_LIST, NULL, &ping_me));
        } else if (ping_me == PTL_INVALID_HANDLE) {
            CHECK(PtlMEAppend(ni, pt, &ping, PTL_PRIORITY_LIST, NULL, &ping_me));
        }
        ptlrt_barrier();
        double best = 1e30;
        for (int trial = 0; trial < TRIALS; ++trial) {
            long warm = iters / 10;
            double t0 = 0;
            for (long i = 0; i < iters + warm; ++i) {
                if (i == warm) t0 = now_us();
                if (rank == 0) {
                    CHECK(PtlPut(mdh, 0, 8, PTL_NO_ACK_REQ, peer, pt, PING_BITS, 0, NULL, 0));
                    ct_wait(rx_ct, ++rx);
                } else {
                    ct_wait(rx_ct, ++rx);
                    CHECK(PtlPut(mdh, 0, 8, PTL_NO_ACK_REQ, peer, pt, PING_BITS, 0, NULL, 0));
                }
            }
            const double lat = (now_us() - t0) / (double)iters / 2;
            if (lat < best) best = lat;
            tx += (ptl_size_t)(iters + warm);
            ct_wait(tx_ct, tx);
        }
        /* rank 1 reports its append time to rank 0 through the ping's receive */
        double shared[2] = {best, append_us};
        if (rank == 1) {
            ptl_md_t rmd = {
                .start = shared, .length = sizeof shared, .eq_handle = PTL_EQ_NONE, .ct_handle = PTL_CT_NONE};
            ptl_handle_md_t rmdh;
            CHECK(PtlMDBind(ni, &rmd, &rmdh));
            CHECK(PtlPut(rmdh, 0, sizeof shared, PTL_NO_ACK_REQ, peer, pt, PING_BITS, 0, NULL, 0));
            ptlrt_barrier();
            CHECK(PtlMDRelease(rmdh));
        } else {
            ct_wait(rx_ct, ++rx);
            memcpy(shared, rbuf, sizeof shared);
            ptlrt_barrier();
            if (n == 10) lat10 = best;
            printf("%ld %.3f %.3f %.2f\n", n, best, shared[1], best / lat10);
            fflush(stdout);
        }
    }

    ptlrt_barrier();
    CHECK(PtlMEUnlink(ping_me));
    for (long i = 0; i < posted; ++i) CHECK(PtlMEUnlink(decoys[i]));
    free(decoys);
    CHECK(PtlMDRelease(mdh));
    CHECK(PtlPTFree(ni, pt));
    CHECK(PtlCTFree(rx_ct));
    CHECK(PtlCTFree(tx_ct));
    CHECK(PtlNIFini(ni));
    PtlFini();
    ptlrt_fini();
    return 0;
}

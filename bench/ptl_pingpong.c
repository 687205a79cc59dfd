/*
 * libportals4 ping-pong, bandwidth and message rate between two ranks (ptlrun -n 2).
 * Written in C against portals4.h only, like existing Portals clients.
 *
 *   ptlrun -n 2 ptl_pingpong [--iters N] [--max-size BYTES] [--lat-sizes N,N,...] [--quick]
 *
 * Latency: rank 0 puts 8 B into rank 1's LE, rank 1 puts it back (half round trip reported);
 * --lat-sizes adds a line per size (put_lat_<N>B_us): the engine's floor under the UCT face's
 * latency at that size (malloc'd buffers, an LE, CT completions: no matching, no events).
 * Bandwidth: rank 0 streams a window of puts of each size, rank 1 acks the window.
 * Message rate: 8 B puts, windowed, counted by a CT at the target.
 */
#include <portals4.h>
#include <portals4_rt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#define PT_INDEX 5
#define WINDOW 64

int main(int argc, char **argv) {
    long iters = 20000;
    size_t max_size = 4u << 20;
    size_t lat_sizes[16];
    int n_lat_sizes = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max_size = strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--lat-sizes") && i + 1 < argc) {
            for (char *p = argv[++i]; *p && n_lat_sizes < 16; p += *p == ',')
                lat_sizes[n_lat_sizes++] = strtoul(p, &p, 0);
        } else if (!strcmp(argv[i], "--quick")) { iters = 2000; max_size = 1u << 20; }
    }
    if (max_size < 8) max_size = 8;
    size_t buf_size = max_size;
    for (int i = 0; i < n_lat_sizes; ++i) {
        if (lat_sizes[i] == 0) {
            fprintf(stderr, "ptl_pingpong: --lat-sizes takes sizes in bytes, comma-separated (e.g. 4096,16384)\n");
            return 2;
        }
        if (lat_sizes[i] > buf_size) buf_size = lat_sizes[i];
    }
    if (ptlrt_init() != 0 || ptlrt_size() != 2) {
        fprintf(stderr, "run with: ptlrun -n 2 %s\n", argv[0]);
        return 2;
    }
    rank = ptlrt_rank();
    CHECK(PtlInit());
    ptl_handle_ni_t ni;
    CHECK(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, NULL, NULL, &ni));
    CHECK(ptlrt_exchange_ids(ni, NULL));
    ptl_process_t peer = {.rank = (ptl_rank_t)(1 - rank)};

    char *rbuf = malloc(buf_size), *sbuf = malloc(buf_size);
    memset(sbuf, rank + 1, buf_size);
    ptl_handle_ct_t rx_ct, tx_ct;
    CHECK(PtlCTAlloc(ni, &rx_ct));
    CHECK(PtlCTAlloc(ni, &tx_ct));
    ptl_pt_index_t pt;
    CHECK(PtlPTAlloc(ni, 0, PTL_EQ_NONE, PT_INDEX, &pt));
    ptl_le_t le = {.start = rbuf, .length = buf_size, .ct_handle = rx_ct, .uid = PTL_UID_ANY,
                   .options = PTL_LE_OP_PUT | PTL_LE_EVENT_CT_COMM | PTL_LE_IS_ACCESSIBLE};
    ptl_handle_le_t leh;
    CHECK(PtlLEAppend(ni, pt, &le, PTL_PRIORITY_LIST, NULL, &leh));
    ptl_md_t md = {.start = sbuf, .length = buf_size, .options = PTL_MD_EVENT_CT_SEND,
                   .eq_handle = PTL_EQ_NONE, .ct_handle = tx_ct};
    ptl_handle_md_t mdh;
    CHECK(PtlMDBind(ni, &md, &mdh));
    ptlrt_barrier();

    ptl_size_t rx = 0, tx = 0;
    /* latency: 8 B, then each --lat-sizes size */
    long warm = iters / 10;
    for (int k = -1; k < n_lat_sizes; ++k) {
        const size_t size = k < 0 ? 8 : lat_sizes[k];
        double t0 = 0;
        for (long i = 0; i < iters + warm; ++i) {
            if (i == warm) t0 = now_us();
            if (rank == 0) {
                CHECK(PtlPut(mdh, 0, size, PTL_NO_ACK_REQ, peer, pt, 0, 0, NULL, 0));
                ct_wait(rx_ct, ++rx);
            } else {
                ct_wait(rx_ct, ++rx);
                CHECK(PtlPut(mdh, 0, size, PTL_NO_ACK_REQ, peer, pt, 0, 0, NULL, 0));
            }
        }
        double lat = (now_us() - t0) / iters / 2;
        tx += (ptl_size_t)(iters + warm);
        ct_wait(tx_ct, tx);
        if (rank == 0 && k < 0)
            printf("# portals-ucx libportals4, PTL_WIRE=%s (ptlrun -n 2)\nput_lat_8B_us %.3f\n",
                   getenv("PTL_WIRE") ? getenv("PTL_WIRE") : "auto", lat);
        else if (rank == 0)
            printf("put_lat_%zuB_us %.3f\n", size, lat);
        ptlrt_barrier();
    }

    /* bandwidth: rank 0 sends WINDOW puts, rank 1 returns one 8 B put per window */
    if (rank == 0) printf("# size_bytes bandwidth_MBps\n");
    for (size_t size = 1024; size <= max_size; size *= 4) {
        long reps = size >= (1u << 20) ? 8 : 32;
        ptlrt_barrier();
        double start = now_us();
        for (long r = 0; r < reps; ++r) {
            if (rank == 0) {
                for (int w = 0; w < WINDOW; ++w)
                    CHECK(PtlPut(mdh, 0, size, PTL_NO_ACK_REQ, peer, pt, 0, 0, NULL, 0));
                tx += WINDOW;
                ct_wait(rx_ct, ++rx);
            } else {
                rx += WINDOW;
                ct_wait(rx_ct, rx);
                CHECK(PtlPut(mdh, 0, 8, PTL_NO_ACK_REQ, peer, pt, 0, 0, NULL, 0));
                ++tx;
            }
        }
        double us = now_us() - start;
        ct_wait(tx_ct, tx);
        if (rank == 0) printf("%zu %.1f\n", size, (double)size * WINDOW * reps / us);
    }

    /* message rate: 8 B puts */
    ptlrt_barrier();
    long msgs = iters * 5;
    double start = now_us();
    if (rank == 0) {
        for (long i = 0; i < msgs; ++i) {
            CHECK(PtlPut(mdh, 0, 8, PTL_NO_ACK_REQ, peer, pt, 0, 0, NULL, 0));
            ++tx;
            if (i % 1024 == 1023) ct_wait(tx_ct, tx - 512);
        }
        ct_wait(rx_ct, ++rx);
    } else {
        rx += (ptl_size_t)msgs;
        ct_wait(rx_ct, rx);
        CHECK(PtlPut(mdh, 0, 8, PTL_NO_ACK_REQ, peer, pt, 0, 0, NULL, 0));
        ++tx;
    }
    double rate = msgs / (now_us() - start);
    ct_wait(tx_ct, tx);
    if (rank == 0) printf("msg_rate_8B_Mmsgs %.3f\n", rate);

    ptlrt_barrier();
    CHECK(PtlMDRelease(mdh));
    CHECK(PtlLEUnlink(leh));
    CHECK(PtlPTFree(ni, pt));
    CHECK(PtlCTFree(rx_ct));
    CHECK(PtlCTFree(tx_ct));
    CHECK(PtlNIFini(ni));
    PtlFini();
    ptlrt_fini();
    free(rbuf);
    free(sbuf);
    return 0;
}

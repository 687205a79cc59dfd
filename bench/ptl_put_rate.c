/*
 * libportals4 8-byte put stream between two live ranks of a logical NI whose map may be much
 * larger than the job: the per-message cost must not grow with the job (issue 33 item 4).
 * Used by bench/callgrind_per_message.sh (instructions per put, sender and target side).
 *
 *   ptlrun -n 2 ptl_put_rate [--msgs N] [--map-ranks M] [--map-at first|last] [--targets K]
 *
 * With --map-ranks M the NI's map has M ranks: the two live processes at ranks 0 and 1
 * (first) or M-2 and M-1 (last), every other rank a process id no live process has.
 * With --targets K the receiving process holds K ranks in a row and the sender's puts cycle
 * through them: a rank that talks to several neighbours in turn (what the engine keeps per
 * target must serve them all).
 * Rank 0 puts N 8 B messages (PTL_NO_ACK_REQ) into rank 1's LE, counted by a CT there; rank 1
 * answers with one put when all have landed. The LE is on the stack, not whole pages of its
 * own, so it is never exported: every put takes the message path (the engine's own cost).
 */
#include <portals4.h>
#include <portals4_rt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define PT_INDEX 5

int main(int argc, char **argv) {
    long msgs = 100000;
    long map_ranks = 0;
    int at_last = 0;
    long targets = 1;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--msgs") && i + 1 < argc)
            msgs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--map-ranks") && i + 1 < argc)
            map_ranks = atol(argv[++i]);
        else if (!strcmp(argv[i], "--map-at") && i + 1 < argc)
            at_last = !strcmp(argv[++i], "last");
        else if (!strcmp(argv[i], "--targets") && i + 1 < argc)
            targets = atol(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: ptlrun -n 2 %s [--msgs N] [--map-ranks M] [--map-at first|last] [--targets K]\n",
                    argv[0]);
            return 2;
        }
    }
    if (ptlrt_init() != 0 || ptlrt_size() != 2) {
        fprintf(stderr, "run with: ptlrun -n 2 %s\n", argv[0]);
        return 2;
    }
    if (targets < 1) targets = 1;
    if (map_ranks < 1 + targets) map_ranks = 1 + targets;
    rank = ptlrt_rank();
    CHECK(PtlInit());
    ptl_handle_ni_t ni;
    CHECK(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, NULL, NULL, &ni));

    ptl_process_t live[2], me;
    CHECK(PtlGetPhysId(ni, &me));
    if (ptlrt_allgather(&me, live, sizeof me) != 0) {
        fprintf(stderr, "rank %d: allgather failed\n", rank);
        return 1;
    }
    ptl_process_t *map = calloc((size_t)map_ranks, sizeof *map);
    const long first_live = at_last ? map_ranks - 1 - targets : 0;
    for (long r = 0; r < map_ranks; ++r) {
        /* Absent ranks: a nid no host has here, distinct pids; never addressed. */
        map[r].phys.nid = live[0].phys.nid ^ 0x80000000u;
        map[r].phys.pid = (ptl_pid_t)r;
    }
    map[first_live] = live[0];
    for (long k = 1; k <= targets; ++k) map[first_live + k] = live[1];
    CHECK(PtlSetMap(ni, (ptl_size_t)map_ranks, map));
    free(map);
    ptl_process_t peer = {.rank = (ptl_rank_t)(first_live + 1 - rank)};
    long next_target = 0;

    char rbuf[64], sbuf[64];
    memset(sbuf, rank + 1, sizeof sbuf);
    ptl_handle_ct_t rx_ct, tx_ct;
    CHECK(PtlCTAlloc(ni, &rx_ct));
    CHECK(PtlCTAlloc(ni, &tx_ct));
    ptl_pt_index_t pt;
    CHECK(PtlPTAlloc(ni, 0, PTL_EQ_NONE, PT_INDEX, &pt));
    ptl_le_t le = {.start = rbuf,
                   .length = sizeof rbuf,
                   .ct_handle = rx_ct,
                   .uid = PTL_UID_ANY,
                   .options = PTL_LE_OP_PUT | PTL_LE_EVENT_CT_COMM | PTL_LE_IS_ACCESSIBLE};
    ptl_handle_le_t leh;
    CHECK(PtlLEAppend(ni, pt, &le, PTL_PRIORITY_LIST, NULL, &leh));
    ptl_md_t md = {.start = sbuf,
                   .length = sizeof sbuf,
                   .options = PTL_MD_EVENT_CT_SEND,
                   .eq_handle = PTL_EQ_NONE,
                   .ct_handle = tx_ct};
    ptl_handle_md_t mdh;
    CHECK(PtlMDBind(ni, &md, &mdh));
    ptlrt_barrier();

    ptl_size_t tx = 0;
    double start = now_us();
    if (rank == 0) {
        for (long i = 0; i < msgs; ++i) {
            peer.rank = (ptl_rank_t)(first_live + 1 + next_target);
            next_target = next_target + 1 == targets ? 0 : next_target + 1;
            CHECK(PtlPut(mdh, 0, 8, PTL_NO_ACK_REQ, peer, pt, 0, 0, NULL, 0));
            ++tx;
            if (i % 1024 == 1023) ct_wait(tx_ct, tx - 512);
        }
        ct_wait(rx_ct, 1);
    } else {
        ct_wait(rx_ct, (ptl_size_t)msgs);
        CHECK(PtlPut(mdh, 0, 8, PTL_NO_ACK_REQ, peer, pt, 0, 0, NULL, 0));
        ++tx;
    }
    double us = now_us() - start;
    ct_wait(tx_ct, tx);
    if (rank == 0)
        printf("map_ranks %ld live_at %s targets %ld msg_rate_8B_Mmsgs %.3f\n", map_ranks,
               at_last ? "last" : "first", targets, msgs / us);

    ptlrt_barrier();
    CHECK(PtlMDRelease(mdh));
    CHECK(PtlLEUnlink(leh));
    CHECK(PtlPTFree(ni, pt));
    CHECK(PtlCTFree(rx_ct));
    CHECK(PtlCTFree(tx_ct));
    CHECK(PtlNIFini(ni));
    PtlFini();
    ptlrt_fini();
    return 0;
}

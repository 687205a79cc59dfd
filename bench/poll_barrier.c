/* A barrier of puts between the ranks of a ptlrun job, completed by polling: every round each
 * rank puts 8 bytes to every other rank and polls its EQ until it has seen the others' puts,
 * with PtlEQPoll(timeout 0), PtlEQGet or PtlEQWait. With more ranks than cores, a poller that
 * keeps its core starves the rank it waits for; bench/poll_barrier.sh compares PTL_WAIT_YIELD
 * settings. Usage: poll_barrier poll|get|wait [ROUNDS]. */
#include <portals4.h>
#include <portals4_rt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "poll";
    const int rounds = argc > 2 ? atoi(argv[2]) : 2000;
    if (ptlrt_init() != 0) return 1;
    CHECK(PtlInit());
    ptl_handle_ni_t ni;
    CHECK(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, NULL, NULL, &ni));
    CHECK(ptlrt_exchange_ids(ni, NULL));
    rank = ptlrt_rank();
    const int me = rank, n = ptlrt_size();
    ptl_handle_eq_t eq;
    CHECK(PtlEQAlloc(ni, 1024, &eq));
    ptl_pt_index_t pt;
    CHECK(PtlPTAlloc(ni, 0, eq, 0, &pt));
    static char buf[8];
    ptl_le_t le;
    memset(&le, 0, sizeof le);
    le.start = buf;
    le.length = sizeof buf;
    le.ct_handle = PTL_CT_NONE;
    le.uid = PTL_UID_ANY;
    le.options = PTL_LE_OP_PUT | PTL_LE_EVENT_LINK_DISABLE;
    ptl_handle_le_t leh;
    CHECK(PtlLEAppend(ni, pt, &le, PTL_PRIORITY_LIST, NULL, &leh));
    ptl_md_t md = {buf, sizeof buf, 0, PTL_EQ_NONE, PTL_CT_NONE};
    ptl_handle_md_t mdh;
    CHECK(PtlMDBind(ni, &md, &mdh));
    if (ptlrt_barrier() != 0) return 1;
    const double t0 = now_us();
    for (int i = 0; i < rounds; ++i) {
        for (int p = 0; p < n; ++p) {
            if (p == me) continue;
            ptl_process_t to;
            to.rank = (ptl_rank_t)p;
            CHECK(PtlPut(mdh, 0, sizeof buf, PTL_NO_ACK_REQ, to, pt, 0, 0, NULL, 0));
        }
        for (int got = 0; got < n - 1;) {
            ptl_event_t ev;
            unsigned which;
            int rc = how[0] == 'g'   ? PtlEQGet(eq, &ev)
                     : how[0] == 'w' ? PtlEQWait(eq, &ev)
                                     : PtlEQPoll(&eq, 1, 0, &ev, &which);
            if (rc == PTL_OK && ev.type == PTL_EVENT_PUT) ++got;
        }
    }
    const double us = (now_us() - t0) / rounds;
    if (me == 0) printf("%d ranks, %-4s: %10.1f us per barrier\n", n, how, us);
    (void)ct_wait; /* the shared helper this benchmark does not need */
    PtlNIFini(ni);
    PtlFini();
    return 0;
}

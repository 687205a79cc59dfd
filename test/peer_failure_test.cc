// A peer killed with operations in flight (digest F1: undeliverable operations complete with
// PTL_NI_UNDELIVERABLE), or cut off without a word (PTL_TEST_CUT_LINK, across hosts). Run by
// test/run_peer_failure.sh under `ptlrun -n 2`, on one host over each wire and across network-namespace
// hosts: rank 0, the victim, exposes memory but never drives progress (PTL_PROGRESS=manual), so whatever the
// survivor sends stays in flight; once the survivor has started a large put, a large get and a
// rendezvous-sized put, the victim is killed with SIGKILL. Rank 1 must see every operation complete, the ones
// that need the victim failed and counted, within the bound, and then finalize with nothing left pending.
#include <portals4_ext.h>
#include <portals4_rt.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "peer_failure_common.h"
#include "ptl_test_util.h"

using namespace ptltest;

namespace {

constexpr size_t kBig = size_t(64) << 20;
constexpr ptl_pt_index_t kPt = 5;
void victim(ptl_handle_ni_t ni) {
    std::vector<char> mem(kBig, 'v');
    ptl_me_t me = me_desc(mem.data(), mem.size(), PTL_ME_OP_PUT | PTL_ME_OP_GET);
    ptl_handle_me_t h;
    ASSERT_EQ(PtlMEAppend(ni, kPt, &me, PTL_PRIORITY_LIST, nullptr, &h), PTL_OK);
    ASSERT_EQ(ptlrt_barrier(), 0);  // exposed
    ASSERT_EQ(ptlrt_barrier(), 0);  // the survivor's operations are on their way
    die_as_victim();
}

void survivor(ptl_handle_ni_t ni, ptl_process_t peer) {
    ptl_handle_eq_t eq;
    ASSERT_EQ(PtlEQAlloc(ni, 64, &eq), PTL_OK);
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni, &ct), PTL_OK);
    std::vector<char> out(kBig, 's'), in(kBig, 0), rndv(kBig / 4, 'r');
    auto bind = [&](std::vector<char> &v, unsigned opts) {
        ptl_md_t md = md_desc(v.data(), v.size(), eq, ct, opts);
        ptl_handle_md_t h;
        EXPECT_EQ(PtlMDBind(ni, &md, &h), PTL_OK);
        return h;
    };
    const ptl_handle_md_t put_md = bind(out, PTL_MD_EVENT_CT_ACK);
    const ptl_handle_md_t get_md = bind(in, PTL_MD_EVENT_CT_REPLY);
    const ptl_handle_md_t rndv_md = bind(rndv, PTL_MD_EVENT_CT_SEND);
    ASSERT_EQ(ptlrt_barrier(), 0);
    EXPECT_EQ(PtlXPeerAlive(ni, peer), 1);
    ASSERT_EQ(PtlPut(put_md, 0, kBig, PTL_ACK_REQ, peer, kPt, 0, 0, nullptr, 0), PTL_OK);
    ASSERT_EQ(PtlGet(get_md, 0, kBig, peer, kPt, 0, 0, nullptr), PTL_OK);
    // Past PTL_RNDV_THRESH: on shm the victim would pull it, so its SEND waits for the peer.
    ASSERT_EQ(PtlPut(rndv_md, 0, rndv.size(), PTL_NO_ACK_REQ, peer, kPt, 0, 0, nullptr, 0), PTL_OK);
    ASSERT_EQ(ptlrt_barrier(), 0);
    const double killed = now_s();

    int sends = 0, acks = 0, replies = 0, failed = 0;
    while (sends + acks + replies < 4) {  // SEND + ACK of the put, REPLY, SEND of the rndv put
        ptl_event_t ev{};
        unsigned which;
        const int rc = PtlEQPoll(&eq, 1, ptl_time_t(failure_bound_seconds() * 1000), &ev, &which);
        ASSERT_EQ(rc, PTL_OK) << "an operation to the killed peer never completed";
        sends += ev.type == PTL_EVENT_SEND;
        acks += ev.type == PTL_EVENT_ACK;
        replies += ev.type == PTL_EVENT_REPLY;
        if (ev.type != PTL_EVENT_SEND) {
            EXPECT_EQ(ev.ni_fail_type, PTL_NI_UNDELIVERABLE) << "event " << ev.type;
            failed += ev.ni_fail_type != PTL_NI_OK;
        }
    }
    const double took = now_s() - killed;
    std::printf("peer failure noticed: %d operations failed %.3f s after the kill\n", failed, took);
    EXPECT_LT(took, failure_bound_seconds());
    EXPECT_EQ(acks, 1);
    EXPECT_EQ(replies, 1);
    ptl_ct_event_t c;
    ASSERT_EQ(PtlCTGet(ct, &c), PTL_OK);
    EXPECT_GE(c.failure, 2u) << "the ACK and the REPLY count as failures";

    // Known dead now: the engine says so, and a new operation fails at once.
    EXPECT_EQ(PtlXPeerAlive(ni, peer), 0);
    EXPECT_EQ(PtlXPeerAlive(PTL_INVALID_HANDLE, peer), PTL_ARG_INVALID);
    const double t0 = now_s();
    ASSERT_EQ(PtlGet(get_md, 0, 8, peer, kPt, 0, 0, nullptr), PTL_OK);
    ptl_event_t ev = next_event(eq, ptl_time_t(failure_bound_seconds() * 1000));
    EXPECT_EQ(ev.type, PTL_EVENT_REPLY);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_UNDELIVERABLE);
    EXPECT_LT(now_s() - t0, 1.0);

    // Nothing is left pending: the MDs release and the NI finalizes.
    EXPECT_EQ(PtlMDRelease(put_md), PTL_OK);
    EXPECT_EQ(PtlMDRelease(get_md), PTL_OK);
    EXPECT_EQ(PtlMDRelease(rndv_md), PTL_OK);
    EXPECT_EQ(PtlCTFree(ct), PTL_OK);
    EXPECT_EQ(PtlEQFree(eq), PTL_OK);
}

}  // namespace

TEST(PeerFailure, KilledPeerFailsLargePutGetAndRendezvous_F1) {
    ASSERT_EQ(ptlrt_size(), 2) << "run with ptlrun -n 2";
    if (ptlrt_rank() == 0) setenv("PTL_PROGRESS", "manual", 1);
    ASSERT_EQ(PtlInit(), PTL_OK);
    ptl_handle_ni_t ni;
    ASSERT_EQ(
        PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr, &ni),
        PTL_OK);
    // The portal's events need the victim's CPU: no operation to it can take the direct path,
    // which would complete it in the survivor's call, before the kill.
    ptl_handle_eq_t pt_eq;
    ASSERT_EQ(PtlEQAlloc(ni, 64, &pt_eq), PTL_OK);
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni, 0, pt_eq, kPt, &pt), PTL_OK);
    ptl_process_t ids[2];
    ASSERT_EQ(ptlrt_exchange_ids(ni, ids), PTL_OK);
    if (ptlrt_rank() == 0)
        victim(ni);
    else
        survivor(ni, ids[0]);
    EXPECT_EQ(PtlNIFini(ni), PTL_OK);
    PtlFini();
}

int main(int argc, char **argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (ptlrt_init() != 0) {
        std::fprintf(stderr, "peer_failure_test: cannot join the ptlrun job\n");
        return 1;
    }
    return RUN_ALL_TESTS();
}

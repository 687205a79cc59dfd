// §3.5-§3.9, §3.17, §3.18 and bad input: initialization, NIs, PTs, identification, bundles,
// handles; every call's error returns (PTL_NO_INIT, PTL_ARG_INVALID, ...) with no crash.
#include <unistd.h>

#include <cstring>
#include <thread>

#include <portals4_ext.h>

#include "ptl_test_util.h"

using namespace ptltest;

TEST(Init_F01_F02, NoInitBeforePtlInitAndHandleIsEqualWorksWithout) {
    // Table 3-7: everything but PtlInit/PtlFini/PtlHandleIsEqual returns PTL_NO_INIT.
    ptl_handle_ni_t ni;
    EXPECT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr, &ni),
              PTL_NO_INIT);
    EXPECT_EQ(PtlMDRelease(1), PTL_NO_INIT);
    EXPECT_EQ(PtlCTInc(1, ptl_ct_event_t{1, 0}), PTL_NO_INIT);
    EXPECT_EQ(PtlAtomicSync(), PTL_NO_INIT);
    ptl_event_t ev;
    EXPECT_EQ(PtlEQGet(1, &ev), PTL_NO_INIT);
    EXPECT_NE(PtlHandleIsEqual(PTL_INVALID_HANDLE, PTL_INVALID_HANDLE), 0);  // F53
    EXPECT_EQ(PtlHandleIsEqual(PTL_EQ_NONE, PTL_CT_NONE), 0);
    PtlFini();  // unmatched PtlFini is harmless
}

TEST(Init_F01_F02, ReferenceCounted) {
    ASSERT_EQ(PtlInit(), PTL_OK);
    ASSERT_EQ(PtlInit(), PTL_OK);
    PtlFini();
    ptl_handle_ni_t ni;
    ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr, &ni), PTL_OK);
    EXPECT_EQ(PtlNIFini(ni), PTL_OK);
    PtlFini();
    EXPECT_EQ(PtlAtomicSync(), PTL_NO_INIT);
}

TEST(Version_G6, MacrosAre4And3) {
    static_assert(PTL_MAJOR_VERSION == 4 && PTL_MINOR_VERSION == 3);
    // Appendix Z values, so reference-header programs are binary compatible.
    static_assert(PTL_EQ_NONE == 0x3fffffff && PTL_CT_NONE == 0x5fffffff && PTL_PID_ANY == 0xffff);
    static_assert(PTL_ME_LOCAL_INC_UH_RLENGTH == (1 << 18) && PTL_MD_EVENT_CT_BYTES == (1 << 14));
    static_assert(PTL_EVENT_SEARCH == 15 && PTL_EVENT_ERROR == 16 && PTL_DIFF == 18 && PTL_ABORTED == 15);
    static_assert(sizeof(ptl_handle_any_t) == 4 && sizeof(ptl_size_t) == 8);
}

class NiTest : public LoopbackTest {};

TEST_F(NiTest, F04_SecondInitReturnsSameHandleAndLimits) {
    ptl_handle_ni_t again;
    ptl_ni_limits_t lim{};
    ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, 77, nullptr, &lim, &again), PTL_OK);
    EXPECT_EQ(again, ni_);
    EXPECT_EQ(lim.max_pt_index, limits_.max_pt_index);
    EXPECT_EQ(PtlNIFini(again), PTL_OK);  // refcount: ni_ still valid
    ptl_sr_value_t v;
    EXPECT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &v), PTL_OK);
}

TEST_F(NiTest, F04_LimitsMeetSpecMinimumsAndClientNeeds) {
    EXPECT_GE(limits_.max_pt_index, 249);
    EXPECT_GE(limits_.max_waw_ordered_size, 64u);
    EXPECT_GE(limits_.max_war_ordered_size, 8u);
    // SHMEM libraries refuse to start without these (issue 2).
    EXPECT_GE(limits_.max_atomic_size, 32u);
    EXPECT_GE(limits_.max_fetch_atomic_size, 32u);
    EXPECT_GE(limits_.max_volatile_size, 32u);
    EXPECT_TRUE(limits_.features & PTL_TARGET_BIND_INACCESSIBLE);
    EXPECT_TRUE(limits_.features & PTL_TOTAL_DATA_ORDERING);
}

TEST_F(NiTest, F04_DesiredLimitsAreEnforced) {
    ptl_ni_limits_t want = limits_, got{};
    want.max_mds = 2;
    ptl_handle_ni_t ni;
    ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, &want, &got, &ni), PTL_OK);
    EXPECT_EQ(got.max_mds, 2);
    char b;
    ptl_md_t md = md_desc(&b, 1);
    ptl_handle_md_t h[3];
    EXPECT_EQ(PtlMDBind(ni, &md, &h[0]), PTL_OK);
    EXPECT_EQ(PtlMDBind(ni, &md, &h[1]), PTL_OK);
    EXPECT_EQ(PtlMDBind(ni, &md, &h[2]), PTL_NO_SPACE);
    EXPECT_EQ(PtlNIFini(ni), PTL_OK);
}

TEST_F(NiTest, F04_BadOptionsAndPid) {
    ptl_handle_ni_t ni;
    EXPECT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY,
                        nullptr, nullptr, &ni), PTL_ARG_INVALID);
    EXPECT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING, PTL_PID_ANY, nullptr, nullptr, &ni), PTL_ARG_INVALID);
    EXPECT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_LOGICAL, PTL_PID_MAX, nullptr, nullptr, &ni),
              PTL_ARG_INVALID);
    EXPECT_EQ(PtlNIInit(12345, PTL_NI_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, nullptr, nullptr, &ni), PTL_ARG_INVALID);
    EXPECT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, nullptr, nullptr, nullptr),
              PTL_ARG_INVALID);
}

TEST_F(NiTest, F06_F07_StatusAndNIHandle) {
    ptl_sr_value_t v = -1;
    EXPECT_EQ(PtlNIStatus(ni_, PTL_SR_PERMISSION_VIOLATIONS, &v), PTL_OK);
    EXPECT_EQ(v, 0);
    EXPECT_EQ(PtlNIStatus(ni_, static_cast<ptl_sr_index_t>(99), &v), PTL_ARG_INVALID);
    EXPECT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, nullptr), PTL_ARG_INVALID);
    ptl_handle_ni_t h;
    EXPECT_EQ(PtlNIHandle(eq_, &h), PTL_OK);
    EXPECT_EQ(h, ni_);
    EXPECT_EQ(PtlNIHandle(ni_, &h), PTL_OK);
    EXPECT_EQ(h, ni_);
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    EXPECT_EQ(PtlNIHandle(ct, &h), PTL_OK);
    EXPECT_EQ(PtlNIHandle(PTL_INVALID_HANDLE, &h), PTL_ARG_INVALID);
    EXPECT_EQ(PtlNIHandle(PTL_EQ_NONE, &h), PTL_ARG_INVALID);
    EXPECT_EQ(PtlCTFree(ct), PTL_OK);
    EXPECT_EQ(PtlNIHandle(ct, &h), PTL_ARG_INVALID);  // stale
}

TEST_F(NiTest, F08_F09_MapsOnlyOnLogicalNIs) {
    ptl_process_t map[2];
    ptl_size_t actual = 0;
    EXPECT_EQ(PtlSetMap(ni_, 1, &self_), PTL_ARG_INVALID);  // physical NI
    EXPECT_EQ(PtlGetMap(ni_, 2, map, &actual), PTL_ARG_INVALID);
    ptl_handle_ni_t lni;
    ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, nullptr, nullptr, &lni), PTL_OK);
    EXPECT_EQ(PtlGetMap(lni, 2, map, &actual), PTL_IGNORED);  // T30: no map yet
    ptl_process_t id;
    EXPECT_EQ(PtlGetPhysId(lni, &id), PTL_OK);  // usable before the map (F16)
    EXPECT_EQ(id.phys.pid, self_.phys.pid);      // logical NIs share nid/pid
    ptl_process_t m[3] = {self_, self_, self_};
    m[0].phys.pid = self_.phys.pid ^ 1;  // another process (a fixed 999 was ours 1 run in 1024)
    ASSERT_EQ(PtlSetMap(lni, 3, m), PTL_OK);
    map[0].rank = map[1].rank = 77;
    EXPECT_EQ(PtlGetMap(lni, 2, map, &actual), PTL_OK);
    EXPECT_EQ(actual, 3u);
    EXPECT_EQ(map[0].phys.pid, self_.phys.pid ^ 1);
    EXPECT_EQ(PtlGetId(lni, &id), PTL_OK);
    EXPECT_EQ(id.rank, 1u);  // first rank whose entry is us
    EXPECT_EQ(PtlNIFini(lni), PTL_OK);
}

TEST_F(NiTest, F10_F11_PTAllocAndFree) {
    ptl_pt_index_t pt;
    EXPECT_EQ(PtlPTAlloc(ni_, 0, PTL_EQ_NONE, 3, &pt), PTL_OK);
    EXPECT_EQ(pt, 3u);
    EXPECT_EQ(PtlPTAlloc(ni_, 0, PTL_EQ_NONE, 3, &pt), PTL_PT_IN_USE);
    EXPECT_EQ(PtlPTAlloc(ni_, PTL_PT_FLOWCTRL, PTL_EQ_NONE, PTL_PT_ANY, &pt), PTL_PT_EQ_NEEDED);
    EXPECT_EQ(PtlPTAlloc(ni_, 0, PTL_EQ_NONE, uint32_t(limits_.max_pt_index) + 1, &pt), PTL_ARG_INVALID);
    EXPECT_EQ(PtlPTAlloc(ni_, 0, 0x12345678, PTL_PT_ANY, &pt), PTL_ARG_INVALID);
    char buf[8];
    ptl_handle_me_t me = append(3, me_desc(buf, 8, PTL_ME_OP_PUT));
    EXPECT_EQ(PtlPTFree(ni_, 3), PTL_PT_IN_USE);  // U7
    EXPECT_EQ(PtlMEUnlink(me), PTL_OK);
    EXPECT_EQ(PtlPTFree(ni_, 3), PTL_OK);
    EXPECT_EQ(PtlPTFree(ni_, 3), PTL_ARG_INVALID);
    // PT_FULL once every index is taken.
    int n = 0;
    while (PtlPTAlloc(ni_, 0, PTL_EQ_NONE, PTL_PT_ANY, &pt) == PTL_OK) ++n;
    EXPECT_EQ(n, limits_.max_pt_index + 1);
    EXPECT_EQ(PtlPTAlloc(ni_, 0, PTL_EQ_NONE, PTL_PT_ANY, &pt), PTL_PT_FULL);
}

TEST_F(NiTest, F14_F15_F16_Identification) {
    ptl_uid_t uid = 12345;
    EXPECT_EQ(PtlGetUid(ni_, &uid), PTL_OK);
    EXPECT_EQ(uid, getuid());
    ptl_process_t id;
    EXPECT_EQ(PtlGetId(ni_, &id), PTL_OK);
    EXPECT_EQ(id.phys.nid, self_.phys.nid);
    EXPECT_EQ(PtlGetId(eq_, &id), PTL_ARG_INVALID);  // wrong object type
    EXPECT_EQ(PtlGetUid(ni_, nullptr), PTL_ARG_INVALID);
}

TEST_F(NiTest, F51_F52_BundlesAreCounted) {
    EXPECT_EQ(PtlStartBundle(ni_), PTL_OK);
    EXPECT_EQ(PtlStartBundle(ni_), PTL_OK);
    EXPECT_EQ(PtlEndBundle(ni_), PTL_OK);
    EXPECT_EQ(PtlEndBundle(ni_), PTL_OK);
    EXPECT_EQ(PtlEndBundle(ni_), PTL_ARG_INVALID);
    EXPECT_EQ(PtlStartBundle(eq_), PTL_ARG_INVALID);
}

TEST_F(NiTest, BadInput_StaleAndWrongTypeHandlesNeverCrash) {
    char buf[16];
    ptl_handle_md_t md = bind(buf, sizeof buf);
    ASSERT_EQ(PtlMDRelease(md), PTL_OK);
    EXPECT_EQ(PtlMDRelease(md), PTL_ARG_INVALID);
    EXPECT_EQ(PtlPut(md, 0, 1, PTL_NO_ACK_REQ, self_, 0, 0, 0, nullptr, 0), PTL_ARG_INVALID);
    ptl_ct_event_t ctv;
    EXPECT_EQ(PtlCTGet(eq_, &ctv), PTL_ARG_INVALID);   // an EQ is not a CT
    EXPECT_EQ(PtlEQFree(PTL_CT_NONE), PTL_ARG_INVALID);
    EXPECT_EQ(PtlMEUnlink(eq_), PTL_ARG_INVALID);
    EXPECT_EQ(PtlLEUnlink(0xdeadbeef), PTL_ARG_INVALID);
    EXPECT_EQ(PtlCTFree(0), PTL_ARG_INVALID);
    for (uint32_t h : {0u, 1u, 0x7fffffffu, 0x20000001u, 0xc0000000u, 0xffffffffu}) {
        ptl_handle_ni_t out;
        EXPECT_EQ(PtlNIHandle(h, &out), PTL_ARG_INVALID) << std::hex << h;
        EXPECT_EQ(PtlCTSet(h, ptl_ct_event_t{1, 1}), PTL_ARG_INVALID);
        EXPECT_EQ(PtlPTAlloc(h, 0, PTL_EQ_NONE, PTL_PT_ANY, nullptr), PTL_ARG_INVALID);
    }
    ptl_handle_md_t md2;
    ptl_md_t bad = md_desc(buf, 16);
    bad.options = 1u << 30;
    EXPECT_EQ(PtlMDBind(ni_, &bad, &md2), PTL_ARG_INVALID);
    bad = md_desc(buf, 16, 0x3abcdef0);
    EXPECT_EQ(PtlMDBind(ni_, &bad, &md2), PTL_ARG_INVALID);
    EXPECT_EQ(PtlMDBind(ni_, nullptr, &md2), PTL_ARG_INVALID);
}

TEST_F(NiTest, BadInput_OutOfRangeAndHugeLengths) {
    char buf[16];
    ptl_handle_md_t md = bind(buf, sizeof buf);
    ptl_pt_index_t pt = alloc_pt();
    EXPECT_EQ(PtlPut(md, 0, 17, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_ARG_INVALID);   // B9
    EXPECT_EQ(PtlPut(md, 8, PTL_SIZE_MAX, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_ARG_INVALID);
    EXPECT_EQ(PtlPut(md, PTL_SIZE_MAX, 1, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_ARG_INVALID);
    EXPECT_EQ(PtlPut(md, 0, 1, 9, self_, pt, 0, 0, nullptr, 0), PTL_ARG_INVALID);
    EXPECT_EQ(PtlGet(md, 0, 1, self_, 100000, 0, 0, nullptr), PTL_ARG_INVALID);
    EXPECT_EQ(PtlPut(md, 0, 0, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);  // zero length is fine
    ptl_handle_eq_t eq;
    EXPECT_EQ(PtlEQAlloc(ni_, 0, &eq), PTL_ARG_INVALID);
    EXPECT_EQ(PtlEQAlloc(ni_, PTL_SIZE_MAX, &eq), PTL_NO_SPACE);
    ptl_me_t me = me_desc(buf, 16, PTL_ME_OP_PUT);
    ptl_handle_me_t h;
    EXPECT_EQ(PtlMEAppend(ni_, 100000, &me, PTL_PRIORITY_LIST, nullptr, &h), PTL_ARG_INVALID);
    EXPECT_EQ(PtlMEAppend(ni_, pt, &me, 7, nullptr, &h), PTL_ARG_INVALID);
    const ptl_le_t le = le_desc(buf, 16, PTL_LE_OP_PUT);  // valid except for the NI kind
    EXPECT_EQ(PtlLEAppend(ni_, pt, &le, PTL_PRIORITY_LIST, nullptr, &h), PTL_ARG_INVALID);  // LE on a matching NI
    me.options = 1u << 29;
    EXPECT_EQ(PtlMEAppend(ni_, pt, &me, PTL_PRIORITY_LIST, nullptr, &h), PTL_ARG_INVALID);
    unsigned which;
    ptl_event_t ev;
    EXPECT_EQ(PtlEQPoll(nullptr, 1, 0, &ev, &which), PTL_ARG_INVALID);
    EXPECT_EQ(PtlEQPoll(&eq_, 0, 0, &ev, &which), PTL_ARG_INVALID);
}

TEST(Abort_F03, WakesWaitersAndSticks) {
    ASSERT_EQ(PtlInit(), PTL_OK);
    ptl_handle_ni_t ni;
    ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr, &ni), PTL_OK);
    ptl_handle_eq_t eq;
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlEQAlloc(ni, 4, &eq), PTL_OK);
    ASSERT_EQ(PtlCTAlloc(ni, &ct), PTL_OK);
    int eq_rc = -1, ct_rc = -1;
    std::thread a([&] {
        ptl_event_t ev;
        eq_rc = PtlEQWait(eq, &ev);
    });
    std::thread b([&] {
        ptl_ct_event_t v;
        ct_rc = PtlCTWait(ct, 1, &v);
    });
    usleep(100000);  // let both block (correctness does not depend on it: abort is sticky)
    PtlAbort();
    a.join();
    b.join();
    EXPECT_EQ(eq_rc, PTL_ABORTED);  // T23
    EXPECT_EQ(ct_rc, PTL_ABORTED);
    ptl_size_t t = 1;
    ptl_ct_event_t v;
    unsigned w;
    EXPECT_EQ(PtlCTPoll(&ct, &t, 1, 0, &v, &w), PTL_ABORTED);
    ptl_event_t ev;
    EXPECT_EQ(PtlEQGet(eq, &ev), PTL_EQ_EMPTY);  // non-blocking calls are unaffected
    EXPECT_EQ(PtlEQFree(eq), PTL_OK);           // T6: waiters have left
    EXPECT_EQ(PtlCTFree(ct), PTL_OK);
    // T5: every later wait returns PTL_ABORTED at once, even on the handles just freed (the
    // reference implementation's abort tests wait on them again).
    EXPECT_EQ(PtlEQWait(eq, &ev), PTL_ABORTED);
    EXPECT_EQ(PtlEQPoll(&eq, 1, 1000, &ev, &w), PTL_ABORTED);
    EXPECT_EQ(PtlCTWait(ct, 1, &v), PTL_ABORTED);
    EXPECT_EQ(PtlCTPoll(&ct, &t, 1, 1000, &v, &w), PTL_ABORTED);
    EXPECT_EQ(PtlNIFini(ni), PTL_OK);
    PtlFini();
}

TEST_F(NiTest, BadInput_FreeingAnEqOrCtStillInUseDoesNotCorruptMemory) {
    // §3.13.6/§3.14.3 make this the user's error; it must still not crash (run under ASan).
    char src[8] = {}, dst[8];
    ptl_handle_eq_t eq;
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlEQAlloc(ni_, 8, &eq), PTL_OK);
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    ptl_md_t md = md_desc(src, 8, eq, ct, PTL_MD_EVENT_CT_SEND);
    ptl_handle_md_t mh;
    ASSERT_EQ(PtlMDBind(ni_, &md, &mh), PTL_OK);
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni_, 0, eq, PTL_PT_ANY, &pt), PTL_OK);
    ptl_me_t me = me_desc(dst, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, 0, 0, ct);
    ptl_handle_me_t meh;
    ASSERT_EQ(PtlMEAppend(ni_, pt, &me, PTL_PRIORITY_LIST, nullptr, &meh), PTL_OK);
    ASSERT_EQ(PtlEQFree(eq), PTL_OK);
    ASSERT_EQ(PtlCTFree(ct), PTL_OK);
    ASSERT_EQ(PtlPut(mh, 0, 8, PTL_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
    sync_point();
    ptl_event_t ev;
    EXPECT_EQ(PtlEQGet(eq, &ev), PTL_ARG_INVALID);
}

// PtlXWireUsage grows at its end: a binary built against an older, shorter struct must not have
// the figures it does not know written past its struct.
TEST_F(NiTest, WireUsageWritesOnlyTheStructTheCallerHas) {
    ptlx_wire_usage_t u;
    std::memset(&u, 0xff, sizeof u);
    ASSERT_EQ(PtlXWireUsageSized(ni_, &u, 2 * sizeof(ptl_size_t)), PTL_OK);
    EXPECT_EQ(u.pinned_bytes, 0u);  // no verbs wire here
    EXPECT_EQ(u.registered_bytes, 0u);
    EXPECT_EQ(u.rdma_peers, ~ptl_size_t(0));
    std::memset(&u, 0xff, sizeof u);
    ASSERT_EQ((PtlXWireUsage)(ni_, &u), PTL_OK);  // the symbol older binaries call: three fields
    EXPECT_EQ(u.rdma_peers, 0u);
    EXPECT_EQ(u.tcp_connections, ~ptl_size_t(0));
    std::memset(&u, 0xff, sizeof u);
    ASSERT_EQ(PtlXWireUsage(ni_, &u), PTL_OK);  // the macro: all of it
    EXPECT_EQ(u.rdma_qps_closed, 0u);
    EXPECT_EQ(PtlXWireUsage(PTL_INVALID_HANDLE, &u), PTL_ARG_INVALID);
    EXPECT_EQ(PtlXWireUsageSized(ni_, nullptr, sizeof u), PTL_ARG_INVALID);
}

// §2.5, §3.11-§3.13 and digest §6-§7: matching, priority/overflow/unexpected lists, search,
// unlink, truncation, locally managed offsets and full events. Rule IDs in test names.
#include <portals4_ext.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "ptl_test_util.h"

using namespace ptltest;

class Lists : public LoopbackTest {
protected:
    // Three acknowledged puts into a flow-controlled PT whose EQ holds two events: two land, the
    // third disables the PT and is reported in the slot reserved for it (EQ4).
    void expect_flow_control_at_third_put(ptl_handle_eq_t small, ptl_pt_index_t pt) {
        char buf[64];
        append(pt, me_desc(buf, sizeof buf, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE), PTL_PRIORITY_LIST);
        for (int i = 0; i < 3; ++i)
            ASSERT_EQ(PtlPut(md_, 0, 1, PTL_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
        int ok = 0, disabled = 0;
        for (int i = 0; i < 6; ++i) {
            ptl_event_t ev = next_event(md_eq_);
            if (ev.type == PTL_EVENT_ACK) (ev.ni_fail_type == PTL_NI_OK ? ok : disabled)++;
        }
        EXPECT_EQ(ok, 2);
        EXPECT_EQ(disabled, 1);
        EXPECT_EQ(next_event(small).type, PTL_EVENT_PUT);
        EXPECT_EQ(next_event(small).type, PTL_EVENT_PUT);
        EXPECT_EQ(next_event(small).type, PTL_EVENT_PT_DISABLED);  // the reserved slot (EQ4)
    }
    void SetUp() override {
        LoopbackTest::SetUp();
        std::memset(src_, 'a', sizeof src_);
        for (size_t i = 0; i < sizeof src_; ++i) src_[i] = char('a' + i % 26);
        md_ = bind(src_, sizeof src_);
        pt_ = alloc_pt();
    }
    int put(ptl_size_t len, ptl_match_bits_t bits, ptl_ack_req_t ack = PTL_NO_ACK_REQ, ptl_size_t roff = 0,
            ptl_hdr_data_t hdr = 0) {
        return PtlPut(md_, 0, len, ack, self_, pt_, bits, roff, nullptr, hdr);
    }
    uint64_t drop_count() {
        ptl_sr_value_t v = 0;
        EXPECT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &v), PTL_OK);
        return uint64_t(v);
    }
    void expect_send() {
        ptl_event_t ev = next_event(md_eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_SEND);
        EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
    }
    // For the EQ tests: a fresh EQ of `size` events and a PT on it whose one persistent ME
    // takes 1-byte puts.
    void eq_with_pt(ptl_size_t size, ptl_handle_eq_t *eq, ptl_pt_index_t *pt) {
        ASSERT_EQ(PtlEQAlloc(ni_, size, eq), PTL_OK);
        ASSERT_EQ(PtlPTAlloc(ni_, 0, *eq, PTL_PT_ANY, pt), PTL_OK);
        append(*pt, me_desc(eq_test_buf_, sizeof eq_test_buf_, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE),
               PTL_PRIORITY_LIST);
    }
    // 1-byte puts to `pt` with hdr_data from, ..., to - 1, all delivered on return.
    void put_numbered(ptl_pt_index_t pt, int from, int to) {
        for (int i = from; i < to; ++i)
            ASSERT_EQ(PtlPut(md_, 0, 1, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, ptl_hdr_data_t(i)), PTL_OK);
        sync_point();
    }
    char eq_test_buf_[8];
    char src_[256];
    ptl_handle_md_t md_ = PTL_INVALID_HANDLE;
    ptl_pt_index_t pt_ = 0;
};

// Lists with a configuration variable set before PtlInit (read there), unset afterwards.
class ListsEnv : public Lists {
protected:
    void set(const char *name, const char *value) {
        setenv(name, value, 1);
        name_ = name;
    }
    void TearDown() override {
        Lists::TearDown();
        if (name_) unsetenv(name_);
    }
    const char *name_ = nullptr;
};
#define LISTS_WITH(Fixture, NAME, VALUE) \
    class Fixture : public ListsEnv {    \
    protected:                           \
        void SetUp() override {          \
            set(NAME, VALUE);            \
            Lists::SetUp();              \
        }                                \
    }
LISTS_WITH(ListsNoEqGrowth, "PTL_EQ_GROW_MAX", "0");
LISTS_WITH(ListsEqGrowsToFour, "PTL_EQ_GROW_MAX", "4");
// Flow control at once, as the spec's FC4 describes it without FC1's allowance.
LISTS_WITH(ListsStrictFlowControl, "PTL_FLOWCTRL_GRACE_MS", "0");
LISTS_WITH(ListsLongGrace, "PTL_FLOWCTRL_GRACE_MS", "60000");
LISTS_WITH(ListsShortGrace, "PTL_FLOWCTRL_GRACE_MS", "50");
LISTS_WITH(ListsGrace300, "PTL_FLOWCTRL_GRACE_MS", "300");
LISTS_WITH(ListsManualProgress, "PTL_PROGRESS", "manual");

TEST_F(Lists, M1_MatchBitsWithIgnoreBits_and_L1_PriorityBeforeOverflow) {
    char a[16] = {}, b[16] = {}, ov[64] = {};
    append(pt_, me_desc(ov, sizeof ov, PTL_ME_OP_PUT, 0, ~0ull), PTL_OVERFLOW_LIST, (void *)3);
    append(pt_, me_desc(a, sizeof a, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 0x1200, 0x00ff), PTL_PRIORITY_LIST,
           (void *)1);
    append(pt_, me_desc(b, sizeof b, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 0x5555), PTL_PRIORITY_LIST, (void *)2);
    ASSERT_EQ(put(8, 0x5555, PTL_NO_ACK_REQ, 0, 0xabc), PTL_OK);
    ptl_event_t ev = next_non_link(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.user_ptr, (void *)2);
    EXPECT_EQ(ev.hdr_data, 0xabcu);
    EXPECT_EQ(ev.match_bits, 0x5555u);
    EXPECT_EQ(ev.ptl_list, PTL_PRIORITY_LIST);
    EXPECT_EQ(ev.initiator.phys.pid, self_.phys.pid);
    EXPECT_EQ(std::memcmp(b, src_, 8), 0);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);  // U2 after the comm event
    ASSERT_EQ(put(8, 0x12ab), PTL_OK);                       // matches a[] through its ignore bits
    ev = next_event(eq_);
    EXPECT_EQ(ev.user_ptr, (void *)1);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    ASSERT_EQ(put(8, 0x12ab), PTL_OK);  // nothing left in priority: overflow
    ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.user_ptr, (void *)3);
    EXPECT_EQ(ev.ptl_list, PTL_OVERFLOW_LIST);
}

TEST_F(Lists, Decision4_PostingOrderAcrossExactAndWildcardEntries) {
    char a[8], b[8], c[8];
    append(pt_, me_desc(a, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 0, ~0ull), PTL_PRIORITY_LIST,
           (void *)1);                                                                             // wildcard
    append(pt_, me_desc(b, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 7), PTL_PRIORITY_LIST, (void *)2);  // exact
    append(pt_, me_desc(c, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 7), PTL_PRIORITY_LIST, (void *)3);  // exact
    for (int i = 0; i < 3; ++i) ASSERT_EQ(put(4, 7), PTL_OK);
    void *order[3];
    for (int i = 0; i < 3; ++i) {
        ptl_event_t ev = next_non_link(eq_);
        ASSERT_EQ(ev.type, PTL_EVENT_PUT);
        order[i] = ev.user_ptr;
        EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    }
    EXPECT_EQ(order[0], (void *)1);
    EXPECT_EQ(order[1], (void *)2);
    EXPECT_EQ(order[2], (void *)3);
}

// Decision 4's per-match-bits buckets stay when they empty and are dropped together, their
// nodes recycled, once there are many (pt.h's drop_empty_buckets_if_many): an emptied bucket
// matches nothing it no longer holds, a bucket taken over by other match bits matches only
// its new bits and keeps posting order, and an unexpected header's bucket the same, before,
// across and after the sweeps.
TEST_F(Lists, M1_L6_BucketsOfEmptiedMatchBitsMatchOnlyTheirNewBits) {
    char ov[64] = {}, dst[4][8] = {};
    append(pt_, me_desc(ov, sizeof ov, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 0, ~0ull),
           PTL_OVERFLOW_LIST, (void *)9);
    char keep[8] = {};
    constexpr ptl_match_bits_t kept_bits = 0x7777;  // a bucket that never empties, across sweeps
    append(pt_, me_desc(keep, sizeof keep, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, kept_bits),
           PTL_PRIORITY_LIST, (void *)7);
    for (uint64_t round = 0; round < 300; ++round) {  // several sweeps of kKeptEmptyBuckets
        ASSERT_EQ(put(4, kept_bits), PTL_OK);
        ptl_event_t kept = next_event(eq_);
        EXPECT_EQ(kept.ptl_list, PTL_PRIORITY_LIST) << "a live bucket was dropped, round " << round;
        EXPECT_EQ(kept.user_ptr, (void *)7);
        const ptl_match_bits_t old_bits = 0x1000 + round, new_bits = 0x9000 + round;
        ptl_handle_me_t h = append(
            pt_, me_desc(dst[0], 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE, old_bits),
            PTL_PRIORITY_LIST, (void *)1);
        ASSERT_EQ(PtlMEUnlink(h), PTL_OK);  // its bucket empties
        append(pt_, me_desc(dst[1], 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE, new_bits),
               PTL_PRIORITY_LIST, (void *)2);
        append(pt_, me_desc(dst[2], 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE, new_bits),
               PTL_PRIORITY_LIST, (void *)3);
        ASSERT_EQ(put(4, old_bits), PTL_OK);
        ptl_event_t ev = next_event(eq_);
        EXPECT_EQ(ev.ptl_list, PTL_OVERFLOW_LIST) << "the unlinked entry's bits matched, round " << round;
        for (void *want : {(void *)2, (void *)3}) {
            ASSERT_EQ(put(4, new_bits), PTL_OK);
            ev = next_event(eq_);
            EXPECT_EQ(ev.ptl_list, PTL_PRIORITY_LIST);
            EXPECT_EQ(ev.user_ptr, want) << "posting order within a reused bucket, round " << round;
            EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
        }
        // The unexpected header of old_bits (its bucket emptied when it was claimed before,
        // from round 1 on): an append of other bits must not claim it, one of old_bits must.
        append(pt_, me_desc(dst[3], 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE, new_bits),
               PTL_PRIORITY_LIST, (void *)4);
        {
            ptl_event_t e{};
            const int rc = PtlEQGet(eq_, &e);
            EXPECT_EQ(rc, PTL_EQ_EMPTY) << "another entry's bits claimed the header, round " << round
                                        << ": event " << int(e.type) << " bits " << e.match_bits;
        }
        append(pt_, me_desc(dst[0], 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, old_bits), PTL_PRIORITY_LIST,
               (void *)5);
        ev = next_event(eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_PUT_OVERFLOW);
        EXPECT_EQ(ev.match_bits, old_bits);
        EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
        ASSERT_EQ(put(4, new_bits), PTL_OK);  // takes the entry left over from above
        ev = next_event(eq_);
        EXPECT_EQ(ev.user_ptr, (void *)4);
        EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    }
    EXPECT_TRUE(eq_empty(eq_));
}

TEST_F(Lists, M2_SourceIdWildcardsAreIndependent) {
    char a[8];
    ptl_me_t me = me_desc(a, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE);
    me.match_id.phys.pid = self_.phys.pid + 1;  // some other process
    append(pt_, me, PTL_PRIORITY_LIST, (void *)1);
    me.match_id.phys.pid = self_.phys.pid;
    me.match_id.phys.nid = PTL_NID_ANY;
    append(pt_, me, PTL_PRIORITY_LIST, (void *)2);
    ASSERT_EQ(put(4, 0), PTL_OK);
    EXPECT_EQ(next_non_link(eq_).user_ptr, (void *)2);
}

TEST_F(Lists, M4_NoTruncateSkipsTooSmallEntry_T6_T7) {
    char small[4], big[64];
    append(pt_, me_desc(small, 4, PTL_ME_OP_PUT | PTL_ME_NO_TRUNCATE), PTL_PRIORITY_LIST, (void *)1);
    append(pt_, me_desc(big, 64, PTL_ME_OP_PUT), PTL_PRIORITY_LIST, (void *)2);
    ASSERT_EQ(put(16, 0), PTL_OK);
    ptl_event_t ev = next_non_link(eq_);
    EXPECT_EQ(ev.user_ptr, (void *)2);
    EXPECT_EQ(ev.mlength, 16u);
    // Zero-byte messages are never rejected for truncation, even past the end (T7, B6).
    ASSERT_EQ(put(0, 0, PTL_NO_ACK_REQ, 1000), PTL_OK);
    ev = next_event(eq_);
    EXPECT_EQ(ev.user_ptr, (void *)1);
    EXPECT_EQ(ev.mlength, 0u);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
}

TEST_F(Lists, B4_TruncationToEntryAndOffsetBeyondEnd) {
    char buf[10] = {};
    append(pt_, me_desc(buf, 10, PTL_ME_OP_PUT), PTL_PRIORITY_LIST);
    ASSERT_EQ(put(32, 0, PTL_ACK_REQ, 4), PTL_OK);
    ptl_event_t ev = next_non_link(eq_);
    EXPECT_EQ(ev.rlength, 32u);
    EXPECT_EQ(ev.mlength, 6u);
    EXPECT_EQ(ev.remote_offset, 4u);
    EXPECT_EQ(ev.start, buf + 4);
    EXPECT_EQ(std::memcmp(buf + 4, src_, 6), 0);
    expect_send();
    ev = next_event(md_eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_ACK);  // D12: target mlength and offset
    EXPECT_EQ(ev.mlength, 6u);
    EXPECT_EQ(ev.remote_offset, 4u);
    ASSERT_EQ(put(8, 0, PTL_NO_ACK_REQ, 50), PTL_OK);
    ev = next_event(eq_);
    EXPECT_EQ(ev.mlength, 0u);  // outside the entry: truncated to zero bytes
}

TEST_F(Lists, L4_L5_T8_UseOnceAppendConsumesUnexpectedHeaderAndIsNotLinked) {
    char ov[64] = {}, dst[64] = {};
    append(pt_, me_desc(ov, sizeof ov, PTL_ME_OP_PUT, 0, ~0ull), PTL_OVERFLOW_LIST, (void *)9);
    ASSERT_EQ(put(20, 42, PTL_NO_ACK_REQ, 0, 77), PTL_OK);
    ptl_event_t ev = next_non_link(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.user_ptr, (void *)9);
    EXPECT_EQ(std::memcmp(ov, src_, 20), 0);  // L9: data already in the overflow buffer
    ptl_handle_me_t h =
        append(pt_, me_desc(dst, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 42), PTL_PRIORITY_LIST, (void *)5);
    ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT_OVERFLOW);
    EXPECT_EQ(ev.user_ptr, (void *)5);  // the appending entry's user_ptr (L8)
    EXPECT_EQ(ev.start, (void *)ov);    // points into the overflow buffer
    EXPECT_EQ(ev.mlength, 20u);         // original placement length, not re-truncated
    EXPECT_EQ(ev.rlength, 20u);
    EXPECT_EQ(ev.hdr_data, 77u);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    EXPECT_TRUE(eq_empty(eq_));             // no LINK (I-list 21)
    EXPECT_EQ(PtlMEUnlink(h), PTL_IN_USE);  // tricky 14: already unlinked, before the next append
    // A second message goes to the overflow buffer again: the use-once ME was never linked.
    ASSERT_EQ(put(4, 42), PTL_OK);
    EXPECT_EQ(next_event(eq_).ptl_list, PTL_OVERFLOW_LIST);
}

TEST_F(Lists, L6_L7_T9_PersistentAppendClaimsAllHeadersOldestFirstThenLinks) {
    char ov[256] = {}, dst[64] = {};
    append(pt_, me_desc(ov, sizeof ov, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~0ull), PTL_OVERFLOW_LIST);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(put(10 + i, 5, PTL_NO_ACK_REQ, 0, i), PTL_OK);
    ASSERT_EQ(put(4, 6), PTL_OK);  // does not match the append below
    for (int i = 0; i < 4; ++i) EXPECT_EQ(next_non_link(eq_).type, PTL_EVENT_PUT);
    append(pt_, me_desc(dst, sizeof dst, PTL_ME_OP_PUT, 5), PTL_PRIORITY_LIST, (void *)7);
    for (int i = 0; i < 3; ++i) {
        ptl_event_t ev = next_event(eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_PUT_OVERFLOW);
        EXPECT_EQ(ev.hdr_data, ptl_hdr_data_t(i));  // arrival order
        EXPECT_EQ(ev.mlength, ptl_size_t(10 + i));
    }
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_LINK);
}

TEST_F(Lists, L12_T13_UnlinkOverflowEntryWithHeadersIsInUse_L11_AutoFreeAfterDrain) {
    char ov[16] = {};
    ptl_handle_me_t h = append(pt_, me_desc(ov, sizeof ov, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~0ull),
                               PTL_OVERFLOW_LIST, (void *)4);
    // min_free is set after creation below; this one has none, so only explicit unlink applies.
    ASSERT_EQ(put(4, 0), PTL_OK);
    next_non_link(eq_);
    EXPECT_EQ(PtlMEUnlink(h), PTL_IN_USE);
    ptl_me_t probe = me_desc(nullptr, 0, 0, 0, ~0ull);
    ASSERT_EQ(PtlMESearch(ni_, pt_, &probe, PTL_SEARCH_DELETE, (void *)8), PTL_OK);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT_OVERFLOW);  // tricky 15: DELETE reports *_OVERFLOW
    EXPECT_EQ(next_event(eq_).ni_fail_type, PTL_NI_NO_MATCH);
    EXPECT_EQ(PtlMEUnlink(h), PTL_OK);
    EXPECT_EQ(PtlMEUnlink(h), PTL_ARG_INVALID);

    // An overflow buffer that fills (min_free) auto-unlinks, and is freed once drained.
    ptl_me_t me = me_desc(ov, sizeof ov, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~0ull);
    me.min_free = 8;
    append(pt_, me, PTL_OVERFLOW_LIST, (void *)6);
    ASSERT_EQ(put(6, 1), PTL_OK);
    ASSERT_EQ(put(3, 2), PTL_OK);  // 16 - 9 < 8: unlinks
    ev = next_non_link(eq_);
    EXPECT_EQ(ev.start, (void *)ov);
    ev = next_event(eq_);
    EXPECT_EQ(ev.start, (void *)(ov + 6));  // locally managed offsets advance by mlength
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    EXPECT_TRUE(eq_empty(eq_));  // headers still pending: no AUTO_FREE yet (T15)
    char d[8];
    append(pt_, me_desc(d, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 1), PTL_PRIORITY_LIST);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT_OVERFLOW);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    EXPECT_TRUE(eq_empty(eq_));
    append(pt_, me_desc(d, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 2), PTL_PRIORITY_LIST);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT_OVERFLOW);
    ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_AUTO_FREE);  // the last header of the buffer is gone
    EXPECT_EQ(ev.user_ptr, (void *)6);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
}

// PTLX_ME_SLOTS (portals4_ext.h): a locally managed ME whose messages each start a slot of
// min_free bytes, taking whole slots (an empty message one), and which unlinks once less than a
// slot is left; with PTL_ME_NO_TRUNCATE a message longer than what is left passes it by.
TEST_F(Lists, SlotsGiveEachMessageWholeSlotsOfItsOwn) {
    char ov[64], spill[64];
    ptl_me_t me = me_desc(
        ov, sizeof ov,
        PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTLX_ME_SLOTS | PTL_ME_NO_TRUNCATE | PTL_ME_EVENT_LINK_DISABLE,
        0, ~0ull);
    me.min_free = 16;
    append(pt_, me, PTL_PRIORITY_LIST, (void *)1);
    const ptl_me_t spill_me =
        me_desc(spill, sizeof spill, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 0, ~0ull);
    ptl_handle_me_t spill_h = append(pt_, spill_me, PTL_PRIORITY_LIST, (void *)2);
    ASSERT_EQ(put(5, 0), PTL_OK);   // slot 0
    ASSERT_EQ(put(0, 0), PTL_OK);   // slot 1: empty, still a slot
    ASSERT_EQ(put(20, 0), PTL_OK);  // slots 2 and 3
    ASSERT_EQ(put(1, 0), PTL_OK);   // nothing left: the spill ME
    const ptl_size_t at[] = {0, 16, 32};
    const ptl_size_t len[] = {5, 0, 20};
    for (int i = 0; i < 3; ++i) {
        ptl_event_t ev = next_event(eq_);
        ASSERT_EQ(ev.type, PTL_EVENT_PUT) << i;
        EXPECT_EQ(ev.start, (void *)(ov + at[i])) << i;
        EXPECT_EQ(ev.mlength, len[i]) << i;
        EXPECT_EQ(ev.user_ptr, (void *)1) << i;
    }
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);  // 64 - 64 < 16
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.user_ptr, (void *)2);
    EXPECT_EQ(std::memcmp(ov + 32, src_, 20), 0);

    // NO_TRUNCATE: 50 bytes do not fit the 48 left after one slot; the next 8 still land in slot 1.
    ASSERT_EQ(PtlMEUnlink(spill_h), PTL_OK);
    const ptl_handle_me_t h3 = append(pt_, me, PTL_PRIORITY_LIST, (void *)3);
    spill_h = append(pt_, spill_me, PTL_PRIORITY_LIST, (void *)2);
    ASSERT_EQ(put(1, 0), PTL_OK);
    ASSERT_EQ(put(50, 0), PTL_OK);
    ASSERT_EQ(put(8, 0), PTL_OK);
    ev = next_event(eq_);
    EXPECT_EQ(ev.user_ptr, (void *)3);
    EXPECT_EQ(ev.start, (void *)ov);
    EXPECT_EQ(next_event(eq_).user_ptr, (void *)2);
    ev = next_event(eq_);
    EXPECT_EQ(ev.user_ptr, (void *)3);
    EXPECT_EQ(ev.start, (void *)(ov + 16));

    // The last slot may be short: 40 bytes are slots at 0, 16 and 32 (8 bytes), and the ME
    // unlinks only once no slot can start.
    ASSERT_EQ(PtlMEUnlink(h3), PTL_OK);  // two of its slots are left
    ASSERT_EQ(PtlMEUnlink(spill_h), PTL_OK);
    me.length = 40;
    append(pt_, me, PTL_PRIORITY_LIST, (void *)4);
    append(pt_, spill_me, PTL_PRIORITY_LIST, (void *)2);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(put(i == 2 ? 8 : 1, 0), PTL_OK);
    for (int i = 0; i < 3; ++i) {
        ev = next_event(eq_);
        ASSERT_EQ(ev.type, PTL_EVENT_PUT) << i;
        EXPECT_EQ(ev.user_ptr, (void *)4) << i;
        EXPECT_EQ(ev.start, (void *)(ov + 16 * i)) << i;
    }
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
}

// PTLX_ME_SLOT_POOL (portals4_ext.h): messages land in the slots given with PtlXMEGiveSlots, the
// oldest first, at most min_free bytes each; with none given, or (PTL_ME_NO_TRUNCATE) a message
// longer than a slot, the ME does not match and the message goes on down the list. Slots come
// back in any order; the ME never unlinks by itself.
TEST_F(Lists, SlotPoolLandsMessagesInTheSlotsGivenOldestFirst) {
    char pool[64], spill[64];
    ptl_me_t me = me_desc(pool, sizeof pool,
                          PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTLX_ME_SLOT_POOL | PTL_ME_NO_TRUNCATE |
                              PTL_ME_EVENT_LINK_DISABLE,
                          0, ~0ull);
    me.min_free = 16;
    const ptl_handle_me_t h = append(pt_, me, PTL_PRIORITY_LIST, (void *)1);
    append(pt_, me_desc(spill, sizeof spill, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 0, ~0ull),
           PTL_PRIORITY_LIST, (void *)2);
    auto next_put = [&] {
        ptl_event_t ev = next_event(eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_PUT);
        return ev;
    };

    ASSERT_EQ(put(4, 0), PTL_OK);  // no slot given yet: the spill ME
    EXPECT_EQ(next_put().user_ptr, (void *)2);

    const ptl_size_t first[] = {48, 0};
    ASSERT_EQ(PtlXMEGiveSlots(h, first, 2), PTL_OK);
    ASSERT_EQ(put(5, 0), PTL_OK);   // slot 48
    ASSERT_EQ(put(17, 0), PTL_OK);  // longer than a slot: passes by (NO_TRUNCATE)
    ASSERT_EQ(put(16, 0), PTL_OK);  // slot 0
    ASSERT_EQ(put(1, 0), PTL_OK);   // none left: the spill ME
    ptl_event_t ev = next_put();
    EXPECT_EQ(ev.user_ptr, (void *)1);
    EXPECT_EQ(ev.start, (void *)(pool + 48));
    EXPECT_EQ(ev.mlength, 5u);
    EXPECT_EQ(std::memcmp(pool + 48, src_, 5), 0);
    EXPECT_EQ(next_put().user_ptr, (void *)2);
    ev = next_put();
    EXPECT_EQ(ev.user_ptr, (void *)1);
    EXPECT_EQ(ev.start, (void *)pool);
    EXPECT_EQ(ev.mlength, 16u);
    EXPECT_EQ(next_put().user_ptr, (void *)2);

    // Given back out of order, and again: taken in the order given; no AUTO_UNLINK ever.
    const ptl_size_t again[] = {16, 0, 32};
    ASSERT_EQ(PtlXMEGiveSlots(h, again, 3), PTL_OK);
    for (ptl_size_t at : again) {
        ASSERT_EQ(put(3, 0), PTL_OK);
        ev = next_put();
        EXPECT_EQ(ev.user_ptr, (void *)1);
        EXPECT_EQ(ev.start, (void *)(pool + at));
    }
    ptl_event_t none;
    EXPECT_EQ(PtlEQGet(eq_, &none), PTL_EQ_EMPTY);

    // Bad input gives nothing: a slot past the end, more than the ME holds, a bad handle, an ME
    // without the option.
    const ptl_size_t past[] = {0, 49};
    EXPECT_EQ(PtlXMEGiveSlots(h, past, 2), PTL_ARG_INVALID);
    const ptl_size_t five[] = {0, 16, 32, 48, 0};
    EXPECT_EQ(PtlXMEGiveSlots(h, five, 5), PTL_ARG_INVALID);
    EXPECT_EQ(PtlXMEGiveSlots(PTL_INVALID_HANDLE, five, 1), PTL_ARG_INVALID);
    char plain_buf[16];
    const ptl_handle_me_t plain =
        append(pt_, me_desc(plain_buf, sizeof plain_buf, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 0, ~0ull),
               PTL_PRIORITY_LIST);
    EXPECT_EQ(PtlXMEGiveSlots(plain, five, 1), PTL_ARG_INVALID);
    ASSERT_EQ(put(2, 0), PTL_OK);  // nothing was given by the refused calls
    EXPECT_EQ(next_put().user_ptr, (void *)2);

    // The option needs a locally managed ME with a slot size, and excludes PTLX_ME_SLOTS.
    ptl_handle_me_t bad;
    ptl_me_t d = me;
    d.options &= ~unsigned(PTL_ME_MANAGE_LOCAL);
    EXPECT_EQ(PtlMEAppend(ni_, pt_, &d, PTL_PRIORITY_LIST, nullptr, &bad), PTL_ARG_INVALID);
    d = me;
    d.min_free = 0;
    EXPECT_EQ(PtlMEAppend(ni_, pt_, &d, PTL_PRIORITY_LIST, nullptr, &bad), PTL_ARG_INVALID);
    d = me;
    d.options |= PTLX_ME_SLOTS;
    EXPECT_EQ(PtlMEAppend(ni_, pt_, &d, PTL_PRIORITY_LIST, nullptr, &bad), PTL_ARG_INVALID);
}

TEST_F(Lists, S3_S6_S7_T11_PersistentSearchOnlyEndsWithNoMatch) {
    char ov[64];
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    append(pt_, me_desc(ov, sizeof ov, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~0ull), PTL_OVERFLOW_LIST);
    ASSERT_EQ(put(4, 3), PTL_OK);
    ASSERT_EQ(put(4, 3), PTL_OK);
    next_non_link(eq_);
    next_event(eq_);
    ptl_me_t s = me_desc(nullptr, 0, 0, 3, 0, ct);
    ASSERT_EQ(PtlMESearch(ni_, pt_, &s, PTL_SEARCH_ONLY, (void *)11), PTL_OK);
    for (int i = 0; i < 2; ++i) {
        ptl_event_t ev = next_event(eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_SEARCH);
        EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
        EXPECT_EQ(ev.user_ptr, (void *)11);
        EXPECT_EQ(ev.mlength, 4u);
    }
    ptl_event_t end = next_event(eq_);
    EXPECT_EQ(end.type, PTL_EVENT_SEARCH);
    EXPECT_EQ(end.ni_fail_type, PTL_NI_NO_MATCH);
    EXPECT_EQ(end.user_ptr, (void *)11);
    ptl_ct_event_t v;
    ASSERT_EQ(PtlCTGet(ct, &v), PTL_OK);
    EXPECT_EQ(v.success, 2u);
    EXPECT_EQ(v.failure, 1u);
    // SEARCH_ONLY left the headers: a use-once search still finds one, with no terminator (S5).
    s.options = PTL_ME_USE_ONCE;
    ASSERT_EQ(PtlMESearch(ni_, pt_, &s, PTL_SEARCH_ONLY, (void *)12), PTL_OK);
    EXPECT_EQ(next_event(eq_).ni_fail_type, PTL_NI_OK);
    EXPECT_TRUE(eq_empty(eq_));
}

TEST_F(Lists, S5_T12_UseOnceSearchDeleteWithoutMatch) {
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    ptl_me_t s = me_desc(nullptr, 0, PTL_ME_USE_ONCE, 1, 0, ct);
    ASSERT_EQ(PtlMESearch(ni_, pt_, &s, PTL_SEARCH_DELETE, nullptr), PTL_OK);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_SEARCH);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_NO_MATCH);
    ptl_ct_event_t v;
    ASSERT_EQ(PtlCTGet(ct, &v), PTL_OK);
    EXPECT_EQ(v.success, 0u);
    EXPECT_EQ(v.failure, 1u);
}

TEST_F(Lists, Tricky11_LocalIncUhRlengthAndMinFailure_T10) {
    char ov[64], dst[16];
    append(pt_, me_desc(ov, sizeof ov, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~0ull), PTL_OVERFLOW_LIST);
    ASSERT_EQ(put(6, 9), PTL_OK);
    ASSERT_EQ(put(6, 9), PTL_OK);
    next_non_link(eq_);
    next_event(eq_);
    ptl_me_t me =
        me_desc(dst, sizeof dst, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTL_ME_LOCAL_INC_UH_RLENGTH, 9);
    me.min_free = 8;  // 16 - 6 = 10 ok, 16 - 12 = 4 < 8: not appended
    append(pt_, me, PTL_PRIORITY_LIST);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT_OVERFLOW);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT_OVERFLOW);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    EXPECT_TRUE(eq_empty(eq_));
}

TEST_F(Lists, M6_PermissionFailureEndsWalk_SR3_T3_T4) {
    char a[8], b[8];
    ptl_me_t me = me_desc(a, 8, PTL_ME_OP_PUT);
    me.uid = 0xfffe;  // not us
    append(pt_, me, PTL_PRIORITY_LIST);
    append(pt_, me_desc(b, 8, PTL_ME_OP_PUT), PTL_PRIORITY_LIST);
    ASSERT_EQ(put(4, 0, PTL_ACK_REQ), PTL_OK);
    expect_send();
    ptl_event_t ev = next_event(md_eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_ACK);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_PERM_VIOLATION);
    ptl_sr_value_t perm = 0, drop = 0, opv = 0;
    PtlNIStatus(ni_, PTL_SR_PERMISSION_VIOLATIONS, &perm);
    PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &drop);
    EXPECT_EQ(perm, 1);
    EXPECT_EQ(drop, 0);  // violations are not drops
    // No target event was generated, only the two LINKs.
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_LINK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_LINK);
    EXPECT_TRUE(eq_empty(eq_));
    // Get against OP_PUT-only entries: operation violation.
    ptl_me_t me2 = me_desc(b, 8, PTL_ME_OP_PUT);
    ptl_pt_index_t pt2 = alloc_pt();
    append(pt2, me2, PTL_PRIORITY_LIST);
    ASSERT_EQ(PtlGet(md_, 0, 4, self_, pt2, 0, 0, nullptr), PTL_OK);
    ev = next_event(md_eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_REPLY);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OP_VIOLATION);
    PtlNIStatus(ni_, PTL_SR_OPERATION_VIOLATIONS, &opv);
    EXPECT_EQ(opv, 1);
}

TEST_F(Lists, X3_T1_NoMatchWithoutFlowControlIsSilentDrop) {
    ASSERT_EQ(put(4, 1, PTL_ACK_REQ), PTL_OK);
    expect_send();
    sync_point();
    EXPECT_TRUE(eq_empty(md_eq_));  // spec-literal: no ACK for a silent drop
    ptl_sr_value_t drop = 0;
    PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &drop);
    EXPECT_EQ(drop, 1);
}

// The X3 option per NI (portals4_ext.h), which the UCT component turns on: the same drop
// answered with PTL_NI_DROPPED, for a put's ACK and a get's REPLY; off again, silent again.
TEST_F(Lists, X3_NotifyDropsPerNIAnswersWithDropped) {
    ASSERT_EQ(PtlXNINotifyDrops(ni_, 1), PTL_OK);
    ASSERT_EQ(put(4, 1, PTL_ACK_REQ), PTL_OK);
    expect_send();
    ptl_event_t ev = next_event(md_eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_ACK);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_DROPPED);
    ASSERT_EQ(PtlGet(md_, 0, 4, self_, pt_, 1, 0, nullptr), PTL_OK);
    ev = next_event(md_eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_REPLY);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_DROPPED);
    ASSERT_EQ(PtlXNINotifyDrops(ni_, 0), PTL_OK);
    ASSERT_EQ(put(4, 1, PTL_ACK_REQ), PTL_OK);
    expect_send();
    sync_point();
    EXPECT_TRUE(eq_empty(md_eq_));
    EXPECT_EQ(PtlXNINotifyDrops(PTL_INVALID_HANDLE, 1), PTL_ARG_INVALID);
}

TEST_F(ListsStrictFlowControl, FC4_FC7_FC11_T2_FlowControlTriggerAndRecovery) {
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni_, PTL_PT_FLOWCTRL, eq_, PTL_PT_ANY, &pt), PTL_OK);
    ASSERT_EQ(PtlPut(md_, 0, 4, PTL_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
    expect_send();
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PT_DISABLED);
    EXPECT_EQ(ev.pt_index, pt);
    ev = next_event(md_eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_ACK);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_PT_DISABLED);
    // FC8: local operations continue while disabled; messages are still refused.
    char buf[8] = {};
    append(pt, me_desc(buf, 8, PTL_ME_OP_PUT), PTL_PRIORITY_LIST);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_LINK);
    ASSERT_EQ(PtlPut(md_, 0, 4, PTL_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
    expect_send();
    EXPECT_EQ(next_event(md_eq_).ni_fail_type, PTL_NI_PT_DISABLED);
    EXPECT_EQ(buf[0], 0);  // FC6: dropped messages do not touch buffers
    ASSERT_EQ(PtlPTEnable(ni_, pt), PTL_OK);
    ASSERT_EQ(PtlPut(md_, 0, 4, PTL_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
    expect_send();
    EXPECT_EQ(next_event(md_eq_).ni_fail_type, PTL_NI_OK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT);
    EXPECT_EQ(std::memcmp(buf, src_, 4), 0);
}

TEST_F(ListsStrictFlowControl, FC4_FullEventQueueTriggersFlowControl) {
    ptl_handle_eq_t small;
    ASSERT_EQ(PtlEQAlloc(ni_, 2, &small), PTL_OK);
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni_, PTL_PT_FLOWCTRL, small, PTL_PT_ANY, &pt), PTL_OK);
    expect_flow_control_at_third_put(small, pt);
}

// FC1: an implementation "may choose to block new message processing for a constrained amount
// of time" before acting on exhaustion. The third put finds the EQ full and waits; the
// application drains the EQ in time, so the put lands and no flow control happens at all.
TEST_F(ListsLongGrace, FC1_RequestWaitsForTheApplicationToDrainTheQueue) {
    ptl_handle_eq_t small;
    ASSERT_EQ(PtlEQAlloc(ni_, 2, &small), PTL_OK);
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni_, PTL_PT_FLOWCTRL, small, PTL_PT_ANY, &pt), PTL_OK);
    char buf[64];
    append(pt, me_desc(buf, sizeof buf, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE), PTL_PRIORITY_LIST);
    for (int i = 0; i < 3; ++i)
        ASSERT_EQ(PtlPut(md_, 0, 1, PTL_ACK_REQ, self_, pt, 0, 0, nullptr, ptl_hdr_data_t(i)), PTL_OK);
    for (int i = 0; i < 3; ++i) {  // the third one waits in the engine, not refused
        ptl_event_t ev = next_event(small);
        EXPECT_EQ(ev.type, PTL_EVENT_PUT);
        EXPECT_EQ(ev.hdr_data, ptl_hdr_data_t(i));
    }
    int acks = 0;
    for (int i = 0; i < 6; ++i) {
        ptl_event_t ev = next_event(md_eq_);
        if (ev.type == PTL_EVENT_ACK) {
            EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
            ++acks;
        }
    }
    EXPECT_EQ(acks, 3);
    EXPECT_TRUE(eq_empty(small));
}

// ...and when the application does not drain it within PTL_FLOWCTRL_GRACE_MS, FC4 applies:
// the entry is disabled and the put refused, no earlier than the grace period.
TEST_F(ListsShortGrace, FC1_FC4_RequestTriggersFlowControlAfterTheGrace) {
    ptl_handle_eq_t small;
    ASSERT_EQ(PtlEQAlloc(ni_, 2, &small), PTL_OK);
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni_, PTL_PT_FLOWCTRL, small, PTL_PT_ANY, &pt), PTL_OK);
    const auto start = std::chrono::steady_clock::now();
    expect_flow_control_at_third_put(small, pt);
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
}

// Without flow control an unmatched put is dropped (FC3), unless an entry of that portal was used
// up and the application has not read so yet: it may be replacing it. Here it does, and the
// put lands in the new entry; once the application has read the unlink and posted nothing, the
// next unmatched put is dropped as before.
TEST_F(ListsLongGrace, FC1_UnmatchedPutWaitsWhileAUsedUpEntryIsUnread) {
    // The initiator's ACKs, SEND events skipped.
    auto next_ack = [&] {
        ptl_event_t ev = next_event(md_eq_);
        while (ev.type == PTL_EVENT_SEND) ev = next_event(md_eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_ACK);
        return ev;
    };
    char first[8] = {}, second[8] = {};
    append(pt_, me_desc(first, sizeof first, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE),
           PTL_PRIORITY_LIST, (void *)1);
    ASSERT_EQ(put(4, 0, PTL_ACK_REQ), PTL_OK);
    ASSERT_EQ(put(4, 0, PTL_ACK_REQ, 4), PTL_OK);   // finds no entry: waits
    EXPECT_EQ(next_ack().ni_fail_type, PTL_NI_OK);  // the first put's: responses are not held
    ptl_event_t ev;
    while (PtlEQGet(md_eq_, &ev) == PTL_OK)
        EXPECT_NE(ev.type, PTL_EVENT_ACK) << "the second put is neither acknowledged nor refused yet";
    append(pt_, me_desc(second, sizeof second, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE),
           PTL_PRIORITY_LIST, (void *)2);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);  // the first entry's, read now
    EXPECT_EQ(next_ack().ni_fail_type, PTL_NI_OK);
    ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.user_ptr, (void *)2);
    EXPECT_EQ(std::memcmp(second + 4, src_, 4), 0);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    EXPECT_EQ(drop_count(), 0u);
}

// The replacement comes after the application read the unlink, from the thread that read it,
// while the engine's progress runs on another: an unmatched put that arrives in between waits.
// Here the application takes 100 ms (of a 300 ms grace period) to post the new entry.
TEST_F(ListsGrace300, FC1_UnmatchedPutWaitsWhileAUsedUpEntryIsBeingReplaced) {
    char first[8] = {}, second[8] = {};
    append(pt_, me_desc(first, sizeof first, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE),
           PTL_PRIORITY_LIST, (void *)1);
    ASSERT_EQ(put(4, 0), PTL_OK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);  // read: the replacement begins
    ASSERT_EQ(put(4, 0, PTL_ACK_REQ, 4), PTL_OK);
    usleep(100000);  // the application is slow to post it
    append(pt_, me_desc(second, sizeof second, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE),
           PTL_PRIORITY_LIST, (void *)2);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.user_ptr, (void *)2);
    EXPECT_EQ(std::memcmp(second + 4, src_, 4), 0);
    ev = next_event(md_eq_);
    while (ev.type == PTL_EVENT_SEND) ev = next_event(md_eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_ACK);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
    EXPECT_EQ(drop_count(), 0u);
}

// A client that reads its queue slowly (Open MPI's btl takes one event per progress call and
// fell more than a second behind on an oversubscribed host) may reach the unlink only after
// the grace period: while it keeps reading that queue, the grace period restarts. Here it
// reads one event per 50 ms, 600 ms in all, against a grace period of 300 ms.
TEST_F(ListsGrace300, FC1_UnmatchedPutWaitsWhileTheApplicationReadsTowardsTheUnlink) {
    char busy[8] = {}, first[8] = {}, second[8] = {};
    append(pt_, me_desc(busy, sizeof busy, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 1), PTL_PRIORITY_LIST,
           (void *)3);
    append(pt_, me_desc(first, sizeof first, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE),
           PTL_PRIORITY_LIST, (void *)1);
    constexpr int kAhead = 10;  // events queued before the unlink
    for (int i = 0; i < kAhead; ++i) ASSERT_EQ(put(1, 1), PTL_OK);
    ASSERT_EQ(put(4, 0), PTL_OK);                  // uses up the first entry
    ASSERT_EQ(put(4, 0, PTL_ACK_REQ, 4), PTL_OK);  // finds none: waits
    for (int i = 0; i < kAhead; ++i) {
        usleep(50000);
        ptl_event_t ev = next_event(eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_PUT);
        EXPECT_EQ(ev.user_ptr, (void *)3);
    }
    usleep(50000);
    EXPECT_EQ(next_event(eq_).user_ptr, (void *)1);
    usleep(50000);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    append(pt_, me_desc(second, sizeof second, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE),
           PTL_PRIORITY_LIST, (void *)2);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.user_ptr, (void *)2);
    EXPECT_EQ(drop_count(), 0u);
}

// Every unlink read and nothing posted within the grace period: an unmatched put is dropped
// (X3: no response), a grace period after the read.
TEST_F(ListsShortGrace, FC1_UnmatchedPutIsDroppedAGracePeriodAfterTheUnlinkWasRead) {
    char first[8] = {};
    append(pt_, me_desc(first, sizeof first, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE),
           PTL_PRIORITY_LIST, (void *)1);
    ASSERT_EQ(put(4, 0), PTL_OK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    ASSERT_EQ(put(4, 0), PTL_OK);
    const auto deadline = start + std::chrono::milliseconds(kTimeoutMs);
    while (drop_count() == 0 && std::chrono::steady_clock::now() < deadline) usleep(1000);
    EXPECT_EQ(drop_count(), 1u);
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
}

TEST_F(ListsStrictFlowControl, EQ4_ReservedSlotIsReusedWhenAFlowControlledPTIsAllocatedAgain) {
    ptl_handle_eq_t small;
    ASSERT_EQ(PtlEQAlloc(ni_, 2, &small), PTL_OK);
    ptl_pt_index_t pt;
    for (int i = 0; i < 20; ++i) {  // the EQ must not grow by a slot per cycle
        ASSERT_EQ(PtlPTAlloc(ni_, PTL_PT_FLOWCTRL, small, PTL_PT_ANY, &pt), PTL_OK);
        ASSERT_EQ(PtlPTFree(ni_, pt), PTL_OK);
    }
    ASSERT_EQ(PtlPTAlloc(ni_, PTL_PT_FLOWCTRL, small, PTL_PT_ANY, &pt), PTL_OK);
    expect_flow_control_at_third_put(small, pt);
}

TEST_F(Lists, FC10_PTDisableRefusesWithoutEvent) {
    char buf[8];
    append(pt_, me_desc(buf, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE), PTL_PRIORITY_LIST);
    ASSERT_EQ(PtlPTDisable(ni_, pt_), PTL_OK);
    ASSERT_EQ(put(4, 0, PTL_ACK_REQ), PTL_OK);
    expect_send();
    EXPECT_EQ(next_event(md_eq_).ni_fail_type, PTL_NI_PT_DISABLED);
    EXPECT_TRUE(eq_empty(eq_));
}

TEST_F(Lists, AllocDisabledPTAcceptsNothingUntilEnabled) {
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni_, PTL_PT_ALLOC_DISABLED, eq_, PTL_PT_ANY, &pt), PTL_OK);
    ASSERT_EQ(PtlPut(md_, 0, 4, PTL_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
    expect_send();
    EXPECT_EQ(next_event(md_eq_).ni_fail_type, PTL_NI_PT_DISABLED);
}

// F10: PTL_PT_ONLY_USE_ONCE / PTL_PT_ONLY_TRUNCATE are the client's promises; a client that breaks
// them (Open MPI's mtl appends persistent entries to such a PT) is served like the reference
// implementation serves it: the entry is accepted and behaves as its own options say.
TEST_F(Lists, F10_EntriesBreakingOnlyUseOnceAndOnlyTruncateAreAcceptedAndKeepTheirOptions) {
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni_, PTL_PT_ONLY_USE_ONCE | PTL_PT_ONLY_TRUNCATE, eq_, PTL_PT_ANY, &pt), PTL_OK);
    char small[4], persistent[64];
    append(pt, me_desc(small, sizeof small, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_NO_TRUNCATE),
           PTL_PRIORITY_LIST, (void *)1);
    append(pt, me_desc(persistent, sizeof persistent, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE),
           PTL_PRIORITY_LIST, (void *)2);
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(PtlPut(md_, 0, 16, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
        ptl_event_t ev = next_non_link(eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_PUT);
        EXPECT_EQ(ev.user_ptr, (void *)2) << "the no-truncate entry is too small for 16 bytes";
        EXPECT_EQ(ev.mlength, 16u);
    }
    ASSERT_EQ(PtlPut(md_, 0, 2, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
    ptl_event_t ev = next_non_link(eq_);
    EXPECT_EQ(ev.user_ptr, (void *)1);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
}

TEST_F(Lists, EV_SuppressionFlags_T16) {
    char buf[8];
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    append(pt_, me_desc(buf, 8,
                        PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_COMM_DISABLE |
                            PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_CT_BYTES,
                        0, 0, ct));
    ptl_handle_ct_t mct;
    ASSERT_EQ(PtlCTAlloc(ni_, &mct), PTL_OK);
    ptl_handle_md_t md = bind(src_, sizeof src_, PTL_MD_EVENT_SUCCESS_DISABLE | PTL_MD_EVENT_CT_SEND, mct);
    ASSERT_EQ(PtlPut(md, 0, 5, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0), PTL_OK);
    EXPECT_EQ(ct_wait(ct, 5).success, 5u);  // CT_BYTES counts mlength
    EXPECT_EQ(ct_wait(mct, 1).success, 1u);
    EXPECT_TRUE(eq_empty(eq_));
    EXPECT_TRUE(eq_empty(md_eq_));
}

// EQ1 allows keeping more than `count` ("overwritten ... in most situations"): a full EQ doubles
// up to PTL_EQ_GROW_MAX events, losing nothing, and only then overwrites the oldest.
TEST_F(ListsEqGrowsToFour, EQ1_FullQueueGrowsToTheLimitThenDropsOldest) {
    ptl_handle_eq_t eq;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(2, &eq, &pt));
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 0, 4));
    ptl_event_t ev;
    for (uint64_t i = 0; i < 4; ++i) {
        ASSERT_EQ(PtlEQGet(eq, &ev), PTL_OK) << "event " << i;
        EXPECT_EQ(ev.hdr_data, i);
    }
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 4, 10));
    EXPECT_EQ(PtlEQGet(eq, &ev), PTL_EQ_DROPPED);
    EXPECT_EQ(ev.hdr_data, 6u);  // capacity 4 now: the four newest survive
}

TEST_F(ListsNoEqGrowth, EQ1_OverflowDropsOldestAndReportsDropped) {
    ptl_handle_eq_t small;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(2, &small, &pt));
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 0, 6));
    ptl_event_t ev;
    EXPECT_EQ(PtlEQGet(small, &ev), PTL_EQ_DROPPED);
    EXPECT_EQ(ev.hdr_data, 4u);  // the newest events survive (capacity 2)
    EXPECT_EQ(PtlEQGet(small, &ev), PTL_OK);
}

// PtlXEQGrow (portals4_ext.h): queued events stay, in order, and the grown queue holds as
// many as a queue allocated that large; it never shrinks, and bad arguments are refused.
TEST_F(Lists, EQGrowKeepsQueuedEventsAndHoldsMore) {
    ptl_handle_eq_t eq;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(2, &eq, &pt));
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 0, 1));
    ASSERT_EQ(PtlXEQGrow(eq, 8), PTL_OK);
    EXPECT_EQ(PtlXEQGrow(eq, 1), PTL_OK);  // smaller: a no-op
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 1, 8));
    ptl_event_t ev;
    for (uint64_t i = 0; i < 8; ++i) {
        ASSERT_EQ(PtlEQGet(eq, &ev), PTL_OK) << "event " << i;  // not PTL_EQ_DROPPED
        EXPECT_EQ(ev.hdr_data, i);
    }
    EXPECT_EQ(PtlEQGet(eq, &ev), PTL_EQ_EMPTY);
    EXPECT_EQ(PtlXEQGrow(eq, (ptl_size_t(1) << 26) + 1), PTL_NO_SPACE);
    EXPECT_EQ(PtlXEQGrow(PTL_INVALID_HANDLE, 8), PTL_ARG_INVALID);
}

// PtlXEQTake (portals4_ext.h) returns what is queued, in order, then PTL_EQ_EMPTY.
TEST_F(Lists, EQTakeReturnsQueuedEvents) {
    ptl_handle_eq_t eq;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(8, &eq, &pt));
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 0, 3));
    ptl_event_t ev;
    for (uint64_t i = 0; i < 3; ++i) {
        ASSERT_EQ(PtlXEQTake(eq, &ev), PTL_OK) << "event " << i;
        EXPECT_EQ(ev.type, PTL_EVENT_PUT);
        EXPECT_EQ(ev.hdr_data, i);
    }
    EXPECT_EQ(PtlXEQTake(eq, &ev), PTL_EQ_EMPTY);
    EXPECT_EQ(PtlXEQTake(eq, nullptr), PTL_ARG_INVALID);
    EXPECT_EQ(PtlXEQTake(PTL_INVALID_HANDLE, &ev), PTL_ARG_INVALID);
}

// PtlXEQTakeMany (portals4_ext.h) takes up to `max` queued events at once, oldest first.
TEST_F(Lists, EQTakeManyReturnsBatchesInOrder) {
    ptl_handle_eq_t eq;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(8, &eq, &pt));
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 0, 5));
    ptl_event_t evs[3];
    unsigned taken = 99;
    ASSERT_EQ(PtlXEQTakeMany(eq, evs, 3, &taken), PTL_OK);
    ASSERT_EQ(taken, 3u);
    for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(evs[i].hdr_data, i);
    ASSERT_EQ(PtlXEQTakeMany(eq, evs, 3, &taken), PTL_OK);
    ASSERT_EQ(taken, 2u);  // short: the queue is empty now
    EXPECT_EQ(evs[0].hdr_data, 3u);
    EXPECT_EQ(evs[1].hdr_data, 4u);
    EXPECT_EQ(PtlXEQTakeMany(eq, evs, 3, &taken), PTL_EQ_EMPTY);
    EXPECT_EQ(taken, 0u);
    EXPECT_EQ(PtlXEQTakeMany(eq, evs, 0, &taken), PTL_ARG_INVALID);
    EXPECT_EQ(PtlXEQTakeMany(eq, nullptr, 3, &taken), PTL_ARG_INVALID);
    EXPECT_EQ(PtlXEQTakeMany(PTL_INVALID_HANDLE, evs, 3, &taken), PTL_ARG_INVALID);
}

// PtlXProgressEQ (portals4_ext.h) runs the engine and takes what that posted, in one call:
// without a progress thread nothing else delivers the puts to ourselves.
// Puts to ourselves are delivered by the calls that made them (issue 32: no other thread and
// no progress call is needed), so the events wait in the EQ before any progress; one
// PtlXProgressEQ takes them all. Delivery of other processes' messages by PtlXProgressEQ is
// what every UCT receive between two processes does (uct_tests, UCX's gtest).
TEST_F(ListsManualProgress, ProgressEQTakesWhatOwnPutsDeliveredInTheirCalls) {
    ptl_handle_eq_t eq;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(8, &eq, &pt));
    for (int i = 0; i < 3; ++i)
        ASSERT_EQ(PtlPut(md_, 0, 1, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, ptl_hdr_data_t(i)), PTL_OK);
    ptl_event_t evs[8];
    unsigned taken = 99;
    ASSERT_EQ(PtlXProgressEQ(eq, evs, 8, &taken), PTL_OK);
    ASSERT_EQ(taken, 3u);
    for (uint64_t i = 0; i < 3; ++i) {
        EXPECT_EQ(evs[i].type, PTL_EVENT_PUT);
        EXPECT_EQ(evs[i].hdr_data, i);
    }
    EXPECT_EQ(PtlXProgressEQ(eq, evs, 8, &taken), PTL_EQ_EMPTY);
    EXPECT_EQ(taken, 0u);
    EXPECT_EQ(PtlXProgressEQ(eq, evs, 0, &taken), PTL_ARG_INVALID);
    EXPECT_EQ(PtlXProgressEQ(eq, nullptr, 8, &taken), PTL_ARG_INVALID);
    EXPECT_EQ(PtlXProgressEQ(PTL_INVALID_HANDLE, evs, 8, &taken), PTL_ARG_INVALID);
}

// Idle polls of an EQ skip the engine lock once this thread has seen it empty; a put that
// arrives after such polls is still delivered by the next one, and a freed EQ is refused
// (PTL_ARG_INVALID, never PTL_EQ_EMPTY). Each step repeats: two polls in sixteen take the
// lock anyway.
TEST_F(ListsManualProgress, IdlePollsWithoutTheLockMissNothing) {
    ptl_handle_eq_t eq, other;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(8, &eq, &pt));
    ASSERT_EQ(PtlEQAlloc(ni_, 8, &other), PTL_OK);  // polled in turn, as UCP polls its ifaces
    // No SEND event: one would move the event count and send the next poll to the lock.
    const ptl_handle_md_t md = bind(src_, sizeof src_, PTL_MD_EVENT_SEND_DISABLE);
    ptl_event_t evs[8];
    unsigned taken = 99;
    for (int round = 0; round < 20; ++round) {
        for (int i = 0; i < 5; ++i) {
            ASSERT_EQ(PtlXProgressEQ(eq, evs, 8, &taken), PTL_EQ_EMPTY);
            ASSERT_EQ(PtlXProgressEQ(other, evs, 8, &taken), PTL_EQ_EMPTY);
        }
        ASSERT_EQ(PtlXProgressEQ(PTL_INVALID_HANDLE, evs, 8, &taken), PTL_ARG_INVALID);
        ASSERT_EQ(PtlPut(md, 0, 1, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, ptl_hdr_data_t(round)), PTL_OK);
        ASSERT_EQ(PtlXProgressEQ(eq, evs, 8, &taken), PTL_OK) << "round " << round;
        ASSERT_EQ(taken, 1u);
        EXPECT_EQ(evs[0].hdr_data, ptl_hdr_data_t(round));
    }
    ASSERT_EQ(PtlEQFree(eq), PTL_OK);  // still attached to the PT: its events are dropped
    for (int i = 0; i < 20; ++i) EXPECT_EQ(PtlXProgressEQ(eq, evs, 8, &taken), PTL_ARG_INVALID) << i;
}

// An overflow is reported once, with the batch whose first event follows the lost ones (EQ1).
TEST_F(ListsNoEqGrowth, EQ1_TakeManyReportsOverflowOnce) {
    ptl_handle_eq_t eq;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(2, &eq, &pt));
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 0, 4));  // 0 and 1 are overwritten
    ptl_event_t evs[4];
    unsigned taken = 0;
    ASSERT_EQ(PtlXEQTakeMany(eq, evs, 4, &taken), PTL_EQ_DROPPED);
    ASSERT_EQ(taken, 2u);
    EXPECT_EQ(evs[0].hdr_data, 2u);
    EXPECT_EQ(evs[1].hdr_data, 3u);
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 4, 5));
    ASSERT_EQ(PtlXEQTakeMany(eq, evs, 4, &taken), PTL_OK);
    EXPECT_EQ(evs[0].hdr_data, 4u);
}

// A batch that runs past the ring's end comes back whole and in order (the engine copies the
// two pieces of the ring at once).
TEST_F(ListsNoEqGrowth, EQTakeManyTakesAcrossTheRingsEnd) {
    ptl_handle_eq_t eq;
    ptl_pt_index_t pt;
    ASSERT_NO_FATAL_FAILURE(eq_with_pt(4, &eq, &pt));
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 0, 3));
    ptl_event_t evs[4];
    unsigned taken = 0;
    ASSERT_EQ(PtlXEQTakeMany(eq, evs, 2, &taken), PTL_OK);
    ASSERT_EQ(taken, 2u);
    ASSERT_NO_FATAL_FAILURE(put_numbered(pt, 3, 6));  // 4 queued: 2 at the ring's end, 3-5 wrapped
    ASSERT_EQ(PtlXEQTakeMany(eq, evs, 4, &taken), PTL_OK);
    ASSERT_EQ(taken, 4u);
    for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(evs[i].hdr_data, i + 2);
    EXPECT_EQ(PtlXEQTakeMany(eq, evs, 4, &taken), PTL_EQ_EMPTY);
}

TEST_F(Lists, EQ8_T22_PollReturnsFirstQueueWithEvent) {
    ptl_handle_eq_t q[2];
    ASSERT_EQ(PtlEQAlloc(ni_, 4, &q[0]), PTL_OK);
    ASSERT_EQ(PtlEQAlloc(ni_, 4, &q[1]), PTL_OK);
    ptl_pt_index_t p0, p1;
    ASSERT_EQ(PtlPTAlloc(ni_, 0, q[0], PTL_PT_ANY, &p0), PTL_OK);
    ASSERT_EQ(PtlPTAlloc(ni_, 0, q[1], PTL_PT_ANY, &p1), PTL_OK);
    char buf[8];
    append(p1, me_desc(buf, 8, PTL_ME_OP_PUT), PTL_PRIORITY_LIST, (void *)1);
    append(p0, me_desc(buf, 8, PTL_ME_OP_PUT), PTL_PRIORITY_LIST, (void *)0);
    ptl_event_t ev;
    unsigned which = 9;
    ASSERT_EQ(PtlEQPoll(q, 2, kTimeoutMs, &ev, &which), PTL_OK);
    EXPECT_EQ(which, 0u);  // both have a LINK: the first array element wins
    EXPECT_EQ(PtlEQPoll(q, 2, 0, &ev, &which), PTL_OK);
    EXPECT_EQ(which, 1u);
    EXPECT_EQ(PtlEQPoll(q, 2, 0, &ev, &which), PTL_EQ_EMPTY);
}

TEST_F(Lists, U5_ExplicitUnlinkGeneratesNoEventAndLeavesList) {
    char buf[8];
    ptl_handle_me_t h = append(pt_, me_desc(buf, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE));
    EXPECT_EQ(PtlMEUnlink(h), PTL_OK);
    EXPECT_TRUE(eq_empty(eq_));
    ASSERT_EQ(put(4, 0), PTL_OK);
    sync_point();
    EXPECT_TRUE(eq_empty(eq_));  // nothing matched: dropped
}

TEST_F(Lists, LIST_TOO_LONG_WhenListLimitReached) {
    ptl_ni_limits_t want = limits_;
    want.max_list_size = 2;
    ptl_handle_ni_t ni;
    ASSERT_EQ(
        PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, &want, nullptr, &ni),
        PTL_OK);
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni, 0, PTL_EQ_NONE, PTL_PT_ANY, &pt), PTL_OK);
    const ptl_le_t le = le_desc(nullptr, 0, 0);
    ptl_handle_le_t h;
    EXPECT_EQ(PtlLEAppend(ni, pt, &le, PTL_PRIORITY_LIST, nullptr, &h), PTL_OK);
    EXPECT_EQ(PtlLEAppend(ni, pt, &le, PTL_PRIORITY_LIST, nullptr, &h), PTL_OK);
    EXPECT_EQ(PtlLEAppend(ni, pt, &le, PTL_PRIORITY_LIST, nullptr, &h), PTL_LIST_TOO_LONG);
    EXPECT_EQ(PtlNIFini(ni), PTL_OK);
}

class NonMatching : public LoopbackTest {
protected:
    void SetUp() override { init(PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL); }
};

TEST_F(NonMatching, L13_FirstLEAlwaysMatches_LEsFollowSameOverflowRules) {
    char src[32];
    for (int i = 0; i < 32; ++i) src[i] = char(i);
    ptl_handle_md_t md = bind(src, sizeof src);
    ptl_pt_index_t pt = alloc_pt();
    char ov[32] = {}, a[32] = {};
    ptl_le_t le = le_desc(ov, sizeof ov, PTL_LE_OP_PUT | PTL_LE_EVENT_LINK_DISABLE);
    ptl_handle_le_t h;
    ASSERT_EQ(PtlLEAppend(ni_, pt, &le, PTL_OVERFLOW_LIST, (void *)1, &h), PTL_OK);
    ASSERT_EQ(PtlPut(md, 0, 8, PTL_NO_ACK_REQ, self_, pt, 0xffff /* ignored */, 0, nullptr, 0), PTL_OK);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.match_bits, 0u);  // non-matching entries report 0
    le.start = a;
    le.options |= PTL_LE_USE_ONCE;
    ASSERT_EQ(PtlLEAppend(ni_, pt, &le, PTL_PRIORITY_LIST, (void *)2, &h), PTL_OK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT_OVERFLOW);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_AUTO_UNLINK);
    ptl_me_t me = me_desc(a, 8, PTL_ME_OP_PUT);
    EXPECT_EQ(PtlMEAppend(ni_, pt, &me, PTL_PRIORITY_LIST, nullptr, &h), PTL_ARG_INVALID);  // I-list 22
}

TEST_F(NonMatching, F21_LESearchOnlyAndDelete) {
    char src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ov[32];
    ptl_handle_md_t md = bind(src, sizeof src);
    ptl_pt_index_t pt = alloc_pt();
    ptl_le_t le = le_desc(ov, sizeof ov, PTL_LE_OP_PUT | PTL_LE_EVENT_LINK_DISABLE);
    ptl_handle_le_t h;
    ASSERT_EQ(PtlLEAppend(ni_, pt, &le, PTL_OVERFLOW_LIST, nullptr, &h), PTL_OK);
    ASSERT_EQ(PtlPut(md, 0, 4, PTL_NO_ACK_REQ, self_, pt, 0, 0, nullptr, 0), PTL_OK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT);
    const ptl_le_t probe = le_desc(nullptr, 0, 0);
    ASSERT_EQ(PtlLESearch(ni_, pt, &probe, PTL_SEARCH_ONLY, (void *)1), PTL_OK);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_SEARCH);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
    EXPECT_EQ(ev.mlength, 4u);
    EXPECT_EQ(next_event(eq_).ni_fail_type, PTL_NI_NO_MATCH);
    EXPECT_EQ(PtlLEUnlink(h), PTL_IN_USE);  // the header is still there
    ASSERT_EQ(PtlLESearch(ni_, pt, &probe, PTL_SEARCH_DELETE, (void *)2), PTL_OK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT_OVERFLOW);
    EXPECT_EQ(next_event(eq_).ni_fail_type, PTL_NI_NO_MATCH);
    EXPECT_EQ(PtlLEUnlink(h), PTL_OK);
    EXPECT_EQ(PtlLESearch(ni_, pt, &probe, 5, nullptr), PTL_ARG_INVALID);
    EXPECT_EQ(PtlLESearch(ni_, 100000, &probe, PTL_SEARCH_ONLY, nullptr), PTL_ARG_INVALID);
    EXPECT_EQ(PtlLESearch(ni_, pt, nullptr, PTL_SEARCH_ONLY, nullptr), PTL_ARG_INVALID);
}

TEST_F(Lists, X3_SilentlyDroppedRendezvousPutStillCompletesItsSend) {
    // Above PTL_RNDV_THRESH the data stays in our buffer until the target pulls it; when the
    // target drops the put (no match, no flow control) the SEND must still arrive, without
    // an ACK, and the MD must become releasable.
    std::vector<char> big(1 << 20, 'x');
    ptl_handle_md_t md = bind(big.data(), big.size());
    ASSERT_EQ(PtlPut(md, 0, big.size(), PTL_ACK_REQ, self_, pt_, 99, 0, nullptr, 0), PTL_OK);
    ptl_event_t ev = next_event(md_eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_SEND);
    sync_point();
    EXPECT_TRUE(eq_empty(md_eq_));  // spec-literal: no ACK for a silent drop
    EXPECT_EQ(PtlMDRelease(md), PTL_OK);
}

// The target's short way for a put into an entry that needs none of the general checks
// (target.cc's deliver_plain_put: any uid, puts allowed, PTL_ME_IS_ACCESSIBLE memory, no
// use-once, offsets the initiator's or a slot pool's) must deliver exactly what the general path
// delivers. Each case sends the same puts into two entries that differ only in
// PTL_ME_IS_ACCESSIBLE (without it the general path copies through checked accesses) and
// compares the bytes, every field of the comm events, the counts and the initiator's ACKs:
// B1-B4 (offsets, truncation), C7 (comm event fields), CT2 (bytes counted), I-list 9 (ACK mlength).
#include <portals4_ext.h>
#include <sys/mman.h>

#include <cstring>
#include <string>
#include <vector>

#include "ptl_test_util.h"

using namespace ptltest;

namespace {

constexpr ptl_size_t kEntryBytes = 64;
constexpr ptl_size_t kSlot = 16;  // the slot pool's min_free

struct Shape {
    ptl_size_t length, remote_offset;
    ptl_ack_req_t ack;
};
// Lengths around the short copy's cases (0, < 8, 8-16, > 16), offsets inside, across and past
// the entry's end.
const Shape kShapes[] = {{0, 0, PTL_ACK_REQ},    {1, 3, PTL_NO_ACK_REQ}, {7, 0, PTL_ACK_REQ},
                         {8, 8, PTL_ACK_REQ},    {15, 40, PTL_ACK_REQ},  {16, 0, PTL_NO_ACK_REQ},
                         {17, 50, PTL_ACK_REQ},  {40, 0, PTL_ACK_REQ},   {8, 64, PTL_ACK_REQ},
                         {8, 200, PTL_ACK_REQ},  {64, 0, PTL_CT_ACK_REQ}};

struct Kind {
    const char *name;
    unsigned options;
    ptl_list_t list;
    bool pool;
};
const unsigned kCounted = PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_CT_COMM;
const Kind kKinds[] = {
    {"priority, remote offsets, bytes counted", kCounted | PTL_ME_EVENT_CT_BYTES, PTL_PRIORITY_LIST, false},
    {"priority, no comm events, messages counted", kCounted | PTL_ME_EVENT_COMM_DISABLE, PTL_PRIORITY_LIST,
     false},
    {"priority, success events disabled", kCounted | PTL_ME_EVENT_SUCCESS_DISABLE, PTL_PRIORITY_LIST, false},
    {"overflow, headers not kept", kCounted | PTL_ME_UNEXPECTED_HDR_DISABLE, PTL_OVERFLOW_LIST, false},
    {"slot pool", kCounted | PTL_ME_EVENT_CT_BYTES | PTL_ME_MANAGE_LOCAL | PTLX_ME_SLOT_POOL, PTL_PRIORITY_LIST,
     true},
};

// What one side saw: the entry's bytes, its events and count, the initiator's ACKs.
struct Seen {
    std::vector<unsigned char> bytes;
    std::vector<ptl_event_t> events;
    std::vector<ptl_event_t> acks;
    ptl_ct_event_t count{};
};

class PlainPut : public LoopbackTest {
protected:
    Seen run(const Kind &k, bool accessible) {
        Seen s;
        std::vector<unsigned char> buf(kEntryBytes, 0xee);
        ptl_handle_eq_t eq, ack_eq;
        ptl_handle_ct_t ct;
        EXPECT_EQ(PtlEQAlloc(ni_, 64, &eq), PTL_OK);
        EXPECT_EQ(PtlEQAlloc(ni_, 64, &ack_eq), PTL_OK);
        EXPECT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
        ptl_pt_index_t pt;
        EXPECT_EQ(PtlPTAlloc(ni_, 0, eq, PTL_PT_ANY, &pt), PTL_OK);
        ptl_me_t me = me_desc(buf.data(), kEntryBytes, k.options | (accessible ? PTL_ME_IS_ACCESSIBLE : 0), 5,
                              0, ct);
        if (k.pool) me.min_free = kSlot;
        const ptl_handle_me_t meh = append(pt, me, k.list);
        if (k.pool) {
            // The slots in an order of their own: the offsets come from the pool, not the puts.
            const ptl_size_t slots[] = {32, 0, 48, 16};
            EXPECT_EQ(PtlXMEGiveSlots(meh, slots, 4), PTL_OK);
        }
        std::vector<unsigned char> src(2 * kEntryBytes);
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
        const ptl_md_t md = md_desc(src.data(), src.size(), ack_eq, PTL_CT_NONE, PTL_MD_EVENT_SEND_DISABLE);
        ptl_handle_md_t mdh;
        EXPECT_EQ(PtlMDBind(ni_, &md, &mdh), PTL_OK);

        // A pool of 4 slots takes 4 puts; the rest would find no slot and be dropped.
        const size_t puts = k.pool ? 4 : std::size(kShapes);
        size_t acks = 0;
        for (size_t i = 0; i < puts; ++i) {
            const Shape &p = kShapes[i];
            EXPECT_EQ(PtlPut(mdh, i % 3, p.length, p.ack, self_, pt, 5, p.remote_offset, nullptr,
                             ptl_hdr_data_t(1000 + i)),
                      PTL_OK);
            acks += p.ack == PTL_ACK_REQ;  // a full ACK event; PTL_CT_ACK_REQ counts on the MD's CT only
        }
        s.count = ct_wait(ct, puts);
        const bool comm_events = !(k.options & (PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_SUCCESS_DISABLE));
        for (size_t i = 0; comm_events && i < puts; ++i) {
            ptl_event_t ev = next_event(eq);
            // The same place relative to each side's buffer.
            ev.start = reinterpret_cast<void *>(static_cast<unsigned char *>(ev.start) - buf.data());
            EXPECT_EQ(ev.pt_index, pt);
            s.events.push_back(ev);
        }
        for (size_t i = 0; i < acks; ++i) {
            ptl_event_t ev = next_event(ack_eq);
            if (ev.start) ev.start = reinterpret_cast<void *>(static_cast<unsigned char *>(ev.start) - src.data());
            EXPECT_EQ(ev.pt_index, pt);
            s.acks.push_back(ev);
        }
        EXPECT_TRUE(eq_empty(eq));
        s.bytes = buf;
        EXPECT_EQ(PtlMEUnlink(meh), PTL_OK);
        EXPECT_EQ(PtlMDRelease(mdh), PTL_OK);
        EXPECT_EQ(PtlPTFree(ni_, pt), PTL_OK);
        EXPECT_EQ(PtlCTFree(ct), PTL_OK);
        EXPECT_EQ(PtlEQFree(eq), PTL_OK);
        EXPECT_EQ(PtlEQFree(ack_eq), PTL_OK);
        return s;
    }
};

void expect_same_event(const ptl_event_t &general, const ptl_event_t &plain, const std::string &what) {
    EXPECT_EQ(general.type, plain.type) << what;
    EXPECT_EQ(general.start, plain.start) << what;
    EXPECT_EQ(general.user_ptr, plain.user_ptr) << what;
    EXPECT_EQ(general.hdr_data, plain.hdr_data) << what;
    EXPECT_EQ(general.match_bits, plain.match_bits) << what;
    EXPECT_EQ(general.rlength, plain.rlength) << what;
    EXPECT_EQ(general.mlength, plain.mlength) << what;
    EXPECT_EQ(general.remote_offset, plain.remote_offset) << what;
    EXPECT_EQ(general.uid, plain.uid) << what;
    EXPECT_EQ(general.initiator.phys.nid, plain.initiator.phys.nid) << what;
    EXPECT_EQ(general.initiator.phys.pid, plain.initiator.phys.pid) << what;
    EXPECT_EQ(general.ptl_list, plain.ptl_list) << what;
    EXPECT_EQ(general.ni_fail_type, plain.ni_fail_type) << what;
    EXPECT_EQ(general.atomic_operation, plain.atomic_operation) << what;
    EXPECT_EQ(general.atomic_type, plain.atomic_type) << what;
}

TEST_F(PlainPut, DeliversWhatTheGeneralPathDelivers_B1_B4_C7_CT2) {
    for (const Kind &k : kKinds) {
        SCOPED_TRACE(k.name);
        const Seen general = run(k, false);
        const Seen plain = run(k, true);
        EXPECT_EQ(general.bytes, plain.bytes);
        EXPECT_EQ(general.count.success, plain.count.success);
        EXPECT_EQ(general.count.failure, plain.count.failure);
        ASSERT_EQ(general.events.size(), plain.events.size());
        for (size_t i = 0; i < general.events.size(); ++i)
            expect_same_event(general.events[i], plain.events[i], "comm event " + std::to_string(i));
        ASSERT_EQ(general.acks.size(), plain.acks.size());
        for (size_t i = 0; i < general.acks.size(); ++i)
            expect_same_event(general.acks[i], plain.acks[i], "ack " + std::to_string(i));
    }
}

// The differential test above holds only if its two sides differ: the general side's entry
// really is written through checked copies, so an inaccessible byte is a failed delivery there
// and nowhere else (B6).
TEST_F(PlainPut, OnlyTheGeneralPathChecksAccess_B6) {
    const ptl_pt_index_t pt = alloc_pt();
    std::vector<unsigned char> src(8, 1);
    const ptl_handle_md_t mdh = bind(src.data(), src.size(), PTL_MD_EVENT_SEND_DISABLE);
    // Memory the process cannot write: the general path reports PTL_NI_SEGV.
    void *ro = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(ro, MAP_FAILED);
    append(pt, me_desc(ro, 4096, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 9, 0));
    ASSERT_EQ(PtlPut(mdh, 0, 8, PTL_NO_ACK_REQ, self_, pt, 9, 0, nullptr, 0), PTL_OK);
    const ptl_event_t ev = next_non_link(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_SEGV);
    munmap(ro, 4096);
    EXPECT_EQ(PtlMDRelease(mdh), PTL_OK);
}

}  // namespace

// Shared helpers for the GoogleTest suites: every wait has a timeout, so a lost message
// fails a test instead of hanging it.
#pragma once

#include <gtest/gtest.h>
#include <portals4.h>

#include "ptl_descriptors.h"

#include <vector>

namespace ptltest {

constexpr ptl_time_t kTimeoutMs = 5000;

inline ptl_event_t next_event(ptl_handle_eq_t eq, ptl_time_t timeout = kTimeoutMs) {
    ptl_event_t ev{};
    unsigned which = 0;
    const int rc = PtlEQPoll(&eq, 1, timeout, &ev, &which);
    EXPECT_TRUE(rc == PTL_OK || rc == PTL_EQ_DROPPED) << "PtlEQPoll returned " << rc;
    if (rc != PTL_OK && rc != PTL_EQ_DROPPED) ev.type = 0xff;
    return ev;
}

inline ptl_ct_event_t ct_wait(ptl_handle_ct_t ct, ptl_size_t test, ptl_time_t timeout = kTimeoutMs) {
    ptl_ct_event_t v{};
    unsigned which = 0;
    const int rc = PtlCTPoll(&ct, &test, 1, timeout, &v, &which);
    EXPECT_EQ(rc, PTL_OK) << "PtlCTPoll for " << test;
    if (rc != PTL_OK) PtlCTGet(ct, &v);  // what it reached: PtlCTPoll leaves v alone
    return v;
}

// One process, one matching physical NI, talking to itself through the loopback path.
class LoopbackTest : public ::testing::Test {
protected:
    void SetUp() override { init(PTL_NI_MATCHING | PTL_NI_PHYSICAL); }
    void TearDown() override {
        if (ni_ != PTL_INVALID_HANDLE) {
            EXPECT_EQ(PtlNIFini(ni_), PTL_OK);
        }
        PtlFini();
    }
    void init(unsigned options) {
        matching_ = options & PTL_NI_MATCHING;
        ASSERT_EQ(PtlInit(), PTL_OK);
        ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, options, PTL_PID_ANY, nullptr, &limits_, &ni_), PTL_OK);
        ASSERT_EQ(PtlGetPhysId(ni_, &self_), PTL_OK);
        ASSERT_EQ(PtlEQAlloc(ni_, 256, &eq_), PTL_OK);
        ASSERT_EQ(PtlEQAlloc(ni_, 256, &md_eq_), PTL_OK);
    }
    ptl_pt_index_t alloc_pt(unsigned options = 0, bool with_eq = true) {
        ptl_pt_index_t pt = 0;
        EXPECT_EQ(PtlPTAlloc(ni_, options, with_eq ? eq_ : PTL_EQ_NONE, PTL_PT_ANY, &pt), PTL_OK);
        return pt;
    }
    ptl_handle_md_t bind(void *start, ptl_size_t len, unsigned options = 0,
                         ptl_handle_ct_t ct = PTL_CT_NONE) {
        ptl_handle_md_t h = PTL_INVALID_HANDLE;
        const ptl_md_t md = md_desc(start, len, md_eq_, ct, options);
        EXPECT_EQ(PtlMDBind(ni_, &md, &h), PTL_OK);
        return h;
    }
    ptl_handle_me_t append(ptl_pt_index_t pt, const ptl_me_t &me, ptl_list_t list = PTL_PRIORITY_LIST,
                           void *user_ptr = nullptr) {
        ptl_handle_me_t h = PTL_INVALID_HANDLE;
        EXPECT_EQ(PtlMEAppend(ni_, pt, &me, list, user_ptr, &h), PTL_OK);
        return h;
    }
    // Drains events of one kind we do not care about (LINK) and returns the next other one.
    ptl_event_t next_non_link(ptl_handle_eq_t eq) {
        for (;;) {
            ptl_event_t ev = next_event(eq);
            if (ev.type != PTL_EVENT_LINK) return ev;
        }
    }
    // Every message before this one has been processed once it returns (per-peer order).
    void sync_point();
    bool eq_empty(ptl_handle_eq_t eq) {
        ptl_event_t ev;
        return PtlEQGet(eq, &ev) == PTL_EQ_EMPTY;
    }

    bool matching_ = true;
    ptl_handle_ni_t ni_ = PTL_INVALID_HANDLE;
    ptl_ni_limits_t limits_{};
    ptl_process_t self_{};
    ptl_handle_eq_t eq_ = PTL_INVALID_HANDLE;
    ptl_handle_eq_t md_eq_ = PTL_INVALID_HANDLE;
    ptl_pt_index_t sync_pt_ = PTL_PT_ANY;
    ptl_handle_ct_t sync_ct_ = PTL_INVALID_HANDLE;
    ptl_handle_md_t sync_md_ = PTL_INVALID_HANDLE;
    ptl_size_t sync_count_ = 0;
    char sync_byte_ = 0;
};

inline void LoopbackTest::sync_point() {
    if (sync_pt_ == PTL_PT_ANY) {
        ASSERT_EQ(PtlCTAlloc(ni_, &sync_ct_), PTL_OK);
        ASSERT_EQ(PtlPTAlloc(ni_, 0, PTL_EQ_NONE, PTL_PT_ANY, &sync_pt_), PTL_OK);
        ptl_me_t me = me_desc(nullptr, 0, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, 0, ~0ull, sync_ct_);
        ptl_handle_me_t h;
        if (matching_) {
            ASSERT_EQ(PtlMEAppend(ni_, sync_pt_, &me, PTL_PRIORITY_LIST, nullptr, &h), PTL_OK);
        } else {
            const ptl_le_t le = le_desc(nullptr, 0, PTL_LE_OP_PUT | PTL_LE_EVENT_CT_COMM, sync_ct_);
            ASSERT_EQ(PtlLEAppend(ni_, sync_pt_, &le, PTL_PRIORITY_LIST, nullptr, &h), PTL_OK);
        }
        const ptl_md_t md = md_desc(&sync_byte_, 1);
        ASSERT_EQ(PtlMDBind(ni_, &md, &sync_md_), PTL_OK);
    }
    ASSERT_EQ(PtlPut(sync_md_, 0, 0, PTL_NO_ACK_REQ, self_, sync_pt_, 0, 0, nullptr, 0), PTL_OK);
    ct_wait(sync_ct_, ++sync_count_);
}

}  // namespace ptltest

// What the tests of a wire against hostile input share: a live matching physical NI with an
// EQ and portal 3, its malformed-message counter, and the header of a put to it as a peer
// would write one (the engine's protocol, ptl::proto).
#pragma once

#include <unistd.h>

#include "../src/ptl/engine/protocol.h"
#include "ptl_test_util.h"

class HostileNi : public ::testing::Test {
protected:
    static constexpr ptl_match_bits_t kMatchBits = 5;
    void SetUp() override {
        ASSERT_EQ(PtlInit(), PTL_OK);
        ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr,
                            nullptr, &ni_),
                  PTL_OK);
        ASSERT_EQ(PtlGetPhysId(ni_, &self_), PTL_OK);
        ASSERT_EQ(PtlEQAlloc(ni_, 64, &eq_), PTL_OK);
        ASSERT_EQ(PtlPTAlloc(ni_, 0, eq_, 3, &pt_), PTL_OK);
    }
    void TearDown() override {
        EXPECT_EQ(PtlNIFini(ni_), PTL_OK);
        PtlFini();
    }
    ptl_sr_value_t malformed() {
        ptl_sr_value_t v = -1;
        EXPECT_EQ(PtlNIStatus(ni_, PTL_SR_MALFORMED_MESSAGES, &v), PTL_OK);
        return v;
    }
    ptl::proto::Header put_header(uint64_t length) const {
        ptl::proto::Header h{};
        h.op = ptl::proto::kPut;
        h.ni_index = 2;  // matching, physical
        h.pt_index = pt_;
        h.uid = uint32_t(getuid());
        h.src_rank = PTL_RANK_ANY;
        h.length = length;
        h.match_bits = kMatchBits;
        return h;
    }
    ptl_handle_ni_t ni_{};
    ptl_process_t self_{};
    ptl_handle_eq_t eq_{};
    ptl_pt_index_t pt_{};
};

// Operations whose target is the calling process complete inside the call (issue 32): no other
// thread is needed, so a caller that checks its own memory right after the call finds the
// operation done, also while every CPU is busy with other work (one rank per core) and the
// progress thread is not scheduled. Digest G10 (application bypass) and EO3/EO4 (an operation
// is complete before its event appears): here the event is there when the call returns.
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "ptl_test_util.h"

using namespace ptltest;

namespace {

// Keeps every CPU busy while it lives: the state conformance programs of the reference
// implementation failed in (372 of 406 under such load, issue 32).
class CpuLoad {
public:
    CpuLoad() {
        const unsigned n = 2 * std::max(1u, std::thread::hardware_concurrency());
        for (unsigned i = 0; i < n; ++i)
            threads_.emplace_back([this] {
                volatile uint64_t x = 0;
                while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
            });
    }
    ~CpuLoad() {
        stop_.store(true);
        for (auto &t : threads_) t.join();
    }

private:
    std::atomic<bool> stop_{false};
    std::vector<std::thread> threads_;
};

constexpr int kRounds = 200;

}  // namespace

class OwnOperations : public LoopbackTest {
protected:
    void SetUp() override {
        LoopbackTest::SetUp();
        pt_ = alloc_pt();
    }
    ptl_pt_index_t pt_ = 0;
};

TEST_F(OwnOperations, G10_PutAtomicSwapAndGetToOneselfAreDoneWhenTheCallReturns) {
    alignas(8) int64_t target[4] = {};
    alignas(8) int64_t src[4] = {}, fetched[4] = {};
    const unsigned opts =
        PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_COMM_DISABLE;
    ptl_handle_me_t me = append(pt_, me_desc(target, sizeof target, opts));
    ptl_handle_md_t sm = bind(src, sizeof src, PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE);
    ptl_handle_md_t fm = bind(fetched, sizeof fetched, PTL_MD_EVENT_SEND_DISABLE);
    CpuLoad load;
    for (int i = 1; i <= kRounds; ++i) {
        src[0] = i;
        ASSERT_EQ(PtlPut(sm, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0), PTL_OK);
        ASSERT_EQ(reinterpret_cast<volatile int64_t *>(target)[0], i) << "put, round " << i;

        src[1] = 2;
        ASSERT_EQ(PtlAtomic(sm, 8, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 8, nullptr, 0, PTL_SUM, PTL_INT64_T),
                  PTL_OK);
        ASSERT_EQ(reinterpret_cast<volatile int64_t *>(target)[1], 2 * i) << "atomic, round " << i;

        src[2] = -i;
        ASSERT_EQ(PtlSwap(fm, 16, sm, 16, 8, self_, pt_, 0, 16, nullptr, 0, nullptr, PTL_SWAP, PTL_INT64_T),
                  PTL_OK);
        ASSERT_EQ(reinterpret_cast<volatile int64_t *>(target)[2], -i) << "swap, round " << i;
        ASSERT_EQ(reinterpret_cast<volatile int64_t *>(fetched)[2], -(i - 1)) << "swap's fetch, round " << i;
        ptl_event_t ev{};
        ASSERT_EQ(PtlEQGet(md_eq_, &ev), PTL_OK) << "the swap's REPLY is posted before the call returns";
        EXPECT_EQ(ev.type, PTL_EVENT_REPLY);
        EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);

        ASSERT_EQ(PtlGet(fm, 0, 8, self_, pt_, 0, 0, nullptr), PTL_OK);
        ASSERT_EQ(reinterpret_cast<volatile int64_t *>(fetched)[0], i) << "get, round " << i;
        ASSERT_EQ(PtlEQGet(md_eq_, &ev), PTL_OK) << "the get's REPLY is posted before the call returns";
        EXPECT_EQ(ev.type, PTL_EVENT_REPLY);
    }
    EXPECT_EQ(PtlMDRelease(sm), PTL_OK);
    EXPECT_EQ(PtlMDRelease(fm), PTL_OK);
    EXPECT_EQ(PtlMEUnlink(me), PTL_OK);
}

// What the process queued to itself earlier lands first, and the acknowledgement a put asked
// for is counted by the time the call returns (C5: CT_ACK counts on the initiator's MD).
TEST_F(OwnOperations, G10_O2_AckedPutsLandInOrderAndAreCountedWhenTheCallReturns) {
    int64_t target = 0;
    int64_t src[2] = {1, 2};
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    ptl_handle_me_t me =
        append(pt_, me_desc(&target, sizeof target,
                            PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_COMM_DISABLE));
    ptl_handle_md_t sm = bind(src, sizeof src, PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_SEND_DISABLE, ct);
    CpuLoad load;
    for (int i = 1; i <= kRounds; ++i) {
        ASSERT_EQ(PtlPut(sm, 0, 8, PTL_CT_ACK_REQ, self_, pt_, 0, 0, nullptr, 0), PTL_OK);
        ASSERT_EQ(PtlPut(sm, 8, 8, PTL_CT_ACK_REQ, self_, pt_, 0, 0, nullptr, 0), PTL_OK);
        ASSERT_EQ(reinterpret_cast<volatile int64_t *>(&target)[0], 2) << "round " << i;
        ptl_ct_event_t v{};
        ASSERT_EQ(PtlCTGet(ct, &v), PTL_OK);
        ASSERT_EQ(v.success, uint64_t(2 * i)) << "both ACKs counted in round " << i;
        target = 0;
    }
    EXPECT_EQ(PtlMDRelease(sm), PTL_OK);
    EXPECT_EQ(PtlMEUnlink(me), PTL_OK);
    EXPECT_EQ(PtlCTFree(ct), PTL_OK);
}

// TR7: a triggered put whose threshold a PtlCTInc reaches fires in that call; aimed at
// ourselves, it has landed when PtlCTInc returns.
TEST_F(OwnOperations, TR7_G10_TriggeredPutToOneselfLandsWithinTheCTIncThatFiredIt) {
    int64_t target = 0, src = 0;
    ptl_handle_ct_t trig;
    ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
    ptl_handle_me_t me =
        append(pt_, me_desc(&target, sizeof target,
                            PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_COMM_DISABLE));
    ptl_handle_md_t sm = bind(&src, sizeof src, PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE);
    CpuLoad load;
    for (int i = 1; i <= kRounds; ++i) {
        ASSERT_EQ(
            PtlTriggeredPut(sm, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, ptl_size_t(i)),
            PTL_OK);
        src = i;
        ASSERT_EQ(reinterpret_cast<volatile int64_t *>(&target)[0], i - 1) << "fired early, round " << i;
        ASSERT_EQ(PtlCTInc(trig, {1, 0}), PTL_OK);
        ASSERT_EQ(reinterpret_cast<volatile int64_t *>(&target)[0], i) << "round " << i;
    }
    EXPECT_EQ(PtlMDRelease(sm), PTL_OK);
    EXPECT_EQ(PtlMEUnlink(me), PTL_OK);
    EXPECT_EQ(PtlCTFree(trig), PTL_OK);
}

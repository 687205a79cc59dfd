// §3.14-§3.16 and digest §8-§11: put/get (inline and bulk), iovecs, inaccessible memory,
// acknowledgment types, counting events, every atomic op × datatype, triggered operations.
#include <portals4_ext.h>
#include <sys/mman.h>

#include <chrono>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../src/ptl/runtime/identity.h"
#include "ptl_test_util.h"

using namespace ptltest;

class Data : public LoopbackTest {
protected:
    void SetUp() override {
        LoopbackTest::SetUp();
        pt_ = alloc_pt();
    }
    ptl_pt_index_t pt_ = 0;
};

TEST_F(Data, F38_F39_PutAndGetSmallAndLargeWithVerification) {
    for (size_t len : {size_t(1), size_t(100), size_t(4096), size_t(70000), size_t(3u << 20)}) {
        std::vector<char> src(len), dst(len, 0), back(len, 0);
        for (size_t i = 0; i < len; ++i) src[i] = char(i * 7 + len);
        ptl_handle_me_t me = append(pt_, me_desc(dst.data(), len, PTL_ME_OP_PUT | PTL_ME_OP_GET |
                                                                      PTL_ME_EVENT_LINK_DISABLE));
        ptl_handle_md_t md = bind(src.data(), len);
        ASSERT_EQ(PtlPut(md, 0, len, PTL_ACK_REQ, self_, pt_, 0, 0, (void *)5, 0), PTL_OK);
        bool send = false, ack = false;
        for (int i = 0; i < 2; ++i) {  // EV2: SEND and ACK are unordered
            ptl_event_t ev = next_event(md_eq_);
            if (ev.type == PTL_EVENT_SEND) send = true;
            if (ev.type == PTL_EVENT_ACK) {
                ack = true;
                EXPECT_EQ(ev.mlength, len);
                EXPECT_EQ(ev.user_ptr, (void *)5);
            }
        }
        EXPECT_TRUE(send && ack);
        EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT);
        EXPECT_EQ(std::memcmp(src.data(), dst.data(), len), 0) << len;
        ptl_handle_md_t bmd = bind(back.data(), len);
        ASSERT_EQ(PtlGet(bmd, 0, len, self_, pt_, 0, 0, (void *)6), PTL_OK);
        ptl_event_t ev = next_event(md_eq_);
        EXPECT_EQ(ev.type, PTL_EVENT_REPLY);
        EXPECT_EQ(ev.mlength, len);
        EXPECT_EQ(next_event(eq_).type, PTL_EVENT_GET);
        EXPECT_EQ(std::memcmp(src.data(), back.data(), len), 0) << len;
        EXPECT_EQ(PtlMDRelease(md), PTL_OK);
        EXPECT_EQ(PtlMDRelease(bmd), PTL_OK);
        EXPECT_EQ(PtlMEUnlink(me), PTL_OK);
    }
}

TEST_F(Data, IOVEC_MDsAndEntriesBehaveAsContiguous) {
    char a[5], b[7], c[20];
    ptl_iovec_t tv[3] = {{a, 5}, {b, 7}, {c, 20}};
    ptl_handle_me_t me = append(pt_, me_desc(tv, 3, PTL_IOVEC | PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE));
    (void)me;
    char s1[10], s2[10];
    for (int i = 0; i < 10; ++i) s1[i] = char('A' + i), s2[i] = char('a' + i);
    ptl_iovec_t sv[2] = {{s1, 10}, {s2, 10}};
    ptl_handle_md_t md = bind(sv, 2, PTL_IOVEC);
    ASSERT_EQ(PtlPut(md, 6, 12, PTL_NO_ACK_REQ, self_, pt_, 0, 3, nullptr, 0), PTL_OK);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.start, (void *)(a + 3));
    const char want[] = "GHIJabcdefgh";
    char got[12];
    std::memcpy(got, a + 3, 2);
    std::memcpy(got + 2, b, 7);
    std::memcpy(got + 9, c, 3);
    EXPECT_EQ(std::memcmp(got, want, 12), 0);
}

TEST_F(Data, N2_InaccessibleTargetMemoryFailsTheOperationNotTheProcess) {
    ASSERT_TRUE(limits_.features & PTL_TARGET_BIND_INACCESSIBLE);
    const long page = sysconf(_SC_PAGESIZE);
    void *hole = mmap(nullptr, size_t(page) * 2, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(hole, MAP_FAILED);
    // An ME covering the whole address space, as SHMEM libraries bind.
    append(pt_, me_desc(nullptr, PTL_SIZE_MAX, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_LINK_DISABLE));
    char src[64] = "payload";
    ptl_handle_md_t md = bind(src, sizeof src);
    ASSERT_EQ(PtlPut(md, 0, 8, PTL_ACK_REQ, self_, pt_, 0, reinterpret_cast<uintptr_t>(hole), nullptr, 0), PTL_OK);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_SEGV);
    next_event(md_eq_);  // SEND
    EXPECT_EQ(next_event(md_eq_).ni_fail_type, PTL_NI_SEGV);
    // Zero bytes never SEGV (N5), and valid memory through the same ME works.
    ASSERT_EQ(PtlPut(md, 0, 0, PTL_NO_ACK_REQ, self_, pt_, 0, reinterpret_cast<uintptr_t>(hole), nullptr, 0), PTL_OK);
    EXPECT_EQ(next_event(eq_).ni_fail_type, PTL_NI_OK);
    char dst[8] = {};
    ASSERT_EQ(PtlPut(md, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, reinterpret_cast<uintptr_t>(dst), nullptr, 0), PTL_OK);
    EXPECT_EQ(next_event(eq_).ni_fail_type, PTL_NI_OK);
    EXPECT_STREQ(dst, "payload");
    munmap(hole, size_t(page) * 2);
}

TEST_F(Data, C5_C6_T18_AckTypesAndCounting) {
    char src[16] = {}, dst[16];
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    ptl_handle_md_t md = bind(src, 16, PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_CT_BYTES | PTL_MD_EVENT_SEND_DISABLE, ct);
    append(pt_, me_desc(dst, 10, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_COMM_DISABLE));
    ASSERT_EQ(PtlPut(md, 0, 16, PTL_CT_ACK_REQ, self_, pt_, 0, 0, nullptr, 0), PTL_OK);
    EXPECT_EQ(ct_wait(ct, 10).success, 10u);  // T17: the target's mlength
    // OC_ACK_REQ counts operations, and a no-match drop counts as success (C6).
    ptl_pt_index_t empty = alloc_pt();
    ASSERT_EQ(PtlPut(md, 0, 4, PTL_OC_ACK_REQ, self_, empty, 0, 0, nullptr, 0), PTL_OK);
    ptl_ct_event_t v = ct_wait(ct, 11);
    EXPECT_EQ(v.success, 11u);
    EXPECT_EQ(v.failure, 0u);
    EXPECT_TRUE(eq_empty(md_eq_));  // CT_ACK_REQ and OC_ACK_REQ: counting only
}

TEST_F(Data, C11_T24_CTWaitReturnsOnFailure) {
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    ptl_ct_event_t out{};
    std::thread t([&] { EXPECT_EQ(PtlCTWait(ct, 10, &out), PTL_OK); });
    ASSERT_EQ(PtlCTInc(ct, ptl_ct_event_t{0, 1}), PTL_OK);
    t.join();
    EXPECT_EQ(out.failure, 1u);
    EXPECT_EQ(out.success, 0u);
    EXPECT_EQ(PtlCTInc(ct, ptl_ct_event_t{1, 1}), PTL_ARG_INVALID);  // one field only
}

TEST_F(Data, C9_CountersWrapModulo2to64) {
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    ASSERT_EQ(PtlCTSet(ct, ptl_ct_event_t{PTL_SIZE_MAX, 0}), PTL_OK);
    ASSERT_EQ(PtlCTInc(ct, ptl_ct_event_t{2, 0}), PTL_OK);
    ptl_ct_event_t v;
    ASSERT_EQ(PtlCTGet(ct, &v), PTL_OK);
    EXPECT_EQ(v.success, 1u);
}

TEST_F(Data, T4_CTWaitWakesAllWaiters) {
    ptl_handle_ct_t ct;
    ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
    std::vector<std::thread> ts;
    std::atomic<int> done{0};
    for (int i = 0; i < 3; ++i)
        ts.emplace_back([&] {
            ptl_ct_event_t v;
            if (PtlCTWait(ct, 2, &v) == PTL_OK && v.success >= 2) ++done;
        });
    ASSERT_EQ(PtlCTInc(ct, ptl_ct_event_t{2, 0}), PTL_OK);
    for (auto &t : ts) t.join();
    EXPECT_EQ(done.load(), 3);
}

TEST_F(Data, TR1_TR3_T19_TriggeredPutReadsPayloadAtFireTime) {
    char src[8] = "before", dst[8] = {};
    ptl_handle_ct_t trig, rx;
    ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
    ASSERT_EQ(PtlCTAlloc(ni_, &rx), PTL_OK);
    append(pt_, me_desc(dst, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, 0, 0, rx));
    ptl_handle_md_t md = bind(src, 8);
    ASSERT_EQ(PtlTriggeredPut(md, 0, 7, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, 2), PTL_OK);
    ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{0, 5}), PTL_OK);  // failures never trigger
    ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
    sync_point();
    ptl_ct_event_t v;
    PtlCTGet(rx, &v);
    EXPECT_EQ(v.success, 0u);
    std::strcpy(src, "after!");
    ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{5, 0}), PTL_OK);
    ct_wait(rx, 1);
    EXPECT_STREQ(dst, "after!");
}

TEST_F(Data, TR4_TR6_TR7_T20_FireOrderByThresholdThenPostingOrder) {
    // Triggered CTSets on one trigger CT record firing order into a log CT chain.
    ptl_handle_ct_t trig, log[4];
    ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
    char dst[4] = {};
    ptl_handle_ct_t rx;
    ASSERT_EQ(PtlCTAlloc(ni_, &rx), PTL_OK);
    append(pt_, me_desc(dst, 4, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTL_ME_EVENT_CT_COMM, 0, 0, rx));
    char ids[4] = {'3', '1', 'a', 'b'};
    ptl_handle_md_t md = bind(ids, 4);
    const ptl_size_t th[4] = {3, 1, 2, 2};
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(PtlCTAlloc(ni_, &log[i]), PTL_OK);
        ASSERT_EQ(PtlTriggeredPut(md, ptl_size_t(i), 1, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, th[i]), PTL_OK);
    }
    ASSERT_EQ(PtlCTSet(trig, ptl_ct_event_t{3, 0}), PTL_OK);  // one big jump
    ct_wait(rx, 4);
    EXPECT_EQ(std::string(dst, 4), "1ab3");  // locally managed offsets record arrival order
    // Already reached: fires immediately.
    ASSERT_EQ(PtlTriggeredCTInc(log[0], ptl_ct_event_t{1, 0}, trig, 1), PTL_OK);
    ptl_ct_event_t v;
    PtlCTGet(log[0], &v);
    EXPECT_EQ(v.success, 1u);
}

TEST_F(Data, TR8_T21_CancelTriggeredAndCTFreeDeletePending) {
    ptl_handle_ct_t trig, target;
    ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
    ASSERT_EQ(PtlCTAlloc(ni_, &target), PTL_OK);
    ASSERT_EQ(PtlTriggeredCTInc(target, ptl_ct_event_t{1, 0}, trig, 1), PTL_OK);
    ASSERT_EQ(PtlTriggeredCTSet(target, ptl_ct_event_t{50, 0}, trig, 2), PTL_OK);
    ASSERT_EQ(PtlCTSet(trig, ptl_ct_event_t{0, 3}), PTL_OK);
    ASSERT_EQ(PtlCTCancelTriggered(trig), PTL_OK);
    ptl_ct_event_t v;
    PtlCTGet(trig, &v);
    EXPECT_EQ(v.failure, 3u);  // counts kept
    ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{5, 0}), PTL_OK);
    PtlCTGet(target, &v);
    EXPECT_EQ(v.success, 0u);  // nothing fired
    ASSERT_EQ(PtlTriggeredCTSet(target, ptl_ct_event_t{9, 0}, trig, 100), PTL_OK);
    EXPECT_EQ(PtlCTFree(trig), PTL_OK);
    ASSERT_EQ(PtlTriggeredCTInc(target, ptl_ct_event_t{1, 0}, trig, 1), PTL_ARG_INVALID);
}

TEST_F(Data, TR10_ChainedTriggeredCTIncOrdersAcrossCTs) {
    ptl_handle_ct_t a, b, c;
    ASSERT_EQ(PtlCTAlloc(ni_, &a), PTL_OK);
    ASSERT_EQ(PtlCTAlloc(ni_, &b), PTL_OK);
    ASSERT_EQ(PtlCTAlloc(ni_, &c), PTL_OK);
    // a:1 -> b += 1 -> c = {7, 0}; a deep chain of 200 increments on b.
    ASSERT_EQ(PtlTriggeredCTSet(c, ptl_ct_event_t{7, 0}, b, 200), PTL_OK);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(PtlTriggeredCTInc(b, ptl_ct_event_t{1, 0}, a, ptl_size_t(i + 1)), PTL_OK);
    ASSERT_EQ(PtlCTInc(a, ptl_ct_event_t{200, 0}), PTL_OK);
    ptl_ct_event_t v;
    PtlCTGet(c, &v);
    EXPECT_EQ(v.success, 7u);
}

TEST_F(Data, T25_AtomicInOverflowListIsDepositedRaw) {
    char ov[16] = {};
    append(pt_, me_desc(ov, 16, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 0, ~0ull), PTL_OVERFLOW_LIST);
    int64_t v = 5;
    ptl_handle_md_t md = bind(&v, 8);
    ASSERT_EQ(PtlAtomic(md, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_SUM, PTL_INT64_T), PTL_OK);
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_ATOMIC);
    EXPECT_EQ(ev.atomic_operation, PTL_SUM);
    EXPECT_EQ(ev.atomic_type, PTL_INT64_T);
    int64_t got;
    std::memcpy(&got, ov, 8);
    EXPECT_EQ(got, 5);
}

TEST_F(Data, A10_T5_SwapNeedsBothOpPutAndOpGet) {
    int64_t t = 0, in = 1, out = 0, operand = 0;
    append(pt_, me_desc(&t, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE));
    ptl_handle_md_t gm = bind(&out, 8), pm = bind(&in, 8);
    ASSERT_EQ(PtlSwap(gm, 0, pm, 0, 8, self_, pt_, 0, 0, nullptr, 0, &operand, PTL_CSWAP, PTL_INT64_T), PTL_OK);
    ptl_event_t ev;
    do ev = next_event(md_eq_);
    while (ev.type != PTL_EVENT_REPLY);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OP_VIOLATION);
    EXPECT_EQ(t, 0);
}

// Every op × datatype through PtlAtomic / PtlFetchAtomic / PtlSwap against a local
// reference computation (digest §10.1-10.2), including the illegal combinations.
template <typename T>
struct Ref {
    static T apply(ptl_op_t op, T t, T i, T o) {
        switch (op) {
            case PTL_MIN: if constexpr (!std::is_class_v<T>) return i < t ? i : t; break;
            case PTL_MAX: if constexpr (!std::is_class_v<T>) return i > t ? i : t; break;
            case PTL_SUM: return T(t + i);
            case PTL_DIFF: return T(t - i);
            case PTL_PROD: return T(t * i);
            case PTL_SWAP: return i;
            case PTL_CSWAP: return o == t ? i : t;
            case PTL_CSWAP_NE: return o != t ? i : t;
            default: break;
        }
        if constexpr (!std::is_class_v<T>) {
            switch (op) {
                case PTL_CSWAP_LE: return o <= t ? i : t;
                case PTL_CSWAP_LT: return o < t ? i : t;
                case PTL_CSWAP_GE: return o >= t ? i : t;
                case PTL_CSWAP_GT: return o > t ? i : t;
                default: break;
            }
        }
        if constexpr (std::is_integral_v<T>) {
            switch (op) {
                case PTL_LOR: return T(i || t);
                case PTL_LAND: return T(i && t);
                case PTL_LXOR: return T(!i != !t);
                case PTL_BOR: return T(i | t);
                case PTL_BAND: return T(i & t);
                case PTL_BXOR: return T(i ^ t);
                case PTL_MSWAP: return T((i & o) | (t & ~o));
                default: break;
            }
        }
        return t;
    }
};

class Atomics : public Data {
protected:
    template <typename T>
    void run(ptl_datatype_t dt, T t0, T i0, T o0) {
        const bool integral = std::is_integral_v<T>, complex = std::is_class_v<T>;
        for (ptl_op_t op = PTL_MIN; op <= PTL_DIFF; ++op) {
            const bool swap_op = op >= PTL_SWAP && op <= PTL_MSWAP;
            bool legal = true;
            if ((op == PTL_MIN || op == PTL_MAX) && complex) legal = false;
            if ((op >= PTL_LOR && op <= PTL_BXOR) || op == PTL_MSWAP) legal = integral;
            if (op >= PTL_CSWAP_LE && op <= PTL_CSWAP_GT && complex) legal = false;
            T target = t0, in[2] = {i0, i0}, fetched[2] = {};
            T target2[2] = {t0, t0};
            ptl_handle_me_t me = append(pt_, me_desc(target2, sizeof target2,
                                                     PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_LINK_DISABLE |
                                                         PTL_ME_EVENT_COMM_DISABLE));
            ptl_handle_md_t pm = bind(in, sizeof in, PTL_MD_EVENT_SEND_DISABLE);
            ptl_handle_md_t gm = bind(fetched, sizeof fetched);
            const size_t len = swap_op && op != PTL_SWAP ? sizeof(T) : sizeof in;
            int rc;
            if (swap_op)
                rc = PtlSwap(gm, 0, pm, 0, len, self_, pt_, 0, 0, nullptr, 0, &o0, op, dt);
            else
                rc = PtlFetchAtomic(gm, 0, pm, 0, len, self_, pt_, 0, 0, nullptr, 0, op, dt);
            if (!legal) {
                EXPECT_EQ(rc, PTL_ARG_INVALID) << "op " << int(op) << " dt " << int(dt);
            } else {
                ASSERT_EQ(rc, PTL_OK) << "op " << int(op) << " dt " << int(dt);
                ptl_event_t ev = next_event(md_eq_);
                EXPECT_EQ(ev.type, PTL_EVENT_REPLY);
                EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
                EXPECT_EQ(ev.mlength, len);
                const T want = Ref<T>::apply(op, target, i0, o0);
                EXPECT_TRUE(std::memcmp(&target2[0], &want, sizeof(T)) == 0 || target2[0] == want)
                    << "op " << int(op) << " dt " << int(dt);
                EXPECT_TRUE(fetched[0] == t0) << "fetch returns the old value, op " << int(op) << " dt " << int(dt);
                // Non-fetching variant (not for swaps) on the second element.
                if (!swap_op) {
                    ASSERT_EQ(PtlAtomic(pm, 0, sizeof(T), PTL_ACK_REQ, self_, pt_, 0, sizeof(T), nullptr, 0, op, dt), PTL_OK);
                    EXPECT_EQ(next_event(md_eq_).type, PTL_EVENT_ACK);
                    // The fetch already applied op once to both elements.
                    const T once = Ref<T>::apply(op, t0, i0, o0);
                    EXPECT_TRUE(target2[1] == Ref<T>::apply(op, once, i0, o0)) << "atomic op " << int(op);
                }
            }
            EXPECT_EQ(PtlMDRelease(pm), PTL_OK);
            EXPECT_EQ(PtlMDRelease(gm), PTL_OK);
            EXPECT_EQ(PtlMEUnlink(me), PTL_OK);
        }
    }
};

TEST_F(Atomics, A_EveryOpTimesEveryDatatype) {
    run<int8_t>(PTL_INT8_T, 100, 60, 100);   // SUM wraps
    run<uint8_t>(PTL_UINT8_T, 200, 7, 3);
    run<int16_t>(PTL_INT16_T, -300, 12, -300);
    run<uint16_t>(PTL_UINT16_T, 65000, 999, 1);
    run<int32_t>(PTL_INT32_T, -5, 3, 9);
    run<uint32_t>(PTL_UINT32_T, 0xf0f0f0f0u, 0x0ff00ff0u, 0xffff0000u);
    run<int64_t>(PTL_INT64_T, 7, 5, 5);      // T26-style: CSWAP_LE operand 5 <= target 7
    run<uint64_t>(PTL_UINT64_T, 1ull << 63, 3, 1ull << 63);
    run<float>(PTL_FLOAT, 1.5f, -2.25f, 1.5f);
    run<double>(PTL_DOUBLE, 3.0, 0.5, 1.0);
    run<long double>(PTL_LONG_DOUBLE, 2.0L, 8.0L, 2.0L);
    run<std::complex<float>>(PTL_FLOAT_COMPLEX, {1, 2}, {3, -1}, {1, 2});
    run<std::complex<double>>(PTL_DOUBLE_COMPLEX, {1, 2}, {0.5, 4}, {9, 9});
    run<std::complex<long double>>(PTL_LONG_DOUBLE_COMPLEX, {1, 2}, {2, 2}, {1, 2});
}

// G10 (application bypass): atomics and swaps of every datatype to ourselves complete while the
// caller makes no Portals call at all, only reading the target memory, as a SHMEM program
// waiting on a flag does. The progress thread must do them.
TEST_F(Atomics, G10_AtomicsAndSwapsCompleteWhileTheCallerMakesNoPortalsCalls) {
    if (const char *p = std::getenv("PTL_PROGRESS"); p && std::strcmp(p, "manual") == 0)
        GTEST_SKIP() << "PTL_PROGRESS=manual: nothing progresses without a Portals call";
    struct Case {
        ptl_datatype_t dt;
        size_t size;
        bool integral;
    };
    const Case cases[] = {{PTL_INT8_T, 1, true},        {PTL_UINT8_T, 1, true},        {PTL_INT16_T, 2, true},
                          {PTL_UINT16_T, 2, true},      {PTL_INT32_T, 4, true},        {PTL_UINT32_T, 4, true},
                          {PTL_INT64_T, 8, true},       {PTL_UINT64_T, 8, true},       {PTL_FLOAT, 4, false},
                          {PTL_DOUBLE, 8, false},       {PTL_LONG_DOUBLE, 16, false},  {PTL_FLOAT_COMPLEX, 8, false},
                          {PTL_DOUBLE_COMPLEX, 16, false}, {PTL_LONG_DOUBLE_COMPLEX, 32, false}};
    alignas(16) unsigned char target[2][32], src[32], fetched[32], cmp[32] = {};
    ptl_handle_me_t me = append(pt_, me_desc(target, sizeof target,
                                             PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_LINK_DISABLE |
                                                 PTL_ME_EVENT_COMM_DISABLE));
    ptl_handle_md_t sm = bind(src, sizeof src, PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE);
    ptl_handle_md_t fm = bind(fetched, sizeof fetched);
    for (const Case &c : cases) {
        std::memset(target, 0, sizeof target);
        std::memset(src, 0x5a, sizeof src);
        // SWAP writes the source bytes as they are; BOR of 0x5a into zeros leaves 0x5a for the
        // integers too: the target ends up equal to the source either way.
        const bool integral = c.integral;
        ASSERT_EQ(PtlSwap(fm, 0, sm, 0, c.size, self_, pt_, 0, 0, nullptr, 0, cmp, PTL_SWAP, c.dt), PTL_OK);
        if (integral) {
            ASSERT_EQ(PtlAtomic(sm, 0, c.size, PTL_NO_ACK_REQ, self_, pt_, 0, 32, nullptr, 0, PTL_BOR, c.dt), PTL_OK);
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        // An x86 long double carries 10 bytes in its 16; the other 6 are padding, not value.
        const bool padded = c.dt == PTL_LONG_DOUBLE || c.dt == PTL_LONG_DOUBLE_COMPLEX;
        auto done = [&] {
            const volatile unsigned char *t0 = target[0], *t1 = target[1];
            for (size_t i = 0; i < c.size; ++i) {
                if (padded && i % 16 >= 10) continue;
                if (t0[i] != 0x5a || (integral && t1[i] != 0x5a)) return false;
            }
            return true;
        };
        while (!done() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_TRUE(done()) << "datatype " << int(c.dt) << " not applied without a Portals call";
        next_event(md_eq_);  // the swap's REPLY (its fetch) before the buffers are reused
    }
    EXPECT_EQ(PtlMDRelease(sm), PTL_OK);
    EXPECT_EQ(PtlMDRelease(fm), PTL_OK);
    EXPECT_EQ(PtlMEUnlink(me), PTL_OK);
}

TEST_F(Atomics, A1_A2_SizeAndLengthRules) {
    int64_t buf[1024] = {};
    ptl_handle_md_t md = bind(buf, sizeof buf);
    EXPECT_EQ(PtlAtomic(md, 0, limits_.max_atomic_size + 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_SUM,
                        PTL_INT64_T), PTL_ARG_INVALID);
    EXPECT_EQ(PtlAtomic(md, 0, 12, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_SUM, PTL_INT64_T), PTL_ARG_INVALID);
    int64_t op = 0;
    EXPECT_EQ(PtlSwap(md, 0, md, 8, 16, self_, pt_, 0, 0, nullptr, 0, &op, PTL_CSWAP, PTL_INT64_T), PTL_ARG_INVALID);
    EXPECT_EQ(PtlAtomic(md, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_SWAP, PTL_INT64_T), PTL_ARG_INVALID);
    EXPECT_EQ(PtlAtomic(md, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_SUM, 99), PTL_ARG_INVALID);
    EXPECT_EQ(PtlAtomicSync(), PTL_OK);
}

TEST_F(Data, D13_MDReleaseRefusedWhileReplyDue) {
    // A get to a PT with no entries is a silent drop: the REPLY never comes (X3), so the MD
    // stays in use. PTL_NOTIFY_DROPS would report it instead.
    char buf[8];
    ptl_handle_md_t md = bind(buf, 8);
    ptl_pt_index_t empty = alloc_pt();
    ASSERT_EQ(PtlGet(md, 0, 8, self_, empty, 0, 0, nullptr), PTL_OK);
    sync_point();
    EXPECT_EQ(PtlMDRelease(md), PTL_IN_USE);
}

TEST_F(Data, Undeliverable_TargetProcessDoesNotExist) {
    char buf[8];
    ptl_handle_md_t md = bind(buf, 8);
    // A pid no process owns, held by us for the test so none takes it meanwhile: a fixed pid
    // was once this very process's (PTL_PID_ANY starts at the OS pid modulo 1023), and the
    // put then went to itself.
    ptl_process_t nobody = self_;
    int lock_fd = -1;
    std::string err;
    for (uint32_t p = PTL_PID_MAX - 1; p > 0 && lock_fd < 0; --p)
        if (p != self_.phys.pid &&
            ptl::identity::acquire_pid(self_.phys.nid, p, &lock_fd, &err) == int64_t(p))
            nobody.phys.pid = p;
    ASSERT_GE(lock_fd, 0) << err;
    ASSERT_EQ(PtlPut(md, 0, 8, PTL_ACK_REQ, nobody, 0, 0, 0, nullptr, 0), PTL_OK);
    ptl_event_t ev = next_event(md_eq_);
    ptl::identity::release_pid(self_.phys.nid, nobody.phys.pid, lock_fd);
    EXPECT_EQ(ev.type, PTL_EVENT_SEND);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_UNDELIVERABLE);
}

TEST_F(Data, F45_F46_F47_F48_TriggeredGetAtomicFetchSwapFireOnThreshold) {
    int64_t target[4] = {100, 200, 300, 400};
    append(pt_, me_desc(target, sizeof target, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_LINK_DISABLE |
                                                  PTL_ME_EVENT_COMM_DISABLE));
    ptl_handle_ct_t trig, done;
    ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
    ASSERT_EQ(PtlCTAlloc(ni_, &done), PTL_OK);
    int64_t got = 0, add = 5, fetched = 0, swapped = 0, newval = 77, operand = 400;
    ptl_handle_md_t gmd = bind(&got, 8, PTL_MD_EVENT_CT_REPLY, done);
    ptl_handle_md_t amd = bind(&add, 8, PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_SEND_DISABLE, done);
    ptl_handle_md_t fmd = bind(&fetched, 8, PTL_MD_EVENT_CT_REPLY, done);
    ptl_handle_md_t smd = bind(&swapped, 8, PTL_MD_EVENT_CT_REPLY, done);
    ptl_handle_md_t nmd = bind(&newval, 8, PTL_MD_EVENT_SEND_DISABLE);
    ASSERT_EQ(PtlTriggeredGet(gmd, 0, 8, self_, pt_, 0, 0, nullptr, trig, 1), PTL_OK);
    ASSERT_EQ(PtlTriggeredAtomic(amd, 0, 8, PTL_CT_ACK_REQ, self_, pt_, 0, 8, nullptr, 0, PTL_SUM, PTL_INT64_T, trig, 2),
              PTL_OK);
    ASSERT_EQ(PtlTriggeredFetchAtomic(fmd, 0, amd, 0, 8, self_, pt_, 0, 16, nullptr, 0, PTL_SUM, PTL_INT64_T, trig, 2),
              PTL_OK);
    ASSERT_EQ(PtlTriggeredSwap(smd, 0, nmd, 0, 8, self_, pt_, 0, 24, nullptr, 0, &operand, PTL_CSWAP, PTL_INT64_T,
                               trig, 3), PTL_OK);
    EXPECT_EQ(PtlTriggeredSwap(smd, 0, nmd, 0, 8, self_, pt_, 0, 24, nullptr, 0, nullptr, PTL_CSWAP, PTL_INT64_T,
                               trig, 3), PTL_ARG_INVALID);  // CSWAP needs its operand
    EXPECT_EQ(PtlTriggeredGet(gmd, 0, 8, self_, pt_, 0, 0, nullptr, PTL_CT_NONE, 1), PTL_ARG_INVALID);
    sync_point();
    ptl_ct_event_t v;
    PtlCTGet(done, &v);
    EXPECT_EQ(v.success, 0u);  // nothing before the threshold
    ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
    ct_wait(done, 1);
    EXPECT_EQ(got, 100);
    ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{2, 0}), PTL_OK);
    v = ct_wait(done, 4);
    EXPECT_EQ(v.failure, 0u);
    EXPECT_EQ(target[1], 205);
    EXPECT_EQ(fetched, 300);
    EXPECT_EQ(target[2], 305);
    EXPECT_EQ(swapped, 400);  // operand matched: swapped in
    EXPECT_EQ(target[3], 77);
}

TEST_F(Data, TR9_TriggeredCallsRefuseAtPostTimeWhatCouldNeverFire) {
    int64_t buf[2] = {};
    ptl_handle_md_t md = bind(buf, sizeof buf);
    ptl_handle_ct_t trig;
    ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
    // Same argument rules as the immediate calls (B9, A1/A2, table 3-4).
    EXPECT_EQ(PtlTriggeredPut(md, 8, 16, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, 1), PTL_ARG_INVALID);
    EXPECT_EQ(PtlTriggeredAtomic(md, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_BOR, PTL_DOUBLE, trig, 1),
              PTL_ARG_INVALID);
    EXPECT_EQ(PtlTriggeredAtomic(md, 0, 6, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_SUM, PTL_INT64_T, trig, 1),
              PTL_ARG_INVALID);
    EXPECT_EQ(PtlTriggeredFetchAtomic(md, 0, md, 8, 8, self_, pt_, 0, 0, nullptr, 0, PTL_CSWAP, PTL_INT64_T, trig, 1),
              PTL_ARG_INVALID);
    EXPECT_EQ(PtlTriggeredGet(md, 0, 8, self_, 100000, 0, 0, nullptr, trig, 1), PTL_ARG_INVALID);
}

// PtlXPutAndCopy (portals4_ext.h): the put as PtlPut makes it, and the MD's bytes at the copy
// address once it returns; bad arguments and no copy address are refused.
TEST_F(Data, PutAndCopyLeavesACopyOfWhatItSentAndRefusesBadArguments) {
    for (size_t len : {size_t(1), size_t(4096), size_t(70000)}) {
        std::vector<char> src(len + 16), dst(len, 0), copy(len, 0);
        for (size_t i = 0; i < src.size(); ++i) src[i] = char(i * 13 + len);
        ptl_handle_me_t me = append(pt_, me_desc(dst.data(), len, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE));
        ptl_handle_md_t md = bind(src.data(), src.size(), PTL_MD_EVENT_SEND_DISABLE);
        ASSERT_EQ(PtlXPutAndCopy(md, 16, len, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, copy.data()),
                  PTL_OK);
        EXPECT_EQ(std::memcmp(copy.data(), src.data() + 16, len), 0) << len;
        EXPECT_EQ(next_event(eq_).type, PTL_EVENT_PUT);
        EXPECT_EQ(std::memcmp(dst.data(), src.data() + 16, len), 0) << len;

        EXPECT_EQ(PtlXPutAndCopy(md, 32, len, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, copy.data()),
                  PTL_ARG_INVALID);  // past the MD's end (B9)
        EXPECT_EQ(PtlXPutAndCopy(PTL_INVALID_HANDLE, 0, len, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0,
                                 copy.data()),
                  PTL_ARG_INVALID);
        EXPECT_EQ(PtlXPutAndCopy(md, 0, len, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, nullptr),
                  PTL_ARG_INVALID);
        ptl_event_t ev;
        EXPECT_EQ(PtlEQGet(eq_, &ev), PTL_EQ_EMPTY);
        EXPECT_EQ(PtlMDRelease(md), PTL_OK);
        EXPECT_EQ(PtlMEUnlink(me), PTL_OK);
    }
}

// atomics::apply_in_place (src/ptl/engine/atomic_ops.h), what peers and the target apply to
// memory the direct path shares: for every legal operation and datatype of up to 8 bytes it
// must leave what atomics::apply leaves and fetch what was there before (digest §10.2, A4).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "../src/ptl/engine/atomic_ops.h"

namespace atomics = ptl::atomics;

TEST(AtomicInPlace, A_EveryOpAndDatatypeMatchesTheReferenceArithmetic) {
    const ptl_datatype_t types[] = {PTL_INT8_T,  PTL_UINT8_T,  PTL_INT16_T,      PTL_UINT16_T,
                                    PTL_INT32_T, PTL_UINT32_T, PTL_INT64_T,      PTL_UINT64_T,
                                    PTL_FLOAT,   PTL_DOUBLE,   PTL_FLOAT_COMPLEX};
    std::mt19937_64 rng(42);
    int checked = 0;
    for (ptl_datatype_t dt : types) {
        const size_t n = atomics::datatype_size(dt);
        for (ptl_op_t op = 0; op <= PTL_DIFF; ++op) {
            const bool swap_family = op >= PTL_SWAP && op <= PTL_MSWAP;
            const atomics::Call call = swap_family ? atomics::Call::Swap : atomics::Call::FetchAtomic;
            if (!atomics::legal(op, dt, call)) continue;
            for (int round = 0; round < 50; ++round) {
                alignas(8) unsigned char target[32], reference[32], src[32], operand[8], fetched[32];
                const size_t len = (op == PTL_SWAP || !swap_family) ? 4 * n : n;
                for (auto *b : {target, src}) {
                    for (size_t i = 0; i < sizeof target; ++i)
                        b[i] = (unsigned char)(rng() % 7);  // collide often
                }
                // Floats from small integers: no NaN, compare bit for bit.
                if (dt == PTL_FLOAT || dt == PTL_FLOAT_COMPLEX)
                    for (auto *b : {target, src})
                        for (size_t i = 0; i < 32; i += 4) {
                            const float f = float(b[i] % 5);
                            std::memcpy(b + i, &f, 4);
                        }
                if (dt == PTL_DOUBLE)
                    for (auto *b : {target, src})
                        for (size_t i = 0; i < 32; i += 8) {
                            const double d = double(b[i] % 5);
                            std::memcpy(b + i, &d, 8);
                        }
                std::memcpy(operand, round % 2 ? target : src, n);  // CSWAP: half match
                std::memcpy(reference, target, sizeof target);
                atomics::apply(op, dt, reference, src, operand, len);
                unsigned char before[32];
                std::memcpy(before, target, sizeof target);
                ASSERT_TRUE(atomics::in_place_capable(dt, target, len));
                atomics::apply_in_place(op, dt, target, src, operand, len, fetched);
                ASSERT_EQ(std::memcmp(target, reference, len), 0) << "op " << int(op) << " type " << int(dt);
                ASSERT_EQ(std::memcmp(fetched, before, len), 0)
                    << "fetched, op " << int(op) << " type " << int(dt);
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 100 * 50);
}

TEST(AtomicInPlace, OnlyNaturallyAlignedElementsOfUpTo8Bytes) {
    alignas(16) unsigned char buf[64] = {};
    EXPECT_TRUE(atomics::in_place_capable(PTL_UINT64_T, buf + 8, 16));
    EXPECT_FALSE(atomics::in_place_capable(PTL_UINT64_T, buf + 4, 8));
    EXPECT_FALSE(atomics::in_place_capable(PTL_UINT32_T, buf, 6));
    EXPECT_FALSE(atomics::in_place_capable(PTL_DOUBLE_COMPLEX, buf, 16));
    EXPECT_FALSE(atomics::in_place_capable(PTL_LONG_DOUBLE, buf, 16));
    EXPECT_TRUE(atomics::in_place_capable(PTL_INT8_T, buf + 1, 3));
}

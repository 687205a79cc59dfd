// The initiator's table of operations awaiting a response (src/ptl/engine/pending_table.h):
// a response names its operation by the id the request carried, so a stale, repeated or
// forged id must find nothing (the engine then counts a drop instead of completing twice).
#include <gtest/gtest.h>

#include "../src/ptl/engine/pending_table.h"

namespace {

ptl::PendingOp op_for(uintptr_t tag) {
    ptl::PendingOp p{};
    p.user_ptr = reinterpret_cast<void *>(tag);
    p.peer = {1, uint32_t(tag)};
    return p;
}

TEST(PendingTable, TakeReturnsTheOperationOnce) {
    ptl::PendingTable t;
    const uint64_t a = t.add(op_for(1)), b = t.add(op_for(2));
    EXPECT_NE(a, 0u);
    EXPECT_NE(a, b);
    ptl::PendingOp out{};
    ASSERT_TRUE(t.take(b, &out));
    EXPECT_EQ(out.user_ptr, reinterpret_cast<void *>(2));
    EXPECT_FALSE(t.take(b, &out));  // a repeated response
    ASSERT_TRUE(t.take(a, &out));
    EXPECT_EQ(out.user_ptr, reinterpret_cast<void *>(1));
    EXPECT_TRUE(t.empty());
}

TEST(PendingTable, ReusedSlotDoesNotAnswerToTheOldId) {
    ptl::PendingTable t;
    const uint64_t old_id = t.add(op_for(1));
    ptl::PendingOp out{};
    ASSERT_TRUE(t.take(old_id, &out));
    const uint64_t new_id = t.add(op_for(2));  // the same slot, a new generation
    EXPECT_NE(new_id, old_id);
    EXPECT_FALSE(t.take(old_id, &out));
    ASSERT_TRUE(t.take(new_id, &out));
    EXPECT_EQ(out.user_ptr, reinterpret_cast<void *>(2));
}

TEST(PendingTable, ForgedIdsFindNothing) {
    ptl::PendingTable t;
    const uint64_t id = t.add(op_for(1));
    ptl::PendingOp out{};
    EXPECT_FALSE(t.take(0, &out));
    EXPECT_FALSE(t.take(id + 1, &out));                    // a slot never used
    EXPECT_FALSE(t.take(id ^ (uint64_t(1) << 40), &out));  // the right slot, another generation
    EXPECT_FALSE(t.take(~uint64_t(0), &out));
    EXPECT_FALSE(t.empty());
    EXPECT_TRUE(t.take(id, &out));
}

TEST(PendingTable, OnlyThePeerTheOperationWentToMayAnswerIt) {
    ptl::PendingTable t;
    const uint64_t id = t.add(op_for(7));  // went to {1, 7}
    ptl::PendingOp out{};
    EXPECT_FALSE(t.take_response(id, {1, 8}, &out));  // right id, another process
    EXPECT_FALSE(t.take_response(id, {2, 7}, &out));  // right pid, another node
    EXPECT_FALSE(t.empty());                          // still waiting for its real answer
    ASSERT_TRUE(t.take_response(id, {1, 7}, &out));
    EXPECT_EQ(out.user_ptr, reinterpret_cast<void *>(7));
    EXPECT_FALSE(t.take_response(id, {1, 7}, &out));
}

TEST(PendingTable, SelectListsOldestFirstAcrossReusedSlots) {
    ptl::PendingTable t;
    const uint64_t a = t.add(op_for(1));
    const uint64_t b = t.add(op_for(2));
    ptl::PendingOp out{};
    ASSERT_TRUE(t.take(a, &out));
    const uint64_t c = t.add(op_for(3));  // slot 0 again, but issued after b
    const uint64_t d = t.add(op_for(4));
    const auto all = t.select([](const ptl::PendingOp &) { return true; });
    EXPECT_EQ(all, (std::vector<uint64_t>{b, c, d}));
    const auto odd = t.select([](const ptl::PendingOp &p) { return p.peer.pid % 2 == 1; });
    EXPECT_EQ(odd, (std::vector<uint64_t>{c}));
}

}  // namespace

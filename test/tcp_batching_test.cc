// The tcp wire's deferred sends (acknowledgements): a deferred message makes no system call
// of its own; it leaves with the next send to its peer, in the same write and in order, or
// with the sender's next progress, whichever comes first. Two wires in one process, talking
// over 127.0.0.1.
#include <string>
#include <vector>

#include "tcp_wire_pair.h"

using ptl::InMessage;

namespace {

class TcpBatching : public ptltest::TcpWirePair {
protected:
    void SetUp() override {
        TcpWirePair::SetUp();
        if (HasFatalFailure()) return;
        // The connection is opened by the first send; deferring applies to an open one.
        ASSERT_TRUE(a_->send(b_id_, "open", 4, nullptr, 0));
        ASSERT_EQ(receive_at_b(1, 5000), std::vector<std::string>{"open"});
    }

    // What B receives while both wires (or B alone) are polled for `count` messages at most
    // `timeout_ms`.
    std::vector<std::string> receive_at_b(size_t count, long timeout_ms, bool progress_a = true) {
        got_b_.clear();
        poll_until(0, count, timeout_ms, progress_a);
        return got_b_;
    }
};

TEST_F(TcpBatching, DeferredMessagesWaitForTheNextSendAndGoFirst) {
    ASSERT_TRUE(a_->send_deferrable(b_id_, "ack1", 4, nullptr, 0));
    ASSERT_TRUE(a_->send_deferrable(b_id_, "ack2", 4, nullptr, 0));
    // Not written: B sees nothing however long it looks while A neither sends nor progresses.
    EXPECT_TRUE(receive_at_b(1, 100, false).empty());
    const std::string payload(100000, 'x');  // larger than one write may take
    const struct iovec iov { const_cast<char *>(payload.data()), payload.size() };
    ASSERT_TRUE(a_->send(b_id_, "msg3", 4, &iov, 1));
    EXPECT_EQ(receive_at_b(3, 5000), (std::vector<std::string>{"ack1", "ack2", "msg3"}));
}

TEST_F(TcpBatching, DeferredMessagesLeaveWithTheSendersNextProgress) {
    ASSERT_TRUE(a_->send_deferrable(b_id_, "ack", 3, nullptr, 0));
    EXPECT_TRUE(receive_at_b(1, 100, false).empty());
    a_->progress([](const InMessage &) {});
    EXPECT_EQ(receive_at_b(1, 5000, false), std::vector<std::string>{"ack"});
}

// More deferred messages than one sendmsg takes pieces (and past the bytes a connection
// holds back): they still leave in order, ahead of the send that follows them.
TEST_F(TcpBatching, MoreDeferredMessagesThanOneWriteTakesKeepTheirOrder) {
    std::vector<std::string> sent;
    for (int i = 0; i < 300; ++i) {
        sent.push_back("ack" + std::to_string(i) + std::string(100, '.'));  // 300 x 100 B > 16 KiB
        ASSERT_TRUE(a_->send_deferrable(b_id_, sent.back().data(), sent.back().size(), nullptr, 0));
    }
    sent.push_back("msg");
    ASSERT_TRUE(a_->send(b_id_, "msg", 3, nullptr, 0));
    EXPECT_EQ(receive_at_b(sent.size(), 10000), sent);
}

TEST_F(TcpBatching, ManyInterleavedMessagesKeepTheirOrder) {
    std::vector<std::string> sent;
    for (int i = 0; i < 2000; ++i) {
        const std::string h = "m" + std::to_string(i);
        sent.push_back(h);
        const bool ok = i % 3 ? a_->send_deferrable(b_id_, h.data(), h.size(), nullptr, 0)
                              : a_->send(b_id_, h.data(), h.size(), nullptr, 0);
        ASSERT_TRUE(ok);
        if (i % 7 == 0) a_->progress([](const InMessage &) {});
    }
    EXPECT_EQ(receive_at_b(sent.size(), 10000), sent);
}

}  // namespace

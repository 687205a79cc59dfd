// The tcp wire's deferred sends (acknowledgements): a deferred message makes no system call
// of its own; it leaves with the next send to its peer, in the same write and in order, or
// with the sender's next progress, whichever comes first. Two wires in one process, talking
// over 127.0.0.1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "../src/ptl/util/clock.h"
#include "../src/ptl/wire/tcp/tcp_wire.h"

using ptl::InMessage;
using ptl::PeerId;
using ptl::tcp::TcpWire;

namespace {

constexpr uint32_t kLoopbackNid = 0x7f000001;

class TcpBatching : public ::testing::Test {
protected:
    void SetUp() override {
        // Ports are port_base + pid: try pid pairs until two listeners come up.
        ptl::tcp::TcpConfig cfg;
        cfg.port_base = 20000;
        for (uint32_t attempt = 0; attempt < 64 && !b_; ++attempt) {
            const uint32_t pid = 10000 + (uint32_t(getpid()) * 2 + attempt * 2) % 30000;
            std::string err;
            a_id_ = {kLoopbackNid, pid};
            b_id_ = {kLoopbackNid, pid + 1};
            a_ = TcpWire::create(
                a_id_, cfg, [] {}, &err);
            if (a_)
                b_ = TcpWire::create(
                    b_id_, cfg, [] {}, &err);
            if (!b_) a_.reset();
        }
        ASSERT_TRUE(a_ && b_) << "no free pair of listening ports";
        // The connection is opened by the first send; deferring applies to an open one.
        ASSERT_TRUE(a_->send(b_id_, "open", 4, nullptr, 0));
        ASSERT_EQ(receive_at_b(1, 5000), std::vector<std::string>{"open"});
    }

    // Polls both wires until `count` messages reached B or `timeout_ms` passed; returns them.
    std::vector<std::string> receive_at_b(size_t count, long timeout_ms, bool progress_a = true) {
        std::vector<std::string> got;
        const auto handler = [&](const InMessage &m) {
            got.emplace_back(static_cast<const char *>(m.header), m.header_len);
        };
        const auto none = [](const InMessage &) {};
        const uint64_t end = ptl::monotonic_ns() + uint64_t(timeout_ms) * 1000000ull;
        while (got.size() < count && ptl::monotonic_ns() < end) {
            if (progress_a) a_->progress(none);
            b_->progress(handler);
        }
        return got;
    }

    PeerId a_id_{}, b_id_{};
    std::unique_ptr<TcpWire> a_, b_;
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

// The tcp wire lets go of a peer another wire carries (verbs: issue 34's "no tcp connection per
// peer once connected"): release_peer ends its connections with a Bye, the peer answers with
// its own and both close, neither taking that for the other's death; a later send opens a new
// connection. With no connection left, probe_peer tells a live process from a vanished one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tcp_wire_pair.h"

using ptl::PeerId;

namespace {

class TcpRelease : public ptltest::TcpWirePair {
protected:
    bool send(ptl::tcp::TcpWire &w, PeerId to, const std::string &header) {
        return w.send(to, header.data(), header.size(), nullptr, 0);
    }
    // Progresses both until neither has a connection, or `timeout_ms` passed.
    bool until_no_connections(long timeout_ms) {
        const uint64_t end = ptl::monotonic_ns() + uint64_t(timeout_ms) * 1000000ull;
        while ((a_->connections() || b_->connections()) && ptl::monotonic_ns() < end) poll_until(0, 0, 0);
        return a_->connections() == 0 && b_->connections() == 0;
    }
    // Progresses A until it holds a verdict on `peer` other than "probing", or `timeout_ms`.
    void until_probe_done(long timeout_ms) {
        const uint64_t end = ptl::monotonic_ns() + uint64_t(timeout_ms) * 1000000ull;
        while (a_->connections() && ptl::monotonic_ns() < end) poll_until(0, 0, 0);
    }
};

TEST_F(TcpRelease, BothSidesCloseAfterOneLetsGoAndNeitherCountsTheOtherDead) {
    ASSERT_TRUE(send(*a_, b_id_, "connect"));
    ASSERT_TRUE(poll_until(0, 1, 5000));
    ASSERT_TRUE(send(*b_, a_id_, "accept"));
    ASSERT_TRUE(send(*a_, b_id_, "ready"));  // what a releasing side sends last arrives
    a_->release_peer(b_id_);
    ASSERT_TRUE(until_no_connections(5000)) << "A " << a_->connections() << ", B " << b_->connections();
    EXPECT_EQ(got_b_, (std::vector<std::string>{"connect", "ready"}));
    EXPECT_EQ(got_a_, std::vector<std::string>{"accept"});
    EXPECT_FALSE(a_->peer_dead(b_id_));
    EXPECT_FALSE(b_->peer_dead(a_id_));
    EXPECT_EQ(a_->take_malformed() + b_->take_malformed(), 0u);
}

TEST_F(TcpRelease, CrossedFirstSendsLeaveTwoConnectionsAndBothClose) {
    ASSERT_TRUE(send(*a_, b_id_, "from a"));
    ASSERT_TRUE(send(*b_, a_id_, "from b"));
    ASSERT_TRUE(poll_until(1, 1, 5000));
    a_->release_peer(b_id_);
    b_->release_peer(a_id_);
    ASSERT_TRUE(until_no_connections(5000));
    EXPECT_FALSE(a_->peer_dead(b_id_));
    EXPECT_FALSE(b_->peer_dead(a_id_));
}

TEST_F(TcpRelease, ASendAfterTheReleaseOpensANewConnection) {
    ASSERT_TRUE(send(*a_, b_id_, "one"));
    ASSERT_TRUE(poll_until(0, 1, 5000));
    b_->release_peer(a_id_);  // the side that never sent lets go: the Bye goes back on A's connection
    ASSERT_TRUE(until_no_connections(5000));
    ASSERT_TRUE(send(*a_, b_id_, "two"));
    ASSERT_TRUE(send(*b_, a_id_, "back"));
    ASSERT_TRUE(poll_until(1, 2, 5000));
    EXPECT_EQ(got_b_, (std::vector<std::string>{"one", "two"}));
    EXPECT_EQ(got_a_, std::vector<std::string>{"back"});
}

TEST_F(TcpRelease, APeerThatDiesAfterTheReleaseIsFoundByAProbe) {
    ASSERT_TRUE(send(*a_, b_id_, "hello"));
    ASSERT_TRUE(poll_until(0, 1, 5000));
    a_->release_peer(b_id_);
    ASSERT_TRUE(until_no_connections(5000));

    a_->probe_peer(b_id_);  // alive: accepted, hung up
    until_probe_done(5000);
    EXPECT_EQ(a_->connections(), 0u);
    EXPECT_FALSE(a_->peer_dead(b_id_)) << "a live peer's probe made it dead";

    b_.reset();  // its port closes: the host refuses for it
    EXPECT_FALSE(a_->peer_dead(b_id_)) << "no connection, no probe: nothing can tell yet";
    a_->probe_peer(b_id_);
    until_probe_done(5000);
    EXPECT_TRUE(a_->peer_dead(b_id_));
    EXPECT_FALSE(send(*a_, b_id_, "after")) << "a send to a dead peer fails at once";
}

// A raw socket plays a peer that opened a connection and says Bye on it without ever reading
// what we send: the Bye makes its end of the connection no death, even with our answer unread.
TEST_F(TcpRelease, AByeFollowedByAResetIsNoDeath) {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(s, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(kLoopbackNid);
    at.sin_port = htons(uint16_t(kPortBase + b_id_.pid));
    ASSERT_EQ(connect(s, reinterpret_cast<sockaddr *>(&at), sizeof at), 0);
    const PeerId raw{kLoopbackNid, a_id_.pid + 7};
    const ptl::tcp::Hello h{ptl::tcp::kHelloMagic, ptl::tcp::kVersion, 0, raw.nid, raw.pid};
    const ptl::tcp::FrameHead fh{2, 0, 0, 2};
    std::string bytes(reinterpret_cast<const char *>(&h), sizeof h);
    bytes.append(reinterpret_cast<const char *>(&fh), sizeof fh);
    bytes += "hi!!";
    bytes.append(reinterpret_cast<const char *>(&ptl::tcp::kBye), sizeof ptl::tcp::kBye);
    ASSERT_EQ(write(s, bytes.data(), bytes.size()), ssize_t(bytes.size()));
    ASSERT_TRUE(poll_until(0, 1, 5000));
    poll_until(0, 0, 50);
    const struct linger reset { 1, 0 };
    setsockopt(s, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    close(s);  // with our Bye unread: a reset
    const uint64_t end = ptl::monotonic_ns() + 5000000000ull;
    while (b_->connections() && ptl::monotonic_ns() < end) poll_until(0, 0, 0);
    EXPECT_EQ(b_->connections(), 0u);
    EXPECT_FALSE(b_->peer_dead(raw));
    EXPECT_EQ(b_->take_malformed(), 0u);
}

TEST(TcpFramesBye, NothingMayFollowABye) {
    ptl::tcp::FrameReader rd(1 << 20);
    rd.assume_peer(1, 2);
    std::string bytes(reinterpret_cast<const char *>(&ptl::tcp::kBye), sizeof ptl::tcp::kBye);
    const ptl::tcp::FrameHead fh{1, 0, 0, 0};
    bytes.append(reinterpret_cast<const char *>(&fh), sizeof fh);
    bytes += "x";
    size_t room = 0;
    char *p = rd.space(&room);
    ASSERT_GE(room, bytes.size());
    bytes.copy(p, bytes.size());
    int delivered = 0;
    EXPECT_FALSE(rd.commit(bytes.size(), [&](const void *, size_t, const void *, size_t) { ++delivered; }));
    EXPECT_TRUE(rd.saw_bye());
    EXPECT_EQ(delivered, 0);
}

}  // namespace

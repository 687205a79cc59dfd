// The tcp wire answers a peer on the connection that peer opened (tcp_frame.h, version 2):
// one connection per pair of processes in the common case, so each message carries the TCP
// acknowledgement of the last one the other way instead of costing a segment of its own.
// Per-peer order holds in both directions, simultaneous first sends still work (each side
// keeps its own connection), a version 1 peer is never written to on its connection, and a
// peer that dies is noticed on the connection we answered it on.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "../src/ptl/wire/tcp/tcp_frame.h"
#include "tcp_wire_pair.h"

using ptl::InMessage;
using ptl::PeerId;
using ptl::tcp::FrameHead;
using ptl::tcp::Hello;

namespace {

class TcpDuplex : public ptltest::TcpWirePair {
protected:
    bool send(ptl::tcp::TcpWire &w, PeerId to, const std::string &header, const std::string &payload = {}) {
        const struct iovec iov { const_cast<char *>(payload.data()), payload.size() };
        return w.send(to, header.data(), header.size(), &iov, payload.empty() ? 0 : 1);
    }
};

TEST_F(TcpDuplex, AReplyTravelsOnTheConnectionTheRequestCameIn) {
    ASSERT_TRUE(send(*a_, b_id_, "request"));
    ASSERT_TRUE(poll_until(0, 1, 5000));
    ASSERT_TRUE(send(*b_, a_id_, "reply"));
    ASSERT_TRUE(poll_until(1, 1, 5000));
    EXPECT_EQ(got_a_, std::vector<std::string>{"reply"});
    EXPECT_EQ(a_->connections(), 1u) << "B opened no connection of its own";
    EXPECT_EQ(b_->connections(), 1u);
}

TEST_F(TcpDuplex, BothDirectionsKeepTheirOrderWithLargeFramesAmongSmallOnes) {
    ASSERT_TRUE(send(*a_, b_id_, "hello"));
    ASSERT_TRUE(poll_until(0, 1, 5000));
    got_b_.clear();
    const std::string big(300000, 'z');  // more than one write takes: queued behind the socket
    std::vector<std::string> a_to_b, b_to_a;
    for (int i = 0; i < 1000; ++i) {
        a_to_b.push_back("a" + std::to_string(i));
        b_to_a.push_back("b" + std::to_string(i));
        ASSERT_TRUE(send(*a_, b_id_, a_to_b.back(), i % 97 == 0 ? big : std::string()));
        ASSERT_TRUE(send(*b_, a_id_, b_to_a.back(), i % 89 == 0 ? big : std::string()));
        if (i % 13 == 0) poll_until(0, 0, 0);  // one progress of each
    }
    ASSERT_TRUE(poll_until(b_to_a.size(), a_to_b.size(), 20000));
    EXPECT_EQ(got_b_, a_to_b);
    EXPECT_EQ(got_a_, b_to_a);
    EXPECT_EQ(a_->connections(), 1u);
}

TEST_F(TcpDuplex, PeersWhoseFirstSendsCrossEachKeepTheirOwnConnection) {
    // Both connect before either has seen the other's Hello: two connections, and each side
    // must stay on its own one or messages could overtake each other.
    ASSERT_TRUE(send(*a_, b_id_, "a0"));
    ASSERT_TRUE(send(*b_, a_id_, "b0"));
    ASSERT_TRUE(poll_until(1, 1, 5000));
    std::vector<std::string> a_to_b{"a0"}, b_to_a{"b0"};
    for (int i = 1; i < 200; ++i) {
        a_to_b.push_back("a" + std::to_string(i));
        b_to_a.push_back("b" + std::to_string(i));
        ASSERT_TRUE(send(*a_, b_id_, a_to_b.back()));
        ASSERT_TRUE(send(*b_, a_id_, b_to_a.back()));
    }
    ASSERT_TRUE(poll_until(b_to_a.size(), a_to_b.size(), 10000));
    EXPECT_EQ(got_b_, a_to_b);
    EXPECT_EQ(got_a_, b_to_a);
    EXPECT_EQ(a_->connections(), 2u);
    EXPECT_EQ(b_->connections(), 2u);
}

TEST_F(TcpDuplex, APeerThatDiesIsNoticedOnTheConnectionWeAnsweredItOn) {
    ASSERT_TRUE(send(*a_, b_id_, "request"));
    ASSERT_TRUE(poll_until(0, 1, 5000));
    ASSERT_TRUE(send(*b_, a_id_, "reply"));
    ASSERT_TRUE(poll_until(1, 1, 5000));
    a_.reset();
    const uint64_t end = ptl::monotonic_ns() + 5000000000ull;
    while (!b_->peer_dead(a_id_) && ptl::monotonic_ns() < end) poll_until(0, 0, 0);
    EXPECT_TRUE(b_->peer_dead(a_id_));
    EXPECT_FALSE(send(*b_, a_id_, "after")) << "a send to a dead peer fails at once";
    EXPECT_EQ(b_->connections(), 0u);
}

// A raw socket plays a version 1 peer: it opens a connection with a version 1 Hello and
// listens on its own port, as every process does.
TEST_F(TcpDuplex, AVersion1PeerIsAnsweredOnAConnectionOfOurOwn) {
    const PeerId old_peer{kLoopbackNid, b_id_.pid + 1};
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(listener, 0);
    const int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(kLoopbackNid);
    at.sin_port = htons(uint16_t(kPortBase + old_peer.pid));
    if (bind(listener, reinterpret_cast<sockaddr *>(&at), sizeof at) != 0 || listen(listener, 4) != 0) {
        close(listener);
        GTEST_SKIP() << "port " << kPortBase + old_peer.pid << " is taken";
    }
    const int out = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in b_at = at;
    b_at.sin_port = htons(uint16_t(kPortBase + b_id_.pid));
    ASSERT_EQ(connect(out, reinterpret_cast<sockaddr *>(&b_at), sizeof b_at), 0) << std::strerror(errno);
    const Hello h{ptl::tcp::kHelloMagic, 1, 0, old_peer.nid, old_peer.pid};
    const FrameHead fh{5, 0, 0, 0};
    std::string bytes(reinterpret_cast<const char *>(&h), sizeof h);
    bytes.append(reinterpret_cast<const char *>(&fh), sizeof fh);
    bytes += "hello";
    ASSERT_EQ(write(out, bytes.data(), bytes.size()), ssize_t(bytes.size()));
    ASSERT_TRUE(poll_until(0, 1, 5000));
    EXPECT_EQ(got_b_, std::vector<std::string>{"hello"});

    ASSERT_TRUE(send(*b_, old_peer, "reply"));
    std::string in;  // what B sends on a connection to the old peer's port
    fcntl(listener, F_SETFL, O_NONBLOCK);
    int conn = -1;
    const uint64_t end = ptl::monotonic_ns() + 5000000000ull;
    while (in.size() < sizeof h + sizeof fh + 5 && ptl::monotonic_ns() < end) {
        poll_until(0, 0, 0);
        if (conn < 0) conn = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
        char buf[256];
        const ssize_t r = conn >= 0 ? read(conn, buf, sizeof buf) : -1;
        if (r > 0) in.append(buf, size_t(r));
    }
    ASSERT_EQ(in.size(), sizeof h + sizeof fh + 5) << "B connected to the old peer's port";
    Hello got_hello;
    std::memcpy(&got_hello, in.data(), sizeof got_hello);
    EXPECT_EQ(got_hello.pid, b_id_.pid);
    EXPECT_EQ(in.substr(sizeof h + sizeof fh), "reply");
    char c;
    EXPECT_EQ(recv(out, &c, 1, MSG_DONTWAIT), -1) << "nothing came back on the old peer's own connection";
    EXPECT_EQ(errno, EAGAIN);
    close(out);
    if (conn >= 0) close(conn);
    close(listener);
}

}  // namespace

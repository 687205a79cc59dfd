// The tcp wire against hostile input: its frame parser on its own, then a raw socket talking
// to a live NI's tcp port. Malformed frames are dropped and counted in
// PTL_SR_MALFORMED_MESSAGES (digest §16, status registers), nothing is written outside an ME.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../src/ptl/wire/tcp/tcp_frame.h"
#include "hostile_ni.h"

using namespace ptltest;
using ptl::tcp::FrameHead;
using ptl::tcp::FrameReader;
using ptl::tcp::Hello;

namespace {

struct Frame {
    std::string header, payload;
};

void append(std::string &s, const void *p, size_t n) {
    s.append(static_cast<const char *>(p), n);
}

std::string hello(uint32_t nid = 0x0a000001, uint32_t pid = 7) {
    const Hello h{ptl::tcp::kHelloMagic, ptl::tcp::kVersion, 0, nid, pid};
    std::string s;
    append(s, &h, sizeof h);
    return s;
}

std::string frame(const std::string &header, const std::string &payload) {
    const FrameHead fh{uint16_t(header.size()), 0, 0, payload.size()};
    std::string s;
    append(s, &fh, sizeof fh);
    return s + header + payload;
}

// Feeds `stream` in chunks of the given sizes (cycled); returns false once the reader fails.
bool feed(FrameReader &r, const std::string &stream, const std::vector<size_t> &chunks,
          std::vector<Frame> &got) {
    size_t off = 0, k = 0;
    const auto deliver = [&](const void *h, size_t hl, const void *p, size_t pl) {
        got.push_back(
            {std::string(static_cast<const char *>(h), hl), std::string(static_cast<const char *>(p), pl)});
    };
    while (off < stream.size()) {
        size_t room;
        char *dst = r.space(&room);
        if (room == 0) return false;
        const size_t n = std::min({room, chunks[k++ % chunks.size()], stream.size() - off});
        std::memcpy(dst, stream.data() + off, n);
        off += n;
        if (!r.commit(n, deliver)) return false;
    }
    return true;
}

TEST(TcpFrames, FramesOfEverySizeArriveWholeAndInOrderHoweverTheStreamIsCut) {
    std::mt19937 rng(42);
    std::vector<Frame> sent;
    std::string stream = hello();
    for (size_t len :
         {size_t(0), size_t(1), size_t(100), size_t(65000), size_t(70000), size_t(3) << 20, size_t(5)}) {
        std::string payload(len, '\0');
        for (auto &c : payload) c = char(rng());
        const std::string header(72, char('A' + sent.size()));
        sent.push_back({header, payload});
        stream += frame(header, payload);
    }
    for (const std::vector<size_t> &cuts :
         {std::vector<size_t>{1}, {7, 1, 300}, {65536}, {size_t(1) << 30}}) {
        FrameReader r(uint64_t(1) << 40);
        std::vector<Frame> got;
        ASSERT_TRUE(feed(r, stream, cuts, got));
        ASSERT_EQ(got.size(), sent.size());
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].header, sent[i].header) << "frame " << i;
            EXPECT_TRUE(got[i].payload == sent[i].payload) << "frame " << i;
        }
        EXPECT_TRUE(r.has_hello());
        EXPECT_EQ(r.peer_pid(), 7u);
        EXPECT_FALSE(r.mid_frame());
    }
}

TEST(TcpFrames, MalformedStreamsAreRejectedBeforeAnyFrameIsDelivered) {
    std::string bad_magic = hello();
    bad_magic[0] ^= 1;
    std::string bad_version = hello();
    bad_version[4] = 9;
    const std::string h = hello();
    FrameHead zero_header{0, 0, 0, 0}, long_header{ptl::tcp::kMaxHeader + 1, 0, 0, 0}, reserved{8, 1, 0, 0},
        huge_payload{8, 0, 0, (uint64_t(1) << 20) + 1};
    std::vector<std::string> cases = {bad_magic, bad_version};
    for (const FrameHead &fh : {zero_header, long_header, reserved, huge_payload}) {
        std::string s = h;
        append(s, &fh, sizeof fh);
        s += std::string(64, 'x');
        cases.push_back(s);
    }
    for (size_t i = 0; i < cases.size(); ++i) {
        FrameReader r(uint64_t(1) << 20);
        std::vector<Frame> got;
        EXPECT_FALSE(feed(r, cases[i], {1000}, got)) << "case " << i;
        EXPECT_TRUE(got.empty()) << "case " << i;
        EXPECT_TRUE(r.failed());
        size_t room = 1;
        r.space(&room);
        EXPECT_EQ(room, 0u) << "a failed reader takes nothing more";
    }
}

TEST(TcpFrames, ALyingLengthCostsOnlyTheBytesThatReallyArrive) {
    FrameReader r(uint64_t(1) << 40);
    std::string s = hello();
    const FrameHead fh{72, 0, 0, uint64_t(1) << 39};  // claims half a terabyte
    append(s, &fh, sizeof fh);
    s += std::string(72 + 4096, 'x');
    std::vector<Frame> got;
    ASSERT_TRUE(feed(r, s, {100000}, got));
    EXPECT_TRUE(got.empty());
    EXPECT_TRUE(r.mid_frame()) << "a connection closed now reports a truncated frame";
    size_t room;
    r.space(&room);
    EXPECT_LE(room, size_t(2) << 20) << "the buffer grew with the data, not with the claim";
}

// --- a raw socket against a live NI --------------------------------------------------------

class TcpHostile : public HostileNi {
protected:
    void TearDown() override {
        if (fd_ >= 0) close(fd_);
        HostileNi::TearDown();
    }
    // Connects to the NI's tcp port (PTL_TCP_PORT_BASE, default 17000, + pid).
    void connect_raw() {
        fd_ = socket(AF_INET, SOCK_STREAM, 0);
        ASSERT_GE(fd_, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(self_.phys.nid);
        const char *base = std::getenv("PTL_TCP_PORT_BASE");
        a.sin_port = htons(uint16_t((base ? std::atoi(base) : 17000) + int(self_.phys.pid)));
        ASSERT_EQ(connect(fd_, reinterpret_cast<sockaddr *>(&a), sizeof a), 0) << std::strerror(errno);
    }
    void send_raw(const std::string &s) { ASSERT_EQ(write(fd_, s.data(), s.size()), ssize_t(s.size())); }
    // Waits (bounded) until the malformed counter reaches `want`.
    bool malformed_reaches(ptl_sr_value_t want) {
        for (int i = 0; i < 2000 && malformed() < want; ++i) usleep(1000);
        return malformed() >= want;
    }
    std::string put_frame(const ptl::proto::Header &h, const std::string &payload) {
        std::string hs;
        append(hs, &h, sizeof h);
        return frame(hs, payload);
    }
    int fd_ = -1;
};

TEST_F(TcpHostile, GarbageInsteadOfAHelloIsCountedAndTheConnectionDropped) {
    connect_raw();
    send_raw(std::string(64, 'G'));
    EXPECT_TRUE(malformed_reaches(1));
    char c;
    EXPECT_EQ(read(fd_, &c, 1), 0) << "the wire closed the connection";
}

TEST_F(TcpHostile, BadFrameLengthsAndUnknownOpsAreCountedNeverDelivered) {
    connect_raw();
    ptl::proto::Header h = put_header(8);
    h.op = 99;  // unknown op: the frame is fine, the engine refuses it
    send_raw(hello(self_.phys.nid, 999) + put_frame(h, std::string(8, 'x')));
    EXPECT_TRUE(malformed_reaches(1));
    h = put_header(8);
    h.pt_index = 100000;  // out-of-range portal index: dropped (no such PT)
    send_raw(put_frame(h, std::string(8, 'x')));
    const FrameHead too_long{ptl::tcp::kMaxHeader + 1, 0, 0, 0};
    std::string s;
    append(s, &too_long, sizeof too_long);
    send_raw(s);
    EXPECT_TRUE(malformed_reaches(2));
    ptl_sr_value_t drops = 0;
    EXPECT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &drops), PTL_OK);
    EXPECT_GE(drops, 1);
}

TEST_F(TcpHostile, APutClaimingMoreThanTheMEHoldsNeverWritesPastIt) {
    char mem[64];
    std::memset(mem, '.', sizeof mem);
    ptl_me_t me = me_desc(mem + 16, 16, PTL_ME_OP_PUT, 5, 0);
    ptl_handle_me_t meh;
    ASSERT_EQ(PtlMEAppend(ni_, pt_, &me, PTL_PRIORITY_LIST, nullptr, &meh), PTL_OK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_LINK);
    connect_raw();
    // rlength 4096 but only 40 bytes carried; then rlength 8 with 4096 bytes carried.
    send_raw(hello(self_.phys.nid, 999) + put_frame(put_header(4096), std::string(40, 'X')));
    ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.mlength, 16u);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
    send_raw(put_frame(put_header(8), std::string(4096, 'Y')));
    ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.mlength, 8u);
    EXPECT_EQ(std::string(mem, 16), std::string(16, '.')) << "nothing before the ME";
    EXPECT_EQ(std::string(mem + 16, 16), std::string(8, 'Y') + std::string(8, 'X'));
    EXPECT_EQ(std::string(mem + 32, 32), std::string(32, '.')) << "nothing after the ME";
}

// A tcp peer may claim any identity in its Hello, even ours. A get asking for its reply to
// be written straight into "its" memory (kBulkReply, meant for the shm wire's cross-memory
// attach) must then not make us write into our own memory wherever it points: bulk transfers
// go through the wire the message came by, and tcp has none, so the get fails instead.
TEST_F(TcpHostile, APeerClaimingOurIdentityCannotMakeUsWriteIntoOurOwnMemory) {
    char secret[32];
    std::memset(secret, 'S', sizeof secret);
    ptl_me_t me = me_desc(secret, sizeof secret, PTL_ME_OP_GET, 5, 0);
    ptl_handle_me_t meh;
    ASSERT_EQ(PtlMEAppend(ni_, pt_, &me, PTL_PRIORITY_LIST, nullptr, &meh), PTL_OK);
    EXPECT_EQ(next_event(eq_).type, PTL_EVENT_LINK);
    char victim[32];
    std::memset(victim, '.', sizeof victim);
    ptl::proto::Header h = put_header(sizeof secret);
    h.op = ptl::proto::kGet;
    h.flags = ptl::proto::kBulkReply;
    const ptl::proto::Segment seg{reinterpret_cast<uint64_t>(victim), sizeof victim, 0};
    std::string payload;
    append(payload, &seg, sizeof seg);
    connect_raw();
    send_raw(hello(self_.phys.nid, self_.phys.pid) + put_frame(h, payload));
    const ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_GET);
    EXPECT_NE(ev.ni_fail_type, PTL_NI_OK) << "no bulk path back over tcp";
    EXPECT_EQ(std::string(victim, sizeof victim), std::string(sizeof victim, '.'));
}

}  // namespace

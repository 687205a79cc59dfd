// The UCT component "portals" through the public UCT API, between two processes on this host.
// Every data test verifies the bytes that arrived.
#include <sys/mman.h>

#include <atomic>
#include <deque>

#include "uct_harness.h"

using namespace uct_test;

namespace {

constexpr uint8_t kAmId = 5;

struct AmLog {
    std::vector<std::vector<char>> msgs;
    std::vector<void *> kept;  // descriptors a handler kept (UCS_INPROGRESS)
    bool keep = false;
    unsigned flags_seen = 0;
};

ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags) {
    auto *log = static_cast<AmLog *>(arg);
    log->msgs.emplace_back(static_cast<char *>(data), static_cast<char *>(data) + length);
    log->flags_seen |= flags;
    if (log->keep && (flags & UCT_CB_PARAM_FLAG_DESC)) {
        log->kept.push_back(data);
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

struct PackArg {
    const void *src;
    size_t len;
};
size_t pack(void *dest, void *arg) {
    auto *a = static_cast<PackArg *>(arg);
    std::memcpy(dest, a->src, a->len);
    return a->len;
}

}  // namespace

TEST(UctPortals, AdvertisesWhatUcpNeedsForTagOffload) {
    Side s;
    s.open();
    const uint64_t need = UCT_IFACE_FLAG_TAG_EAGER_BCOPY | UCT_IFACE_FLAG_TAG_RNDV_ZCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                          UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                          UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_ZCOPY |
                          UCT_IFACE_FLAG_ATOMIC_DEVICE | UCT_IFACE_FLAG_CONNECT_TO_IFACE;
    EXPECT_EQ(s.attr.cap.flags & need, need);
    EXPECT_GE(s.attr.cap.tag.rndv.max_hdr, 17u);
    EXPECT_TRUE(s.attr.cap.event_flags & UCT_IFACE_FLAG_EVENT_FD);
    for (auto *a : {&s.attr.cap.atomic32, &s.attr.cap.atomic64}) {
        EXPECT_EQ(a->op_flags, UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_AND) | UCS_BIT(UCT_ATOMIC_OP_OR) |
                                       UCS_BIT(UCT_ATOMIC_OP_XOR));
        EXPECT_TRUE(a->fop_flags & UCS_BIT(UCT_ATOMIC_OP_CSWAP));
        EXPECT_TRUE(a->fop_flags & UCS_BIT(UCT_ATOMIC_OP_SWAP));
    }
    s.close();
}

// Active messages of every size and send flavour arrive intact and in order; the receiver
// has only 4 descriptors and does not progress until everything is sent, so most messages
// meet the catch-all and are fetched from the sender (rx_pool.h) - still in order.
TEST(UctPortals, ActiveMessagesInOrderEvenWithoutReceiveDescriptors) {
    constexpr int kCount = 600;
    run_pair(
        [&](Channel &c) {
            Side s;
            s.open({{"RX_DESCS", "4"}});
            AmLog log;
            ASSERT_EQ(uct_iface_set_am_handler(s.iface, kAmId, am_handler, &log, 0), UCS_OK);
            c.send(s.address().data(), s.address().size());
            c.expect("sent");
            ASSERT_TRUE(s.wait([&] { return log.msgs.size() == kCount; })) << log.msgs.size();
            EXPECT_TRUE(log.flags_seen & UCT_CB_PARAM_FLAG_DESC);
            for (int i = 0; i < kCount; ++i) {
                const std::vector<char> &m = log.msgs[size_t(i)];
                ASSERT_GE(m.size(), sizeof(uint64_t)) << i;
                uint64_t seq;
                std::memcpy(&seq, m.data(), sizeof seq);
                EXPECT_EQ(seq, uint64_t(i));
                const size_t body = m.size() - sizeof seq;
                EXPECT_EQ(body, size_t(i * 13 % 8000));
                EXPECT_EQ(first_mismatch(m.data() + sizeof seq, body, unsigned(i)), body) << "message " << i;
            }
            c.signal("done");
            s.close();
        },
        [&](Channel &c) {
            Side s;
            s.open({{"TX_DESCS", "1024"}, {"TX_QUEUE_LEN", "1024"}});  // room for all: no progress on the far side yet
            uct_ep_h ep = s.connect(c.recv());
            // zcopy sources stay untouched until their completion, which needs the receiver.
            std::vector<std::vector<char>> bufs(kCount, std::vector<char>(8192));
            std::deque<Counted> zdone;
            for (int i = 0; i < kCount; ++i) {
                std::vector<char> &buf = bufs[size_t(i)];
                const size_t body = size_t(i * 13 % 8000);
                uint64_t seq = uint64_t(i);
                std::memcpy(buf.data(), &seq, sizeof seq);
                fill(buf.data() + sizeof seq, body, unsigned(i));
                ucs_status_t st;
                do {
                    if (i % 3 == 0 && body + sizeof seq <= s.attr.cap.am.max_short) {
                        st = uct_ep_am_short(ep, kAmId, seq, buf.data() + sizeof seq, unsigned(body));
                    } else if (i % 3 == 1) {
                        PackArg a{buf.data(), body + sizeof seq};
                        const ssize_t n = uct_ep_am_bcopy(ep, kAmId, pack, &a, 0);
                        st = n < 0 ? ucs_status_t(n) : UCS_OK;
                    } else {
                        zdone.emplace_back();
                        uct_iov_t iov{buf.data() + sizeof seq, body, nullptr, body, 1};
                        st = uct_ep_am_zcopy(ep, kAmId, &seq, sizeof seq, &iov, 1, 0, &zdone.back().comp);
                        if (st == UCS_INPROGRESS) st = UCS_OK;
                        if (st != UCS_OK) zdone.pop_back();
                    }
                    if (st == UCS_ERR_NO_RESOURCE) s.progress();
                } while (st == UCS_ERR_NO_RESOURCE);
                ASSERT_EQ(st, UCS_OK) << i;
            }
            c.signal("sent");
            // The engine's progress thread serves the receiver's fetches meanwhile.
            c.expect("done");
            s.flush(ep);
            for (const Counted &z : zdone) EXPECT_EQ(z.done, 1);
            uct_ep_destroy(ep);
            s.close();
        });
}

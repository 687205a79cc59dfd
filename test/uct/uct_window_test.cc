// Sends without per-message acknowledgements (src/uct/portals/peer_window.h): a sender holds
// at most TX_WINDOW messages a peer has not reported processed; a receiver that stops
// consuming stops its senders without losing or reordering anything; a peer that dies gives
// its buffers back.
#include <unistd.h>

#include "uct_harness.h"

using namespace uct_test;

namespace {

constexpr uint8_t kAmId = 7;

struct Received {
    std::vector<uint64_t> seqs;
    std::vector<size_t> bad;  // messages whose body did not match
};

ucs_status_t record(void *arg, void *data, size_t length, unsigned) {
    auto *r = static_cast<Received *>(arg);
    uint64_t seq = 0;
    std::memcpy(&seq, data, sizeof seq);
    const size_t body = length - sizeof seq;
    if (first_mismatch(static_cast<char *>(data) + sizeof seq, body, unsigned(seq)) != body ||
        body != seq % 300)
        r->bad.push_back(r->seqs.size());
    r->seqs.push_back(seq);
    return UCS_OK;
}

ucs_status_t send_numbered(uct_ep_h ep, uint64_t seq) {
    std::vector<char> body(seq % 300);
    fill(body.data(), body.size(), unsigned(seq));
    return uct_ep_am_short(ep, kAmId, seq, body.data(), unsigned(body.size()));
}

}  // namespace

// The receiver does not progress (its engine still takes the messages in: into descriptors
// or, past its 4, the catch-all): the sender stops after TX_WINDOW messages although it has
// buffers left, and stays stopped. When the receiver consumes again, every message arrives
// once, in order, intact.
TEST(UctPortalsWindow, SendsStopAtTheWindowWhileTheReceiverStopsConsuming) {
    constexpr uint64_t kWindow = 8, kCount = 500;
    run_pair(
        [&](Channel &c) {  // receiver
            Side s;
            s.open({{"RX_DESCS", "4"}});
            Received r;
            ASSERT_EQ(uct_iface_set_am_handler(s.iface, kAmId, record, &r, 0), UCS_OK);
            c.send(s.address().data(), s.address().size());
            c.expect("stopped");
            ASSERT_TRUE(s.wait([&] { return r.seqs.size() >= kCount; })) << r.seqs.size();
            for (int i = 0; i < 100; ++i) s.progress();
            ASSERT_EQ(r.seqs.size(), kCount);
            for (uint64_t i = 0; i < kCount; ++i) EXPECT_EQ(r.seqs[i], i);
            EXPECT_TRUE(r.bad.empty()) << "first bad message: " << r.bad.front();
            c.signal("done");
            s.close();
        },
        [&](Channel &c) {  // sender
            Side s;
            s.open({{"TX_WINDOW", std::to_string(kWindow)}, {"TX_DESCS", "64"}});
            uct_ep_h ep = s.connect(c.recv());
            uint64_t seq = 0;
            while (send_numbered(ep, seq) == UCS_OK) ++seq;
            EXPECT_EQ(seq, kWindow) << "sends before the window closed";
            for (int i = 0; i < 1000; ++i) s.progress();
            EXPECT_EQ(send_numbered(ep, seq), UCS_ERR_NO_RESOURCE) << "the window opened without the receiver";
            c.signal("stopped");
            while (seq < kCount) {
                const ucs_status_t st = send_numbered(ep, seq);
                if (st == UCS_OK) {
                    ++seq;
                } else {
                    ASSERT_EQ(st, UCS_ERR_NO_RESOURCE);
                    s.progress();
                }
            }
            s.flush(ep);
            c.expect("done");
            uct_ep_destroy(ep);
            s.close();
        });
}

// The peer dies holding every send buffer of our iface (it never reported them processed):
// once its failure is noticed, the buffers serve other peers again.
TEST(UctPortalsWindow, BuffersHeldByAPeerThatDiedServeOthersAgain) {
    run_pair(
        [&](Channel &c) {  // survivor
            Side s;
            struct Failure {
                int count = 0;
                ucs_status_t status = UCS_OK;
            } failure;
            s.open({{"TX_DESCS", "4"}, {"TX_WINDOW", "8"}}, [&](uct_iface_params_t &p) {
                p.field_mask |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER | UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
                p.err_handler = [](void *arg, uct_ep_h, ucs_status_t st) {
                    auto *f = static_cast<Failure *>(arg);
                    ++f->count;
                    f->status = st;
                    return UCS_OK;
                };
                p.err_handler_arg = &failure;
                p.err_handler_flags = 0;
            });
            Received self_received;
            ASSERT_EQ(uct_iface_set_am_handler(s.iface, kAmId, record, &self_received, 0), UCS_OK);
            uct_ep_h doomed = s.connect(c.recv());
            for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(send_numbered(doomed, i), UCS_OK) << i;
            uct_ep_h self = s.connect(s.address());
            EXPECT_EQ(send_numbered(self, 0), UCS_ERR_NO_RESOURCE) << "a buffer was free";
            c.signal("die");
            ASSERT_TRUE(s.wait([&] { return failure.count > 0; })) << "the peer's death went unnoticed";
            EXPECT_EQ(failure.status, UCS_ERR_ENDPOINT_TIMEOUT);
            ASSERT_TRUE(s.wait([&] { return send_numbered(self, 0) == UCS_OK; }));
            ASSERT_TRUE(s.wait([&] { return self_received.seqs.size() == 1; }));
            EXPECT_TRUE(self_received.bad.empty());
            uct_ep_destroy(self);
            uct_ep_destroy(doomed);
            s.close();
        },
        [&](Channel &c) {  // dies without closing anything
            Side s;
            s.open();
            c.send(s.address().data(), s.address().size());
            c.expect("die");
            _exit(0);
        });
}

// A pending request may flush while others wait behind it (UCP's rendezvous by put flushes
// from its pending callback): the flush covers what was issued before it, and refusing it
// (UCS_ERR_NO_RESOURCE because the queue is not empty) would spin that request forever.
TEST(UctPortalsWindow, APendingRequestMayFlushWithOthersQueuedBehindIt) {
    run_pair(
        [&](Channel &c) {  // receiver
            Side s;
            s.open();
            Received r;
            ASSERT_EQ(uct_iface_set_am_handler(s.iface, kAmId, record, &r, 0), UCS_OK);
            c.send(s.address().data(), s.address().size());
            c.expect("queued");
            ASSERT_TRUE(s.wait([&] { return r.seqs.size() >= 3; })) << r.seqs.size();
            for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(r.seqs[i], i);
            c.expect("bye");
            s.close();
        },
        [&](Channel &c) {  // sender
            Side s;
            s.open({{"TX_WINDOW", "2"}});
            uct_ep_h ep = s.connect(c.recv());
            ASSERT_EQ(send_numbered(ep, 0), UCS_OK);
            ASSERT_EQ(send_numbered(ep, 1), UCS_OK);
            ASSERT_EQ(send_numbered(ep, 2), UCS_ERR_NO_RESOURCE);
            struct Request {
                uct_pending_req_t req{};
                uct_ep_h ep = nullptr;
                Counted flushed;
                std::vector<ucs_status_t> flush_results;
                int sends = 0;
            } flusher, sender;
            flusher.ep = sender.ep = ep;
            flusher.req.func = [](uct_pending_req_t *self) {
                auto *r = reinterpret_cast<Request *>(self);
                const ucs_status_t st = uct_ep_flush(r->ep, 0, &r->flushed.comp);
                r->flush_results.push_back(st);
                if (st == UCS_OK) ++r->flushed.done;
                return st == UCS_INPROGRESS ? UCS_OK : st;
            };
            sender.req.func = [](uct_pending_req_t *self) {
                auto *r = reinterpret_cast<Request *>(self);
                const ucs_status_t st = send_numbered(r->ep, 2);
                if (st == UCS_OK) ++r->sends;
                return st;
            };
            ASSERT_EQ(uct_ep_pending_add(ep, &flusher.req, 0), UCS_OK);
            ASSERT_EQ(uct_ep_pending_add(ep, &sender.req, 0), UCS_OK);
            c.signal("queued");
            ASSERT_TRUE(s.wait([&] { return flusher.flushed.done == 1 && sender.sends == 1; }))
                << "flush calls " << flusher.flush_results.size() << ", sends " << sender.sends;
            ASSERT_FALSE(flusher.flush_results.empty());
            EXPECT_NE(flusher.flush_results.front(), UCS_ERR_NO_RESOURCE) << "the flush was refused";
            s.flush(ep);
            c.signal("bye");
            uct_ep_destroy(ep);
            s.close();
        });
}

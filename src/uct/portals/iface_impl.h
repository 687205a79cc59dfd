// The state behind a uct_portals iface and its endpoints. The iface is a Portals client of
// the engine: one matching NI shared by the process, one EQ, and per iface three portals:
//   am_pt   active messages      receive descriptors on the overflow list, then a catch-all
//   tag_pt  tagged messages      posted receives on the priority list; unexpected ones land
//                                in receive descriptors on the overflow list, then a catch-all
//   ctl_pt  sources to fetch     the send-buffer pool and rendezvous data, read by peers' gets
// A message that finds no free descriptor hits the zero-length catch-all: it is truncated,
// not dropped, and the receiver gets it from the sender, which keeps every send until the
// receiver reports it processed (peer_window.h). So no message is lost or reordered for lack
// of buffers, and no message needs an acknowledgement of its own.
#pragma once

extern "C" {
#include <portals4_ext.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/queue.h>
#include <ucs/debug/log.h>
#include "uct_portals.h"
}

#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "me.h"
#include "message_format.h"
#include "op.h"
#include "peer_window.h"
#include "ring.h"
#include "rx_pool.h"
#include "seq_window.h"

namespace uct_portals {

struct Iface;

// A registration (md.cc): the ME and what the rkey names.
struct Memh {
    ptl_handle_me_t me;
    uint64_t key;
    uint64_t base;
};

constexpr size_t kMaxIov = 16;  // gathered into a send buffer

// A receive event waiting its turn: events of both receive portals are delivered in arrival
// order, and one whose data must first be fetched holds back those behind it.
struct RxEvent {
    ptl_event_t ev;
    MsgInfo msg{};
    RecvBuf buf;             // where the message body is (a descriptor, or fetched)
    bool ready = true;       // false while its data is being fetched
    bool unexpected = true;  // false: matched a posted receive
    uct_tag_context_t *ctx = nullptr;
    Peer *from = nullptr;  // the sender, owed a grant once this is processed
};

// Per posted receive, kept in uct_tag_context_t::priv.
struct TagRecv {
    void *buffer;
    size_t length;
    ptl_handle_me_t me;
    uint8_t state;  // TagState
    uint32_t slot;  // its place in Iface::posted while posted (checked against it: priv is stale
                    // in a context UCP reuses)
};
enum TagState : uint8_t { kTagPosted = 1, kTagMatched, kTagFetching, kTagCancelled };
static_assert(sizeof(TagRecv) <= UCT_TAG_PRIV_LEN, "TagRecv must fit in uct_tag_context_t::priv");
inline TagRecv *tag_recv(uct_tag_context_t *ctx) {
    return reinterpret_cast<TagRecv *>(ctx->priv);
}

struct Ep {
    Iface *iface = nullptr;
    uct_ep_h uct = nullptr;
    // An operation failed (peer process gone, its iface closed, access refused): the error
    // handler is told once, and a cancelling flush then drops what is still in flight.
    ucs_status_t failure = UCS_OK;
    bool failed() const { return failure != UCS_OK; }
    ptl_process_t peer{};
    uint8_t am_pt = 0, tag_pt = 0, ctl_pt = 0;
    Peer *window = nullptr;  // the peer iface's state (iface-owned), shared with other eps to it
    uint64_t sent_mark = 0;  // the peer's message count after this ep's last message
    SeqWindow in_flight;     // seqs of ops not yet complete
    // A flush completes when every op before `seq` has and the messages up to `sent_mark`
    // are known to have arrived (peer_window.h).
    struct FlushWait {
        uint64_t seq, sent_mark;
        uct_completion_t *comp;
    };
    std::vector<FlushWait> flushes;
    ucs_queue_head_t pending;
    bool in_pending_list = false;
    bool dispatching = false;  // a pending request of this ep is running
    // While requests wait, new sends on the ep fail (UCS_ERR_NO_RESOURCE) so they cannot
    // overtake them, except the sends of the request being dispatched.
    bool blocked_by_pending() const { return !dispatching && !ucs_queue_is_empty(&pending); }
};

}  // namespace uct_portals

struct uct_portals_ep_impl : uct_portals::Ep {};

namespace uct_portals {

struct Iface {
    uct_portals_iface_t *uct = nullptr;
    // configuration
    size_t seg_size = 0;      // largest active message, and a receive descriptor's size
    size_t eager_max = 0;     // largest eager tagged message (>= seg_size): a send buffer's size
    size_t tm_min_recv = 0;   // smallest receive UCP offloads (<= seg_size + 1)
    size_t rndv_max_hdr = 0;  // as advertised: the configured one within what fits
    bool tag_offload = true;
    unsigned tm_list_size = 0;
    double latency = 0, bandwidth = 0;
    // Portals objects
    ptl_handle_ni_t ni = PTL_INVALID_HANDLE;
    ptl_process_t self{};
    ptl_handle_eq_t eq = PTL_INVALID_HANDLE;
    ptl_size_t eq_base_size = 0, eq_size = 0;  // eq_size grows with the rendezvous slots (get_rndv_op)
    ptl_handle_md_t md_volatile = PTL_INVALID_HANDLE;  // sources copied at the call (<= max_volatile)
    ptl_handle_md_t md = PTL_INVALID_HANDLE;           // everything else
    ptl_size_t max_volatile = 0;
    ptl_pt_index_t am_pt = PTL_PT_ANY, tag_pt = PTL_PT_ANY, ctl_pt = PTL_PT_ANY;
    // receive side
    RxPool am_rx, tag_rx;
    Ring<RxEvent> rx_fifo;
    // A message that arrives in progress with nothing before it in rx_fifo is delivered from
    // its event (on_rx_event), without a trip through the fifo: up to kMaxDeliveries per
    // progress, counted here. Only in progress's own drain: a receive post's must not call
    // handlers.
    bool deliver_at_once = false;
    unsigned delivered_at_once = 0;
    static constexpr unsigned kMaxDeliveries = 64;
    std::deque<ptl_event_t> deferred;  // see drain_eq
    static constexpr unsigned kEqBatch = 16;
    ptl_event_t eq_batch[kEqBatch];  // taken from the EQ, not handled yet: [pos, len)
    unsigned eq_batch_pos = 0, eq_batch_len = 0;
    // completed_cb(UCS_ERR_CANCELED) to report, with the tag the receive was posted with
    std::deque<std::pair<uct_tag_context_t *, uct_tag_t>> cancelled;
    // Receives whose ME is linked, each knowing its place (TagRecv::slot): posting and
    // retiring one is a push and a swap with the last, no hash map on UCP's receive path.
    struct PostedRecv {
        uct_tag_context_t *ctx;
        uct_tag_t tag;
    };
    std::vector<PostedRecv> posted;
    bool is_posted(const uct_tag_context_t *ctx) const {
        const uint32_t i = tag_recv(const_cast<uct_tag_context_t *>(ctx))->slot;
        return i < posted.size() && posted[i].ctx == ctx;
    }
    void track_posted(uct_tag_context_t *ctx, uct_tag_t tag) {
        tag_recv(ctx)->slot = uint32_t(posted.size());
        posted.push_back({ctx, tag});
    }
    // The tag it was posted with; is_posted(ctx) must hold.
    uct_tag_t posted_tag(uct_tag_context_t *ctx) const { return posted[tag_recv(ctx)->slot].tag; }
    void untrack_posted(uct_tag_context_t *ctx) {
        if (!is_posted(ctx)) return;
        const uint32_t i = tag_recv(ctx)->slot;
        posted[i] = posted.back();
        tag_recv(posted[i].ctx)->slot = i;
        posted.pop_back();
    }
    uct_tag_unexp_eager_cb_t eager_cb = nullptr;
    void *eager_arg = nullptr;
    uct_tag_unexp_rndv_cb_t rndv_cb = nullptr;
    void *rndv_arg = nullptr;
    // send side
    char *tx_buf = nullptr;
    size_t tx_stride = 0;
    std::vector<int> tx_free;
    ptl_handle_me_t grant_me = PTL_INVALID_HANDLE;
    PeerWindows windows;               // peer ifaces (peer_window.h)
    std::vector<Peer *> flush_checks;  // peers whose grants may complete flushes
    unsigned tx_window = 0;
    unsigned tx_descs = 0;  // the send buffers, all peers together
    ptl_handle_me_t tx_pool_me = PTL_INVALID_HANDLE;
    ptl_handle_me_t probe_me = PTL_INVALID_HANDLE;
    std::vector<Op> ops;
    Op *free_ops = nullptr;
    std::vector<std::unique_ptr<char[]>> bounce_spare;
    // A rendezvous send waits for its receiver, whose answer may need our send resources, so
    // it holds none: its operation and announcement come from a pool that grows.
    struct RndvSlot {
        Op op;
        std::unique_ptr<char[]> announcement;
    };
    std::deque<RndvSlot> rndv_slots;
    size_t rndv_queue_len = 0;
    Op *free_rndv_ops = nullptr;
    unsigned ops_in_flight = 0;
    uint64_t next_rndv_key = 1;
    std::deque<Ep *> pending_eps;                          // eps with pending requests, served round robin
    std::deque<std::pair<Ep *, ucs_status_t>> failed_eps;  // error handler still to call
    // wake-up
    int event_fd = -1;
    // Whether a sleeper can be woken (PtlXEQArm works: the engine has its progress thread);
    // without, the iface advertises no events and UCP never arms it.
    bool can_wake = true;
    // statistics (shown by uct_portals_iface_query's debug log and the tests)
    // Tag-matching counters (UCX_PORTALS_STATS=y prints them at close).
    struct TagStats {
        uint64_t posted = 0, cancelled = 0;            // receives UCP gave the engine
        uint64_t expected = 0, expected_rndv = 0;      // messages the engine matched to them
        uint64_t unexpected = 0, unexpected_rndv = 0;  // met none: UCP matches them in software
        uint64_t fetched = 0;  // bodies read from their sender (catch-all, rendezvous announcement)
    } stats;
    bool print_stats = false;
    std::string dev_name;

    // ops
    Op *get_op(Ep *ep, OpType t, uct_completion_t *comp) {
        Op *op = next_op(ep);
        return op ? take_op(op, ep, t, comp) : nullptr;
    }
    // The op an RMA or atomic call names to the engine: the next free one, taken (take_op)
    // only when the call did not complete in the engine (PTLX_DONE, the direct path), which
    // then needs no bookkeeping at all. take_op resets it: fields the engine reads at the call
    // (operands) may be set before, fields read at completion after.
    Op *next_op(const Ep *ep) const { return ep && ep->blocked_by_pending() ? nullptr : free_ops; }
    Op *take_op(Op *op, Ep *ep, OpType t, uct_completion_t *comp);
    // get_bcopy's landing buffers (seg_size bytes), kept for the next one.
    char *take_bounce() {
        if (bounce_spare.empty()) return new (std::nothrow) char[seg_size ? seg_size : 1];
        char *b = bounce_spare.back().release();
        bounce_spare.pop_back();
        return b;
    }
    void give_bounce(char *b) {
        if (b) bounce_spare.emplace_back(b);
    }
    // nullptr while ep has pending requests, RNDV_QUEUE_LEN are in flight, or the EQ cannot grow
    Op *get_rndv_op(Ep *ep, uct_completion_t *comp);
    void complete_op(Op *op, ucs_status_t status);
    int get_tx_desc(const Ep *ep) {
        if (tx_free.empty() || ep->blocked_by_pending() || window_full(ep)) return -1;
        const int d = tx_free.back();
        tx_free.pop_back();
        return d;
    }
    char *tx_desc_addr(int d) const { return tx_buf + size_t(d) * tx_stride; }
    bool has_tx_resources() const { return free_ops != nullptr && !tx_free.empty(); }
    // peer windows: what the iface does with what they release (flush.cc)
    void release_held(Peer &p, uint32_t count);
    bool messages_arrived(const Ep *ep) const { return ep->failed() || ep->window->arrived(ep->sent_mark); }
    void on_probe_ack(Peer &p, ucs_status_t status);
    void watch_flush(Ep *ep);      // its flush waits for messages to arrive
    void check_flushing(Peer &p);  // some of its messages are known to have arrived
    void on_grant_event(const ptl_event_t &ev);
    // The clock of progress's own timers (idle grants, peer checks): read after a poll that
    // did work and every kPollsPerClockRead idle polls, not on every poll. rdtsc costs ~12 ns
    // on this kind of VM: a sixth of a busy sender's time went to it (perf, UCT am_bw).
    static constexpr unsigned kPollsPerClockRead = 16;
    ucs_time_t progress_clock = 0;
    unsigned polls_since_clock = 0;
    // A zcopy AM or eager send is gathered into a send buffer, yet completes as on UCX's rc:
    // once the message is known to have arrived (reported processed, or a probe after it came
    // back), or fails with its ep (UCP expects a zcopy send to a failed peer to fail).
    struct ZcopySend {
        Ep *ep;
        uct_completion_t *comp;
        uint64_t mark;  // the peer's message count with this message
    };
    std::deque<ZcopySend> zcopy_sends;
    bool zcopy_check_due = false;  // arrivals or failures since the last report
    ucs_status_t complete_on_arrival(Ep *ep, uct_completion_t *comp) {
        if (!comp) return UCS_OK;
        zcopy_sends.push_back({ep, comp, ep->sent_mark});
        return UCS_INPROGRESS;
    }
    void report_zcopy_sends();  // from progress
    // Posted, or matched or cancelled without its completion reported yet.
    template <class F>
    void for_each_op(F &&f) {
        for (Op &op : ops) f(op);
        for (RndvSlot &slot : rndv_slots) f(slot.op);
    }
    bool tag_context_in_use(const uct_tag_context_t *ctx) const {
        if (is_posted(ctx)) return true;
        for (const RxEvent &r : rx_fifo)
            if (r.ctx == ctx) return true;
        for (const auto &c : cancelled)
            if (c.first == ctx) return true;
        return false;
    }
    bool window_full(const Ep *ep) const { return ep->window->held.size() >= tx_window; }
    // What pending_add asks: a send or an RMA operation would not fail for lack of resources.
    bool can_send(const Ep *ep) const {
        return has_tx_resources() && !ep->blocked_by_pending() && !window_full(ep);
    }
    // Limits reported by iface_query and enforced by the sends.
    size_t max_put_short() const { return std::min(seg_size, max_volatile); }
    size_t max_am_hdr() const { return std::min<size_t>(128, seg_size / 2); }
    void put_op(Op *op);
    void complete_flushes(Ep *ep);
    // Reports ops of `ep` still in flight as cancelled and forgets them (they finish in the
    // engine without their ep).
    void cancel_ops(Ep *ep);
    void report_failed_eps();
    void check_peers();
    void fail_ep(Ep *ep, ucs_status_t status);
    void mark_failed(Ep *ep, ucs_status_t status);  // the error handler is then called once
    std::vector<Ep *> eps;                          // for check_peers, which visits a few per round
    size_t next_ep_to_check = 0;
    ucs_time_t next_peer_check = 0;
    void dispatch_pending();

    // progress
    unsigned progress();
    void on_initiator_event(const ptl_event_t &ev);
    void on_ctl_event(const ptl_event_t &ev);
    void on_rx_event(const ptl_event_t &ev);
    unsigned deliver_rx(unsigned budget);
    // A message ready to deliver; `ev` is its event (r.ev for one from rx_fifo).
    void deliver_one(const ptl_event_t &ev, RxEvent &r);
    void deliver_expected(const ptl_event_t &ev, RxEvent &r);
    void drain_eq(bool run_completions = true);
    // Records a take of `taken` events into eq_batch; false if there is nothing to handle.
    bool took_batch(int rc, unsigned taken);
    void handle_event(const ptl_event_t &ev);
    // A tagged message a receive for (tag, mask) would take, that met no posted receive and
    // was not reported to UCP yet.
    bool unexpected_tag_pending(uct_tag_t tag, uct_tag_t mask, size_t from = 0) const {
        for (size_t i = from; i < rx_fifo.size(); ++i) {
            const RxEvent &r = rx_fifo[i];
            if (r.unexpected && r.ev.pt_index == tag_pt && ((r.ev.match_bits ^ tag) & mask) == 0) return true;
        }
        return false;
    }
    void fetch_truncated(RxEvent &r);
    void start_rndv_get(const ptl_event_t &ev, RxEvent &r);
};

}  // namespace uct_portals

struct uct_portals_iface_impl : uct_portals::Iface {};

namespace uct_portals {

// Copies header + iov into a free send buffer (*desc); returns the length, or
// UCS_ERR_NO_RESOURCE when no buffer is free.
ssize_t gather(Ep *ep, int *desc, const void *header, size_t header_length, const uct_iov_t *iov,
               size_t iovcnt, size_t limit);

// Packs into a free send buffer (*desc); returns the length, or an error (buffer released).
// `limit`: the largest message of its kind (seg_size, or eager_max for tagged ones).
ssize_t pack_into_desc(Ep *ep, int *desc, uct_pack_callback_t pack_cb, void *arg, size_t limit,
                       const char *what);

// Engine return codes to UCX statuses.
ucs_status_t status_of(int ptl_rc);

inline Iface *iface_of(uct_iface_h tl) {
    return ucs_derived_of(tl, uct_portals_iface_t)->impl;
}
inline Iface *iface_of_ep(uct_ep_h ep) {
    return iface_of(ep->iface);
}
inline Ep *ep_of(uct_ep_h ep) {
    return ucs_derived_of(ep, uct_portals_ep_t)->impl;
}

// Issue an operation on an ep, returning UCS_ERR_NO_RESOURCE when the iface is out of ops.
// Sends a message from a send buffer (held until the receiver reports it processed).
// `awaits_report`: the send completes when the receiver reports it processed (zcopy).
ucs_status_t put_message(Ep *ep, MsgKind kind, ptl_pt_index_t pt, ptl_match_bits_t bits, uint64_t hdr_data,
                         int tx_desc, size_t length, bool awaits_report = false);
// The same for a message sent from `data` (a zcopy's one piece, a short send's data) and
// copied into the send buffer only once it left (PtlXPutAndCopy), for a receiver that
// truncated it to fetch: one copy fewer before the message is on its way. `data_volatile`:
// the data may change once the call returns (a short send: at most max_volatile bytes).
ucs_status_t put_message_from(Ep *ep, MsgKind kind, ptl_pt_index_t pt, ptl_match_bits_t bits,
                              uint64_t hdr_data, int tx_desc, const void *data, size_t length,
                              bool data_volatile, bool awaits_report);

}  // namespace uct_portals

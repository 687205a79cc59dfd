// uct_iface_progress: drive the engine, read the EQ, complete sends at once and deliver
// received messages (active messages, tagged messages expected or not) in arrival order.
#include "iface_impl.h"

extern "C" {
#include <ucs/time/time.h>
}

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

using namespace uct_portals;

namespace {

constexpr unsigned kPeerCheckMs = 100;      // Iface::check_peers: how often
constexpr size_t kPeerChecksPerRound = 64;  // and how many eps each time

// Any failure fails the op's ep as well (Iface::complete_op), with the op's status. A peer
// that is gone reads as UCS_ERR_ENDPOINT_TIMEOUT, as from UCX's own transports (and UCP's
// failed lanes): the process died (undeliverable), or its iface was closed, since our
// receive portals take every message (catch-alls) and only a closed one drops. For RMA a
// drop means the region was deregistered.
ucs_status_t fail_status(ptl_ni_fail_t f) {
    switch (f) {
        case PTL_NI_OK: return UCS_OK;
        case PTL_NI_UNDELIVERABLE:
        case PTL_NI_NO_MATCH:
        case PTL_NI_DROPPED:
        case PTL_NI_PT_DISABLED: return UCS_ERR_ENDPOINT_TIMEOUT;
        case PTL_NI_PERM_VIOLATION:
        case PTL_NI_OP_VIOLATION: return UCS_ERR_REJECTED;
        case PTL_NI_SEGV: return UCS_ERR_INVALID_ADDR;
        default: return UCS_ERR_IO_ERROR;
    }
}

Op *new_fetch_op() {
    Op *op = new Op();
    op->type = OpType::Recovery;
    return op;
}

}  // namespace

extern "C" unsigned uct_portals_iface_progress(uct_iface_h tl_iface) {
    return iface_of(tl_iface)->progress();
}

unsigned Iface::progress() {
    if (eq_batch_pos == eq_batch_len && deferred.empty()) {
        // Nothing taken is waiting: the engine's poll and the first batch of its events in one
        // call (one lock), and a batch that comes back short needs no second look.
        unsigned taken = 0;
        const int rc = PtlXProgressEQ(eq, eq_batch, kEqBatch, &taken);
        if (took_batch(rc, taken)) drain_eq();
    } else {
        PtlXProgress();
        drain_eq();
    }
    unsigned n = std::exchange(delivered_at_once, 0u);
    if (!rx_fifo.empty()) n += deliver_rx(kMaxDeliveries - std::min(n, kMaxDeliveries));
    if (n != 0 || ++polls_since_clock >= kPollsPerClockRead) {
        polls_since_clock = 0;
        progress_clock = ucs_get_time();
    }
    if (n == 0 && rx_fifo.empty()) {
        am_rx.give_back_when_idle();
        tag_rx.give_back_when_idle();
        if (windows.owes_grants()) windows.send_owed_grants(progress_clock, false);
    }
    if (windows.was_asked()) windows.send_owed_grants(progress_clock, false);  // the batch's asks at once
    if (!eps.empty() && progress_clock >= next_peer_check) {
        next_peer_check = progress_clock + ucs_time_from_msec(kPeerCheckMs);
        check_peers();
    }
    if (zcopy_check_due) report_zcopy_sends();
    if (!flush_checks.empty())
        for (Peer *p : std::exchange(flush_checks, {})) check_flushing(*p);
    if (!failed_eps.empty()) report_failed_eps();
    while (!cancelled.empty()) {
        const auto [ctx, tag] = cancelled.front();
        cancelled.pop_front();
        ctx->completed_cb(ctx, tag, 0, tag_recv(ctx)->length, nullptr, UCS_ERR_CANCELED);
        ++n;
    }
    if (!pending_eps.empty()) dispatch_pending();
    return n;
}

// Operations the engine owns fail by themselves when their peer dies. But a send may wait
// for the peer with nothing left in the engine (a rendezvous waiting to be fetched, UCP's own
// rendezvous waiting for an answer), messages are sent without acknowledgement, and their
// buffers wait for the peer's grant, like an idle connection of UCX's tcp transport: ask the
// engine whether the peers of a few eps per round are known to be dead (their process gone,
// their connection reset or timed out). A peer whose process lives on may have closed its
// iface, which drops our messages without a word: while it holds our buffers, a probe asks
// (its failure fails the peer, on_probe_ack).
void Iface::check_peers() {
    const size_t visits = std::min(eps.size(), kPeerChecksPerRound);
    for (size_t i = 0; i < visits; ++i) {
        if (next_ep_to_check >= eps.size()) next_ep_to_check = 0;
        Ep *ep = eps[next_ep_to_check++];
        if (ep->failed()) continue;
        if (PtlXPeerAlive(ni, ep->peer) == 0) {
            fail_ep(ep, UCS_ERR_ENDPOINT_TIMEOUT);
        } else if (!ep->window->held.empty()) {
            windows.ensure_probe(*ep->window);
        }
    }
}

// The rendezvous sends waiting for the peer to fetch them complete now, and the buffers its
// grant would have returned are free; the error handler runs from progress
// (report_failed_eps).
void Iface::fail_ep(Ep *ep, ucs_status_t status) {
    mark_failed(ep, status);
    release_held(*ep->window, uint32_t(ep->window->held.size()));
    for_each_op([&](Op &op) {
        if (op.ep != ep || !op.acked || op.type != OpType::Rndv) return;
        // A rendezvous whose data was fetched after all (its ME already gone) completes by
        // its GET event, which may still be on its way.
        if (op.type == OpType::Rndv && PtlMEUnlink(std::exchange(op.src_me, PTL_INVALID_HANDLE)) != PTL_OK)
            return;
        complete_op(&op, status);
    });
}

// Only the events already delivered are taken in, without driving the wires again: progress
// has just driven them, and a receive post is on UCP's hot path. Outside progress (a receive
// being posted or cancelled) only receive events are handled: the others may complete
// operations, whose callbacks UCP does not expect there, so they wait in `deferred` for the
// next progress, which handles them first.
void Iface::drain_eq(bool run_completions) {
    struct AtOnce {  // progress's drain may deliver at once, a nested one (a post's) not
        bool &flag, saved;
        AtOnce(bool &f, bool v) : flag(f), saved(std::exchange(f, v)) {}
        ~AtOnce() { flag = saved; }
    } at_once(deliver_at_once, run_completions);
    if (run_completions)
        while (!deferred.empty()) {
            const ptl_event_t ev = deferred.front();
            deferred.pop_front();
            handle_event(ev);
        }
    // A batch per lock; one that comes back short found the queue empty. The batch is the
    // iface's, not this call's: a callback may post a receive, whose drain must take the
    // rest of the batch before newer events.
    for (;;) {
        while (eq_batch_pos < eq_batch_len) {
            const ptl_event_t ev = eq_batch[eq_batch_pos++];  // a nested drain may refill
            if (run_completions || ev.type == PTL_EVENT_PUT)
                handle_event(ev);
            else
                deferred.push_back(ev);
        }
        if (eq_batch_len != 0 && eq_batch_len < kEqBatch) {  // the last take found it empty
            eq_batch_len = eq_batch_pos = 0;
            return;
        }
        unsigned taken = 0;
        const int rc = PtlXEQTakeMany(eq, eq_batch, kEqBatch, &taken);
        if (!took_batch(rc, taken)) return;
    }
}

bool Iface::took_batch(int rc, unsigned taken) {
    eq_batch_len = taken;
    eq_batch_pos = 0;
    if (rc == PTL_EQ_EMPTY) return false;
    if (rc == PTL_EQ_DROPPED) {
        ucs_error("portals: event queue overflow on iface %p: events were lost", uct);
    } else if (rc != PTL_OK) {
        ucs_error("portals: taking events failed: %d", rc);
        return false;
    }
    return true;
}

void Iface::handle_event(const ptl_event_t &ev) {
    switch (ev.type) {
        case PTL_EVENT_ACK:
        case PTL_EVENT_REPLY:
        case PTL_EVENT_SEND: on_initiator_event(ev); break;
        case PTL_EVENT_GET: on_ctl_event(ev); break;
        case PTL_EVENT_PUT: on_rx_event(ev); break;
        default: ucs_debug("portals: ignoring event type %d", ev.type); break;
    }
}

void Iface::on_initiator_event(const ptl_event_t &ev) {
    Op *op = static_cast<Op *>(ev.user_ptr);
    if (!op) return;
    const ucs_status_t st = fail_status(ev.ni_fail_type);
    if (op->type == OpType::Probe) {
        on_probe_ack(*op->window, st);
        return;
    }
    if (op->type == OpType::Recovery) {
        if (op->rx_id >= 0) {  // a truncated message's body arrived
            if (RxEvent *r = rx_fifo.find(uint64_t(op->rx_id))) {
                r->buf.length = ev.mlength;
                r->ready = true;
            }
            if (st != UCS_OK)
                ucs_error("portals: fetching a truncated message from nid 0x%x pid %u failed: %s",
                          ev.initiator.phys.nid, ev.initiator.phys.pid, ucs_status_string(st));
        } else if (op->ctx && tag_recv(op->ctx)->state != kTagCancelled) {
            // a rendezvous' data arrived in the posted buffer
            tag_recv(op->ctx)->state = kTagMatched;
            op->ctx->completed_cb(op->ctx, op->operand, 0, ev.mlength, nullptr,
                                  st != UCS_OK ? st : op->rndv_status);
        }
        delete op;
        return;
    }
    if (st != UCS_OK) {
        if (op->type == OpType::Rndv) PtlMEUnlink(op->src_me);
        complete_op(op, st);
        return;
    }
    if (op->type == OpType::Rndv) {
        // From the priority list the data is in the posted receive: nobody reads the ME. A
        // receive it did not fit reads it (start_rndv_get) and so completes the send.
        if (ev.ptl_list == PTL_PRIORITY_LIST && ev.mlength == op->length &&
            PtlMEUnlink(std::exchange(op->src_me, PTL_INVALID_HANDLE)) == PTL_OK) {
            complete_op(op, UCS_OK);
            return;
        }
        op->acked = true;  // it completes when its data is read (on_ctl_event)
        return;
    }
    complete_op(op, UCS_OK);
}

// GETs of a rendezvous' data by its receiver (the send-buffer pool's report nothing: the
// receiver's grant says when a fetched buffer is free).
void Iface::on_ctl_event(const ptl_event_t &ev) {
    Op *op = static_cast<Op *>(ev.user_ptr);
    if (!op || op->type != OpType::Rndv) return;
    if (op->cancelled) {
        put_op(op);
    } else {
        complete_op(op, fail_status(ev.ni_fail_type));
    }
}

void Iface::on_rx_event(const ptl_event_t &ev) {
    if (ev.pt_index == ctl_pt) {
        on_grant_event(ev);
        return;
    }
    RxEvent r;  // its event is copied in only if it waits in rx_fifo
    r.msg = decode_msg(ev.remote_offset);
    // Rendezvous announcements are not sent from send buffers, so they are not counted.
    if (r.msg.kind != MsgKind::TagRndv) {
        r.from = &windows.peer(ev.initiator, r.msg.src_pt);
        if (r.msg.grant) release_held(*r.from, r.msg.fetch_length);
    }
    if (ev.pt_index == tag_pt && ev.ptl_list == PTL_PRIORITY_LIST) {
        r.unexpected = false;
        r.ctx = static_cast<uct_tag_context_t *>(ev.user_ptr);
        tag_recv(r.ctx)->state = kTagMatched;
        untrack_posted(r.ctx);
        r.buf.data = static_cast<char *>(ev.start);
        r.buf.length = ev.mlength;
        r.buf.borrowed = true;
        // UCP reads a software rendezvous request when it is reported, and by then another
        // message may have landed in the same user buffer (receives sharing one buffer, as
        // bandwidth benchmarks post them): the request is read from the sender's copy.
        if (r.msg.kind == MsgKind::TagRndvRequest && ev.rlength > 0) r.ready = false;
    } else {
        RxPool &pool = ev.pt_index == am_pt ? am_rx : tag_rx;
        if (!pool.is_catch_all(ev.user_ptr)) {
            r.buf = pool.take(ev);
            // A rendezvous' zero-byte announcement took a descriptor; its body is fetched.
            if (r.msg.kind == MsgKind::TagRndv) RxPool::release_buf(std::exchange(r.buf, RecvBuf{}));
        }
        r.ready = r.buf.data != nullptr;  // else it met the catch-all, or is an announcement
    }
    if (r.ready && deliver_at_once && rx_fifo.empty() && delivered_at_once < kMaxDeliveries) {
        ++delivered_at_once;
        if (r.from) windows.processed_from(*r.from, r.msg.ask);
        deliver_one(ev, r);
        return;
    }
    r.ev = ev;
    RxEvent &queued = rx_fifo.emplace_back();
    queued = r;
    if (!queued.ready) fetch_truncated(queued);
}

// The message met the catch-all, or is a rendezvous' zero-byte announcement: read it from
// the sender (its send buffer, or the announcement's ME), where it stays until we have it.
void Iface::fetch_truncated(RxEvent &r) {
    ++stats.fetched;
    const size_t length = r.msg.kind == MsgKind::TagRndv ? r.msg.fetch_length : r.ev.rlength;
    r.buf = (r.ev.pt_index == am_pt ? am_rx : tag_rx).alloc_fetched(length);
    Op *op = new_fetch_op();
    op->rx_id = int64_t(rx_fifo.id_of(r));
    int rc = r.buf.data ? PTL_OK : PTL_NO_SPACE;
    if (rc == PTL_OK)
        rc = r.msg.kind == MsgKind::TagRndv
                 ? PtlGet(md, reinterpret_cast<uintptr_t>(r.buf.data), length, r.ev.initiator, r.msg.src_pt,
                          kAnnounceBits | rndv_key(r.ev.hdr_data), 0, op)
                 : PtlGet(md, reinterpret_cast<uintptr_t>(r.buf.data), length, r.ev.initiator, r.msg.src_pt,
                          kTxPoolBits, r.msg.src_offset, op);
    if (rc != PTL_OK) {
        ucs_error("portals: cannot fetch a %zu-byte message from nid 0x%x pid %u: %d", length,
                  r.ev.initiator.phys.nid, r.ev.initiator.phys.pid, rc);
        delete op;
        RxPool::release_buf(r.buf);
        r.buf = RecvBuf{};
        r.ready = true;  // delivered empty rather than blocking everything behind it
    }
}

// At most kMaxDeliveries per call, like UCX's transports poll a bounded number of
// completions: the caller's other work (and UCP's probe) sees messages in portions.
unsigned Iface::deliver_rx(unsigned budget) {
    unsigned n = 0;
    while (n < budget && !rx_fifo.empty() && rx_fifo.front().ready) {
        RxEvent r = rx_fifo.front();  // a handler's receive post may grow the fifo
        rx_fifo.pop_front();
        if (r.from) windows.processed_from(*r.from, r.msg.ask);
        deliver_one(r.ev, r);
        ++n;
    }
    return n;
}

void Iface::deliver_one(const ptl_event_t &ev, RxEvent &r) {
    if (ev.pt_index == am_pt) {
        const uint8_t id = uint8_t(ev.match_bits);
        const ucs_status_t s =
            uct_iface_invoke_am(&uct->super, id, r.buf.data, unsigned(r.buf.length), UCT_CB_PARAM_FLAG_DESC);
        if (s != UCS_INPROGRESS) RxPool::release_buf(r.buf);
        return;
    }
    if (!r.unexpected) {
        deliver_expected(ev, r);
        return;
    }
    ++stats.unexpected;
    if (r.msg.kind == MsgKind::TagRndv) ++stats.unexpected_rndv;
    const uct_tag_t stag = ev.match_bits;
    switch (r.msg.kind) {
        case MsgKind::TagEager: {
            void *context = nullptr;
            ucs_status_t s = UCS_OK;
            if (eager_cb)
                s = eager_cb(eager_arg, r.buf.data, r.buf.length,
                             UCT_CB_PARAM_FLAG_FIRST | UCT_CB_PARAM_FLAG_DESC, stag, ev.hdr_data, &context);
            if (s != UCS_INPROGRESS) RxPool::release_buf(r.buf);
            return;
        }
        case MsgKind::TagRndv: {
            RndvInfo info{};
            if (r.buf.length >= sizeof info) {
                std::memcpy(&info, r.buf.data, sizeof info);
                if (rndv_cb)
                    rndv_cb(rndv_arg, 0, stag, r.buf.data + sizeof info, unsigned(r.buf.length - sizeof info),
                            info.remote_addr, info.length, &info.rkey);
            } else {
                ucs_error("portals: short rendezvous announcement (%zu bytes) dropped", r.buf.length);
            }
            RxPool::release_buf(r.buf);
            return;
        }
        case MsgKind::TagRndvRequest:
            if (rndv_cb) rndv_cb(rndv_arg, 0, stag, r.buf.data, unsigned(r.buf.length), 0, 0, nullptr);
            RxPool::release_buf(r.buf);
            return;
        default:
            ucs_error("portals: message of unknown kind %d on the tag portal dropped", int(r.msg.kind));
            RxPool::release_buf(r.buf);
            return;
    }
}

// A posted receive matched: the message is in the user's buffer, or (rendezvous) its data
// is fetched into it now.
void Iface::deliver_expected(const ptl_event_t &ev, RxEvent &r) {
    ++stats.expected;
    if (r.msg.kind == MsgKind::TagRndv) ++stats.expected_rndv;
    uct_tag_context_t *ctx = r.ctx;
    ctx->tag_consumed_cb(ctx);
    switch (r.msg.kind) {
        case MsgKind::TagEager:
            ctx->completed_cb(ctx, ev.match_bits, ev.hdr_data, ev.mlength, nullptr,
                              ev.mlength < ev.rlength ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK);
            return;
        case MsgKind::TagRndvRequest:
            // from the sender's copy (on_rx_event), not from the receive buffer
            ctx->rndv_cb(ctx, ev.match_bits, r.buf.data, unsigned(r.buf.length),
                         r.buf.data || ev.rlength == 0 ? UCS_OK : UCS_ERR_IO_ERROR, 0);
            RxPool::release_buf(r.buf);
            return;
        case MsgKind::TagRndv:
            if (rndv_delivered(ev)) {
                ctx->completed_cb(ctx, ev.match_bits, 0, ev.mlength, nullptr, UCS_OK);
            } else {
                start_rndv_get(ev, r);
            }
            return;
        default: ctx->completed_cb(ctx, ev.match_bits, 0, 0, nullptr, UCS_ERR_IO_ERROR); return;
    }
}

// A rendezvous matched a posted receive: get the data into it from the sender's rendezvous
// ME (whose GET event completes the send). The announcement's header data names the ME and
// the length; nothing was written into the receive buffer.
void Iface::start_rndv_get(const ptl_event_t &ev, RxEvent &r) {
    TagRecv *t = tag_recv(r.ctx);
    const uint64_t data_length = rndv_length(ev.hdr_data);
    Op *op = new_fetch_op();
    op->ctx = r.ctx;
    op->operand = ev.match_bits;
    op->rndv_status = data_length > t->length ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK;
    t->state = kTagFetching;
    const size_t len = std::min<uint64_t>(data_length, t->length);
    const int rc = PtlGet(md, reinterpret_cast<uintptr_t>(t->buffer), len, ev.initiator, r.msg.src_pt,
                          kRndvBits | rndv_key(ev.hdr_data), 0, op);
    if (rc != PTL_OK) {
        delete op;
        r.ctx->completed_cb(r.ctx, ev.match_bits, 0, 0, nullptr, status_of(rc));
    }
}

// Tag offload (DESIGN: UCT mapping). Posted receives are use-once MEs on the tag portal's
// priority list (match bits = tag, ignore bits = ~mask); eager messages are puts with the tag
// as match bits and imm as header data; a rendezvous is a put of its data that also exposes
// the data through a use-once GET ME on the sender's ctl portal: a posted receive it matches
// holds the data when it is reported (the ACK from the priority list completes the send); a
// receiver without one fetches the announcement (RndvInfo + UCP's header) and UCP reads the
// data (its GET event completes the send).
#include "iface_impl.h"

extern "C" {
#include <uct/base/uct_iov.inl>
}

#include <cstring>
#include <utility>

using namespace uct_portals;

namespace {

// Up to this size a message is copied into its send buffer first and sent from there, as
// before PtlXPutAndCopy: such a copy is a few instructions, and the 8-byte rows of
// bench/callgrind_report.txt stay on the path they were measured on.
constexpr size_t kCopyFirstMax = 256;

ucs_status_t eager_send(Ep *ep, uct_tag_t tag, uint64_t imm, int desc, size_t length,
                        bool awaits_report = false) {
    return put_message(ep, MsgKind::TagEager, ep->tag_pt, tag, imm, desc, length, awaits_report);
}

uct_portals_rkey_t rkey_for(Iface *f, const uct_iov_t *iov, uint64_t key) {
    if (iov->memh != UCT_MEM_HANDLE_NULL) {
        const auto *h = static_cast<const Memh *>(iov->memh);
        const auto *md = ucs_derived_of(f->uct->super.md, uct_portals_md_t);
        return {h->key, h->base, uint32_t(md->rma_pt), 0};
    }
    // Unregistered: the rendezvous ME itself (a get through it completes the send).
    return {kRndvBits | key, reinterpret_cast<uintptr_t>(iov->buffer), uint32_t(f->ctl_pt), 0};
}

}  // namespace

extern "C" ucs_status_t uct_portals_ep_tag_eager_short(uct_ep_h tl_ep, uct_tag_t tag, const void *data,
                                                       size_t length) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    UCT_CHECK_LENGTH(length, 0, f->eager_max, "tag_eager_short");
    const int d = f->get_tx_desc(ep);
    if (d < 0) return UCS_ERR_NO_RESOURCE;
    if (length <= kCopyFirstMax || length > f->max_volatile) {
        if (length) std::memcpy(f->tx_desc_addr(d), data, length);
        return eager_send(ep, tag, 0, d, length);
    }
    return put_message_from(ep, MsgKind::TagEager, ep->tag_pt, tag, 0, d, data, length, true, false);
}

extern "C" ssize_t uct_portals_ep_tag_eager_bcopy(uct_ep_h tl_ep, uct_tag_t tag, uint64_t imm,
                                                  uct_pack_callback_t pack_cb, void *arg, unsigned) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    if (!f->can_send(ep)) return UCS_ERR_NO_RESOURCE;
    int d;
    const ssize_t length = pack_into_desc(ep, &d, pack_cb, arg, f->eager_max, "tag_eager_bcopy");
    if (length < 0) return length;
    const ucs_status_t s = eager_send(ep, tag, imm, d, size_t(length));
    return s == UCS_OK ? length : ssize_t(s);
}

extern "C" ucs_status_t uct_portals_ep_tag_eager_zcopy(uct_ep_h tl_ep, uct_tag_t tag, uint64_t imm,
                                                       const uct_iov_t *iov, size_t iovcnt, unsigned,
                                                       uct_completion_t *comp) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    UCT_CHECK_PARAM(iovcnt <= kMaxIov, "tag_eager_zcopy: iovcnt %zu > %zu", iovcnt, kMaxIov);
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0, f->eager_max, "tag_eager_zcopy");
    if (!f->can_send(ep)) return UCS_ERR_NO_RESOURCE;
    ucs_status_t s;
    if (iovcnt == 1 && iov[0].count == 1) {  // what UCP sends: from the buffer itself
        const int d = f->get_tx_desc(ep);
        if (d < 0) return UCS_ERR_NO_RESOURCE;
        s = put_message_from(ep, MsgKind::TagEager, ep->tag_pt, tag, imm, d, iov[0].buffer, iov[0].length,
                             false, true);
    } else {
        int d;
        const ssize_t len = gather(ep, &d, nullptr, 0, iov, iovcnt, f->eager_max);
        if (len < 0) return ucs_status_t(len);
        s = eager_send(ep, tag, imm, d, size_t(len), true);
    }
    return s == UCS_OK ? f->complete_on_arrival(ep, comp) : s;
}

extern "C" ucs_status_ptr_t uct_portals_ep_tag_rndv_zcopy(uct_ep_h tl_ep, uct_tag_t tag, const void *header,
                                                          unsigned header_length, const uct_iov_t *iov,
                                                          size_t iovcnt, unsigned, uct_completion_t *comp) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    if (iovcnt > 1) {
        ucs_error("portals: tag_rndv_zcopy: iovcnt %zu > 1", iovcnt);
        return UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM);
    }
    if (header_length > f->rndv_max_hdr) {
        ucs_error("portals: tag_rndv_zcopy header of %u bytes exceeds %zu", header_length, f->rndv_max_hdr);
        return UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM);
    }
    const uct_iov_t empty{};
    const uct_iov_t *v = iovcnt ? iov : &empty;
    const size_t length = iovcnt ? uct_iov_get_length(v) : 0;
    if (length > kMaxRndvLength) {
        ucs_error("portals: tag_rndv_zcopy of %zu bytes exceeds %llu", length,
                  (unsigned long long)kMaxRndvLength);
        return UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM);
    }
    Op *op = f->get_rndv_op(ep, comp);
    if (!op) return UCS_STATUS_PTR(UCS_ERR_NO_RESOURCE);
    const uint32_t key = uint32_t(f->next_rndv_key++);
    op->length = length;
    RndvInfo info{length, reinterpret_cast<uintptr_t>(v->buffer), rkey_for(f, v, key)};
    std::memcpy(op->announcement, &info, sizeof info);
    if (header_length) std::memcpy(op->announcement + sizeof info, header, header_length);
    const size_t announcement_length = sizeof info + header_length;

    const ptl_me_t data_me =
        make_me(v->buffer, length, PTL_ME_OP_GET | PTL_ME_USE_ONCE, kRndvBits | key, 0, ep->peer);
    // Read only by a receiver without a matching posted receive; no events (no user_ptr).
    const ptl_me_t announce_me =
        make_me(op->announcement, announcement_length, PTL_ME_OP_GET | PTL_ME_EVENT_SUCCESS_DISABLE,
                kAnnounceBits | key, 0, ep->peer);
    int rc = PtlMEAppend(f->ni, f->ctl_pt, &data_me, PTL_PRIORITY_LIST, op, &op->src_me);
    if (rc == PTL_OK)
        rc = PtlMEAppend(f->ni, f->ctl_pt, &announce_me, PTL_PRIORITY_LIST, nullptr, &op->announce_me);
    if (rc == PTL_OK) {
        // The put carries the data, not the announcement: a posted receive it matches takes
        // the data at once, as hardware tag matching would (one trip, where reading it after
        // a zero-byte announcement is three), truncated to the receive's size (MPI forbids
        // writing past the message); its ACK from the priority list completes the send. An
        // unexpected one leaves at most a descriptor's worth (released unread): the receiver
        // fetches the announcement, which stays until the data was read or UCP cancels.
        const MsgInfo m{MsgKind::TagRndv, uint8_t(f->ctl_pt), 0, uint16_t(announcement_length)};
        const uintptr_t from =
            length ? reinterpret_cast<uintptr_t>(v->buffer) : reinterpret_cast<uintptr_t>(op->announcement);
        rc = PtlPut(f->md, from, length, PTL_ACK_REQ, ep->peer, ep->tag_pt, tag, encode_msg(m), op,
                    rndv_hdr_data(length, key));
    }
    if (rc != PTL_OK && op->src_me != PTL_INVALID_HANDLE)
        PtlMEUnlink(std::exchange(op->src_me, PTL_INVALID_HANDLE));
    if (rc != PTL_OK) {
        f->put_op(op);
        return UCS_STATUS_PTR(status_of(rc));
    }
    return op;
}

// The receiver finished the rendezvous in software (it had no posted receive): forget the
// operation without completing it.
extern "C" ucs_status_t uct_portals_ep_tag_rndv_cancel(uct_ep_h tl_ep, void *opaque) {
    Op *op = static_cast<Op *>(opaque);
    Iface *f = iface_of_ep(tl_ep);
    op->comp = nullptr;
    if (PtlMEUnlink(op->src_me) == PTL_OK) {
        f->put_op(op);
    } else {
        op->cancelled = true;  // its GET event is on its way; it is released then
    }
    return UCS_OK;
}

extern "C" ucs_status_t uct_portals_ep_tag_rndv_request(uct_ep_h tl_ep, uct_tag_t tag, const void *header,
                                                        unsigned header_length, unsigned) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    UCT_CHECK_LENGTH(header_length, 0, f->seg_size, "tag_rndv_request");
    const int d = f->get_tx_desc(ep);
    if (d < 0) return UCS_ERR_NO_RESOURCE;
    if (header_length) std::memcpy(f->tx_desc_addr(d), header, header_length);
    return put_message(ep, MsgKind::TagRndvRequest, ep->tag_pt, tag, 0, d, header_length);
}

extern "C" ucs_status_t uct_portals_iface_tag_recv_zcopy(uct_iface_h tl_iface, uct_tag_t tag,
                                                         uct_tag_t tag_mask, const uct_iov_t *iov,
                                                         size_t iovcnt, uct_tag_context_t *ctx) {
    Iface *f = iface_of(tl_iface);
    UCT_CHECK_PARAM(iovcnt <= 1, "tag_recv_zcopy: iovcnt %zu > 1", iovcnt);
    if (f->tag_context_in_use(ctx)) return UCS_ERR_ALREADY_EXISTS;
    if (f->posted.size() >= f->tm_list_size) return UCS_ERR_EXCEEDS_LIMIT;
    // A message UCP has not seen yet may be for this receive: posted now, the receive would
    // take the message after it instead (wrong order, and cut to this buffer's size). UCP
    // keeps the receive in software until it saw them (hardware tag matching refuses such
    // posts the same way). Messages still on the wires are matched after the append, in order,
    // so only the delivered ones count.
    f->drain_eq(false);
    if (f->unexpected_tag_pending(tag, tag_mask)) return UCS_ERR_NO_RESOURCE;
    TagRecv *t = tag_recv(ctx);
    t->buffer = iovcnt ? iov[0].buffer : nullptr;
    t->length = iovcnt ? uct_iov_get_length(iov) : 0;
    const ptl_me_t me =
        make_me(t->buffer, t->length, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_MANAGE_LOCAL, tag, ~tag_mask);
    const int rc = PtlMEAppend(f->ni, f->tag_pt, &me, PTL_PRIORITY_LIST, ctx, &t->me);
    if (rc != PTL_OK) return rc == PTL_NO_SPACE ? UCS_ERR_EXCEEDS_LIMIT : status_of(rc);
    t->state = kTagPosted;
    f->track_posted(ctx, tag);
    // The same for a message that arrived between the check and the append (the drain may
    // also report this receive matched).
    const size_t seen = f->rx_fifo.size();
    f->drain_eq(false);
    if (t->state == kTagPosted && f->unexpected_tag_pending(tag, tag_mask, seen) &&
        PtlMEUnlink(t->me) == PTL_OK) {
        f->untrack_posted(ctx);
        return UCS_ERR_NO_RESOURCE;
    }
    ++f->stats.posted;
    return UCS_OK;
}

// Cancels a posted receive. If it already matched a message that was not reported yet and
// the cancel is forced, that message is reported as unexpected instead, in its place, so
// UCP (which force-cancels when it matched the receive in software) loses nothing.
extern "C" ucs_status_t uct_portals_iface_tag_recv_cancel(uct_iface_h tl_iface, uct_tag_context_t *ctx,
                                                          int force) {
    Iface *f = iface_of(tl_iface);
    TagRecv *t = tag_recv(ctx);
    if (t->state == kTagPosted && PtlMEUnlink(t->me) == PTL_OK) {
        if (!force && f->is_posted(ctx)) f->cancelled.emplace_back(ctx, f->posted_tag(ctx));
        f->untrack_posted(ctx);
        t->state = kTagCancelled;
        ++f->stats.cancelled;
        return UCS_OK;
    }
    if (!force) return UCS_OK;  // it matched: its completion follows
    f->drain_eq(false);
    for (RxEvent &r : f->rx_fifo) {
        if (r.ctx != ctx || r.unexpected) continue;
        // A rendezvous that left all its data in the buffer completed its send: it is
        // reported as the eager message it now is. A software rendezvous request is already
        // read (or being read) from the sender.
        if (r.msg.kind == MsgKind::TagRndv && rndv_delivered(r.ev)) {
            r.msg.kind = MsgKind::TagEager;
            r.ev.hdr_data = 0;  // no imm: not a synchronous send UCP acknowledges
        }
        const bool fetch = r.msg.kind == MsgKind::TagRndv;
        if (!fetch && !r.buf.fetched) {
            RecvBuf b = f->tag_rx.alloc_fetched(r.buf.length);
            if (!b.data) return UCS_ERR_NO_MEMORY;
            if (r.buf.length) std::memcpy(b.data, r.buf.data, r.buf.length);
            r.buf = b;
        }
        r.unexpected = true;
        r.ctx = nullptr;
        t->state = kTagCancelled;
        if (fetch) {
            r.ready = false;
            f->fetch_truncated(r);
        }
        return UCS_OK;
    }
    // Already reported as consumed (a rendezvous being fetched): drop its completion.
    t->state = kTagCancelled;
    return UCS_OK;
}
